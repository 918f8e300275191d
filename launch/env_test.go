package launch

import (
	"reflect"
	"strings"
	"testing"
)

func lookupOf(m map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
}

func TestParseEnv(t *testing.T) {
	for _, c := range []struct {
		name string
		env  map[string]string
		want Env
	}{
		{"torchrun", map[string]string{"RANK": "5", "WORLD_SIZE": "8", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "4",
			"GROUP_RANK": "1", "MASTER_ADDR": "10.0.0.1", "MASTER_PORT": "1234"},
			Env{Rank: 5, WorldSize: 8, LocalRank: 1, LocalWorldSize: 4, NodeRank: 1, MasterAddr: "10.0.0.1", MasterPort: 1234, Source: "torchrun"}},
		{"torchrun single process", map[string]string{"RANK": "0", "WORLD_SIZE": "1"},
			Env{WorldSize: 1, LocalWorldSize: 1, Source: "torchrun"}},
		// trellis launch's workers name it, so messages say what was run.
		{"trellis launch", map[string]string{"RANK": "1", "WORLD_SIZE": "4", "MASTER_ADDR": "a", "MASTER_PORT": "1", "TRELLIS_LAUNCHER": "trellis launch"},
			Env{Rank: 1, WorldSize: 4, LocalRank: 1, LocalWorldSize: 4, MasterAddr: "a", MasterPort: 1, Source: "trellis launch"}},
		{"elastic", map[string]string{"RANK": "0", "WORLD_SIZE": "1", "TRELLIS_ELASTIC": "1"},
			Env{WorldSize: 1, LocalWorldSize: 1, Source: "torchrun", Elastic: true}},
		{"slurm nodelist", map[string]string{"SLURM_PROCID": "6", "SLURM_NTASKS": "8", "SLURM_LOCALID": "2", "SLURM_NODEID": "1",
			"SLURM_TASKS_PER_NODE": "4(x2)", "SLURM_JOB_NODELIST": "gpu[07-08]", "SLURM_LAUNCH_NODE_IPADDR": "10.1.1.1"},
			Env{Rank: 6, WorldSize: 8, LocalRank: 2, LocalWorldSize: 4, NodeRank: 1, MasterAddr: "gpu07", MasterPort: 29500, Source: "slurm"}},
		{"slurm uneven, launch node ip", map[string]string{"SLURM_PROCID": "8", "SLURM_NTASKS": "9", "SLURM_LOCALID": "0", "SLURM_NODEID": "2",
			"SLURM_STEP_TASKS_PER_NODE": "4(x2),1", "SLURM_LAUNCH_NODE_IPADDR": "10.1.1.1", "MASTER_PORT": "4000"},
			Env{Rank: 8, WorldSize: 9, LocalRank: 0, LocalWorldSize: 1, NodeRank: 2, MasterAddr: "10.1.1.1", MasterPort: 4000, Source: "slurm"}},
		{"slurm ntasks per node, MASTER_ADDR wins", map[string]string{"SLURM_PROCID": "1", "SLURM_NTASKS": "2", "SLURM_LOCALID": "1",
			"SLURM_NTASKS_PER_NODE": "2", "SLURM_JOB_NODELIST": "n1", "MASTER_ADDR": "head"},
			Env{Rank: 1, WorldSize: 2, LocalRank: 1, LocalWorldSize: 2, MasterAddr: "head", MasterPort: 29500, Source: "slurm"}},
		{"openmpi one node", map[string]string{"OMPI_COMM_WORLD_RANK": "3", "OMPI_COMM_WORLD_SIZE": "4",
			"OMPI_COMM_WORLD_LOCAL_RANK": "3", "OMPI_COMM_WORLD_LOCAL_SIZE": "4"},
			Env{Rank: 3, WorldSize: 4, LocalRank: 3, LocalWorldSize: 4, MasterAddr: "127.0.0.1", MasterPort: 29500, Source: "openmpi"}},
		{"openmpi two nodes", map[string]string{"OMPI_COMM_WORLD_RANK": "5", "OMPI_COMM_WORLD_SIZE": "8",
			"OMPI_COMM_WORLD_LOCAL_RANK": "1", "OMPI_COMM_WORLD_LOCAL_SIZE": "4", "MASTER_ADDR": "h0", "MASTER_PORT": "7000"},
			Env{Rank: 5, WorldSize: 8, LocalRank: 1, LocalWorldSize: 4, NodeRank: 1, MasterAddr: "h0", MasterPort: 7000, Source: "openmpi"}},
		{"torchrun wins over slurm", map[string]string{"RANK": "1", "WORLD_SIZE": "2", "MASTER_ADDR": "a", "MASTER_PORT": "1",
			"SLURM_PROCID": "0", "SLURM_NTASKS": "1"},
			Env{Rank: 1, WorldSize: 2, LocalRank: 1, LocalWorldSize: 2, MasterAddr: "a", MasterPort: 1, Source: "torchrun"}},
	} {
		got, err := ParseEnv(lookupOf(c.env))
		if err != nil || !reflect.DeepEqual(got, c.want) {
			t.Errorf("%s: got %+v, %v\nwant %+v", c.name, got, err, c.want)
		}
	}
}

func TestParseEnvErrors(t *testing.T) {
	for _, c := range []struct {
		name string
		env  map[string]string
		want string
	}{
		{"nothing", map[string]string{}, "no launcher environment"},
		{"rank not a number", map[string]string{"RANK": "x", "WORLD_SIZE": "2"}, `RANK="x"`},
		{"rank out of range", map[string]string{"RANK": "2", "WORLD_SIZE": "2", "MASTER_ADDR": "a", "MASTER_PORT": "1"}, "rank 2"},
		{"no master", map[string]string{"RANK": "0", "WORLD_SIZE": "2", "MASTER_PORT": "1"}, "MASTER_ADDR"},
		{"bad port", map[string]string{"RANK": "0", "WORLD_SIZE": "2", "MASTER_ADDR": "a", "MASTER_PORT": "99999"}, "MASTER_PORT=99999"},
		{"bad elastic", map[string]string{"RANK": "0", "WORLD_SIZE": "1", "TRELLIS_ELASTIC": "yes"}, `TRELLIS_ELASTIC="yes": must be 0 or 1`},
		{"slurm no tasks per node", map[string]string{"SLURM_PROCID": "0", "SLURM_NTASKS": "2", "SLURM_LOCALID": "0"}, "SLURM_NTASKS_PER_NODE"},
		{"slurm bad tasks per node", map[string]string{"SLURM_PROCID": "0", "SLURM_NTASKS": "2", "SLURM_LOCALID": "0",
			"SLURM_TASKS_PER_NODE": "2(x", "SLURM_NODEID": "0"}, "bad task count"},
		{"ompi two nodes without master", map[string]string{"OMPI_COMM_WORLD_RANK": "0", "OMPI_COMM_WORLD_SIZE": "8",
			"OMPI_COMM_WORLD_LOCAL_RANK": "0", "OMPI_COMM_WORLD_LOCAL_SIZE": "4"}, "MASTER_ADDR"},
	} {
		if _, err := ParseEnv(lookupOf(c.env)); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: got %v, want an error mentioning %q", c.name, err, c.want)
		}
	}
}

func TestTasksPerNode(t *testing.T) {
	for in, want := range map[string][]int{"4": {4}, "4(x2)": {4, 4}, "4(x2),3": {4, 4, 3}, "1,2(x3)": {1, 2, 2, 2}} {
		if got, err := TasksPerNode(in); err != nil || !reflect.DeepEqual(got, want) {
			t.Errorf("%q: got %v, %v, want %v", in, got, err, want)
		}
	}
	for _, in := range []string{"", "x", "0", "2(x0)", "2(x", "(x2)"} {
		if _, err := TasksPerNode(in); err == nil {
			t.Errorf("%q: accepted", in)
		}
	}
}

func TestFirstHost(t *testing.T) {
	for in, want := range map[string]string{"n1": "n1", "a,b": "a", "gpu[01-04,07],cpu5": "gpu01",
		"gpu[3,5]": "gpu3", "rack1-n[10-12]-ib": "rack1-n10-ib", "x[7]": "x7"} {
		if got, err := FirstHost(in); err != nil || got != want {
			t.Errorf("%q: got %q, %v, want %q", in, got, err, want)
		}
	}
	for _, in := range []string{"", "a]b[", "a[]"} {
		if _, err := FirstHost(in); err == nil {
			t.Errorf("%q: accepted", in)
		}
	}
}

func TestTCPConfig(t *testing.T) {
	e := Env{Rank: 1, WorldSize: 4, LocalRank: 1, LocalWorldSize: 4, MasterAddr: "::1", MasterPort: 4242}
	cfg, err := e.TCPConfig(lookupOf(map[string]string{"TRELLIS_JOB_TOKEN": "tok-0123456789abcdef", "TRELLIS_COMM_TIMEOUT": "3s", "RANK": "3"}))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Rank != 1 || cfg.Size != 4 || cfg.MasterAddr != "[::1]:4242" || cfg.Token != "tok-0123456789abcdef" || cfg.Timeout.Seconds() != 3 {
		t.Fatalf("got %+v", cfg)
	}
}

// A worker trellis launch starts says so: an error under it names
// "trellis launch", not torchrun.
func TestWorkerEnvNamesLauncher(t *testing.T) {
	env := map[string]string{}
	for _, kv := range (Config{NNodes: 1, NProcPerNode: 2, MasterAddr: "127.0.0.1", MasterPort: 1}).workerEnv(1) {
		k, v, _ := strings.Cut(kv, "=")
		env[k] = v
	}
	e, err := torchrunEnv(func(k string) string { return env[k] })
	if err != nil || e.Source != "trellis launch" {
		t.Errorf("a trellis launch worker's environment reads as %q (%v)", e.Source, err)
	}
}
