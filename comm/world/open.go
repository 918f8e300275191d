package world

import (
	"fmt"
	"hash/fnv"
	"strconv"
	"time"

	"trellis/comm"
	"trellis/comm/mpi"
	"trellis/comm/shm"
	"trellis/comm/tcp"
)

// tcpConfig is comm/tcp's configuration: the rank and master from the
// placement, the token, timeouts and bounds from the environment.
func tcpConfig(cfg Config) (tcp.Config, error) {
	p := cfg.Placement
	over := map[string]string{
		tcp.EnvRank:       strconv.Itoa(p.Rank),
		tcp.EnvWorldSize:  strconv.Itoa(p.Size),
		tcp.EnvMasterAddr: p.MasterAddr,
		tcp.EnvMasterPort: strconv.Itoa(p.MasterPort),
	}
	c, err := tcp.FromLookup(func(k string) (string, bool) {
		if v, ok := over[k]; ok {
			return v, true
		}
		v := cfg.lookup(k)
		return v, v != ""
	})
	c.Logger = cfg.Log
	return c, err
}

func openTCP(cfg Config) (*World, error) {
	if err := needPlacement("tcp", cfg); err != nil {
		return nil, err
	}
	tc, err := tcpConfig(cfg)
	if err != nil {
		return nil, err
	}
	g, err := tcp.New(tc)
	if err != nil {
		return nil, err
	}
	return opened(g, "tcp"), nil
}

func openMPI(Config) (*World, error) {
	g, err := mpi.World(mpi.Config{})
	if err != nil {
		return nil, err
	}
	return &World{Group: g, Backend: "mpi", close: func() error { return mpi.Finalize(g) }}, nil
}

// shmConfig is the comm/shm configuration of this host's world: members
// (world ranks, in order) and this rank's index among them. The name is
// the launcher's (shm.EnvName, unique per job attempt and host), else one
// derived from the job token, the master and the host.
func shmConfig(cfg Config, members []int, idx int) (shm.Config, error) {
	p := cfg.Placement
	c := shm.Config{Rank: idx, Size: len(members), WorldRanks: members, Name: cfg.lookup(shm.EnvName), Dir: cfg.lookup(shm.EnvDir)}
	if c.Name == "" {
		h := fnv.New64a()
		fmt.Fprintf(h, "%s|%s|%d|%d|%d", cfg.lookup(tcp.EnvToken)+cfg.lookup(tcp.EnvTokenFile), p.MasterAddr, p.MasterPort, p.Size, p.NodeRank)
		c.Name = fmt.Sprintf("trellis-%016x", h.Sum64())
	}
	var err error
	for _, d := range []struct {
		key string
		dst *time.Duration
	}{{tcp.EnvOpTimeout, &c.Timeout}, {tcp.EnvRendezvousTimeout, &c.RendezvousTimeout}} {
		if v := cfg.lookup(d.key); v != "" {
			if *d.dst, err = time.ParseDuration(v); err != nil || *d.dst < 0 {
				return c, fmt.Errorf("world: %s=%q: want a duration such as 10m", d.key, v)
			}
		}
	}
	for _, d := range []struct {
		key string
		dst *int
	}{{shm.EnvSliceBytes, &c.SliceBytes}, {shm.EnvDepth, &c.Depth}} {
		if v := cfg.lookup(d.key); v != "" {
			if *d.dst, err = strconv.Atoi(v); err != nil {
				return c, fmt.Errorf("world: %s=%q: not an integer", d.key, v)
			}
		}
	}
	if v := cfg.lookup(shm.EnvSpin); v != "" {
		if c.Spin, err = time.ParseDuration(v); err != nil || c.Spin < 0 {
			return c, fmt.Errorf("world: %s=%q: want a duration such as 50us", shm.EnvSpin, v)
		}
	}
	if v := cfg.lookup(tcp.EnvMaxBuffered); v != "" {
		if c.MaxBuffered, err = strconv.ParseInt(v, 10, 64); err != nil || c.MaxBuffered < 1 {
			return c, fmt.Errorf("world: %s=%q: must be a positive number of bytes", tcp.EnvMaxBuffered, v)
		}
	}
	return c, c.Validate()
}

// openShm is a world of this host's ranks only.
func openShm(cfg Config) (*World, error) {
	if err := needPlacement("shm", cfg); err != nil {
		return nil, err
	}
	p := cfg.Placement
	if p.LocalSize != p.Size {
		return nil, fmt.Errorf("backend shm: the job has %d ranks, %d on this host: shm joins the ranks of one host (use auto: shared memory inside hosts, TCP between them)", p.Size, p.LocalSize)
	}
	sc, err := shmConfig(cfg, identity(p.Size), p.Rank)
	if err != nil {
		return nil, err
	}
	g, err := shm.New(sc)
	if err != nil {
		return nil, err
	}
	return opened(g, "shm"), nil
}

func identity(n int) []int {
	r := make([]int, n)
	for i := range r {
		r[i] = i
	}
	return r
}

// gatherInts all-gathers one small integer per rank (exact in fp32).
func gatherInts(g comm.Group, v int) ([]int, error) {
	all := make([]float32, g.Size())
	if err := comm.AllGather(g, comm.F32(all), comm.F32([]float32{float32(v)})); err != nil {
		return nil, err
	}
	out := make([]int, len(all))
	for i, x := range all {
		out[i] = int(x)
	}
	return out, nil
}
