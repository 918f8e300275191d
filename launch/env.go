package launch

import (
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"

	"trellis/comm/tcp"
)

// DefaultMasterPort is the rendezvous port when a scheduler environment
// names none (the same default as torchrun).
const DefaultMasterPort = 29500

// Env is where a worker sits in the job, as its launcher told it.
type Env struct {
	Rank           int // world rank
	WorldSize      int
	LocalRank      int // rank within this node
	LocalWorldSize int // ranks on this node
	NodeRank       int
	MasterAddr     string // host of rank 0's rendezvous store
	MasterPort     int
	Source         string // "trellis launch", "torchrun", "slurm" or "openmpi"
	// Elastic (TRELLIS_ELASTIC=1, set by an elastic trellis launch) says
	// the world may be smaller than the job's plan was made for: the
	// worker re-derives the plan's data-parallel degree for WorldSize.
	Elastic bool
}

// EnvElastic is the variable an elastic launcher sets to 1 (see
// Env.Elastic).
const EnvElastic = "TRELLIS_ELASTIC"

// WorkerEnv reads this process's environment; see ParseEnv.
func WorkerEnv() (Env, error) { return ParseEnv(os.LookupEnv) }

// ParseEnv recognises, in this order:
//
//   - torchrun style (what `trellis launch` sets): RANK, WORLD_SIZE,
//     LOCAL_RANK, LOCAL_WORLD_SIZE, GROUP_RANK or NODE_RANK, MASTER_ADDR,
//     MASTER_PORT;
//   - Slurm (srun): SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID, SLURM_NODEID,
//     SLURM_NTASKS_PER_NODE or SLURM_STEP_TASKS_PER_NODE/SLURM_TASKS_PER_NODE
//     (e.g. "4(x2),3");
//   - Open MPI (mpirun): OMPI_COMM_WORLD_RANK, OMPI_COMM_WORLD_SIZE,
//     OMPI_COMM_WORLD_LOCAL_RANK, OMPI_COMM_WORLD_LOCAL_SIZE.
//
// Under Slurm and Open MPI, MASTER_ADDR and MASTER_PORT still win when set.
// Otherwise Slurm's master is the first host of SLURM_STEP_NODELIST or
// SLURM_JOB_NODELIST (where rank 0 runs), else SLURM_LAUNCH_NODE_IPADDR;
// Open MPI's is 127.0.0.1 when the whole job is on one node (else
// MASTER_ADDR is required); the port defaults to 29500.
func ParseEnv(lookup func(string) (string, bool)) (Env, error) {
	get := func(k string) string { v, _ := lookup(k); return strings.TrimSpace(v) }
	var e Env
	var err error
	switch {
	case get("RANK") != "" || get("WORLD_SIZE") != "":
		e, err = torchrunEnv(get)
	case get("SLURM_PROCID") != "":
		e, err = slurmEnv(get)
	case get("OMPI_COMM_WORLD_RANK") != "":
		e, err = ompiEnv(get)
	default:
		return Env{}, fmt.Errorf("launch: no launcher environment: set RANK and WORLD_SIZE (trellis launch, torchrun), or run under srun or mpirun")
	}
	if err != nil {
		return Env{}, err
	}
	if a := get("MASTER_ADDR"); a != "" {
		e.MasterAddr = a
	}
	switch v := get(EnvElastic); v {
	case "", "0":
	case "1":
		e.Elastic = true
	default:
		return Env{}, fmt.Errorf("launch: %s=%q: must be 0 or 1", EnvElastic, v)
	}
	if p := get("MASTER_PORT"); p != "" {
		if e.MasterPort, err = strconv.Atoi(p); err != nil {
			return Env{}, fmt.Errorf("launch: MASTER_PORT=%q: not a port number", p)
		}
	}
	return e, e.Validate()
}

// Validate checks that the ranks and the master fit together.
func (e Env) Validate() error {
	switch {
	case e.WorldSize < 1:
		return fmt.Errorf("launch: world size %d (%s): must be at least 1", e.WorldSize, e.Source)
	case e.Rank < 0 || e.Rank >= e.WorldSize:
		return fmt.Errorf("launch: rank %d (%s): must be in [0, world size %d)", e.Rank, e.Source, e.WorldSize)
	case e.LocalWorldSize < 1 || e.LocalRank < 0 || e.LocalRank >= e.LocalWorldSize:
		return fmt.Errorf("launch: local rank %d of %d (%s): must be in [0, local world size)", e.LocalRank, e.LocalWorldSize, e.Source)
	case e.WorldSize > 1 && e.MasterAddr == "":
		return fmt.Errorf("launch: no rendezvous host (%s): set MASTER_ADDR", e.Source)
	case e.WorldSize > 1 && (e.MasterPort < 1 || e.MasterPort > 65535):
		return fmt.Errorf("launch: MASTER_PORT=%d (%s): must be in [1, 65535]", e.MasterPort, e.Source)
	}
	return nil
}

// TCPConfig is the comm/tcp configuration of this worker: its rank and the
// master from e, the job token (TRELLIS_JOB_TOKEN or TRELLIS_JOB_TOKEN_FILE)
// and timeouts (TRELLIS_COMM_TIMEOUT, ...) from lookup (os.LookupEnv).
func (e Env) TCPConfig(lookup func(string) (string, bool)) (tcp.Config, error) {
	over := map[string]string{
		tcp.EnvRank:       strconv.Itoa(e.Rank),
		tcp.EnvWorldSize:  strconv.Itoa(e.WorldSize),
		tcp.EnvMasterAddr: e.MasterAddr,
		tcp.EnvMasterPort: strconv.Itoa(e.MasterPort),
	}
	return tcp.FromLookup(func(k string) (string, bool) {
		if v, ok := over[k]; ok {
			return v, true
		}
		return lookup(k)
	})
}

// MasterHostPort is MasterAddr:MasterPort.
func (e Env) MasterHostPort() string {
	return net.JoinHostPort(e.MasterAddr, strconv.Itoa(e.MasterPort))
}

func atoi(get func(string) string, key string) (int, error) {
	v := get(key)
	n, err := strconv.Atoi(v)
	if err != nil {
		return 0, fmt.Errorf("launch: %s=%q: not an integer", key, v)
	}
	return n, nil
}

// ints reads several integer variables, failing on the first bad one.
func ints(get func(string) string, keys ...string) ([]int, error) {
	out := make([]int, len(keys))
	for i, k := range keys {
		var err error
		if out[i], err = atoi(get, k); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// EnvLauncher names the launcher that set the torchrun-style variables
// (trellis launch sets it to "trellis launch"; absent: torchrun), so that
// messages name the launcher the user ran.
const EnvLauncher = "TRELLIS_LAUNCHER"

func torchrunEnv(get func(string) string) (Env, error) {
	v, err := ints(get, "RANK", "WORLD_SIZE")
	if err != nil {
		return Env{}, err
	}
	src := "torchrun"
	if get(EnvLauncher) == "trellis launch" {
		src = "trellis launch"
	}
	e := Env{Rank: v[0], WorldSize: v[1], LocalRank: v[0], LocalWorldSize: v[1], Source: src}
	if get("LOCAL_RANK") != "" || get("LOCAL_WORLD_SIZE") != "" {
		l, err := ints(get, "LOCAL_RANK", "LOCAL_WORLD_SIZE")
		if err != nil {
			return Env{}, err
		}
		e.LocalRank, e.LocalWorldSize = l[0], l[1]
	}
	for _, k := range []string{"GROUP_RANK", "NODE_RANK"} {
		if get(k) != "" {
			if e.NodeRank, err = atoi(get, k); err != nil {
				return Env{}, err
			}
			break
		}
	}
	return e, nil
}

func ompiEnv(get func(string) string) (Env, error) {
	v, err := ints(get, "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE")
	if err != nil {
		return Env{}, err
	}
	e := Env{Rank: v[0], WorldSize: v[1], LocalRank: v[2], LocalWorldSize: v[3], MasterPort: DefaultMasterPort, Source: "openmpi"}
	if e.LocalWorldSize > 0 {
		e.NodeRank = (e.Rank - e.LocalRank) / e.LocalWorldSize
	}
	if e.LocalWorldSize == e.WorldSize {
		e.MasterAddr = "127.0.0.1"
	}
	return e, nil
}
