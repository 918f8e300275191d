package world

import (
	"errors"

	"trellis/comm"
	"trellis/comm/hier"
	"trellis/comm/shm"
	"trellis/comm/tcp"
)

// shmGroups is how many segments of the host's size auto wants /dev/shm
// to hold: the world's and a few groups' (a 3D plan makes a handful).
const shmGroups = 4

// openAuto: without a launcher, local; with one, a TCP world for the
// rendezvous, then shared memory inside each host when every rank can use
// it (package doc).
func openAuto(cfg Config) (*World, error) {
	p := cfg.Placement
	if p == nil {
		return openLocal(cfg)
	}
	tc, err := tcpConfig(cfg)
	if err != nil {
		return nil, err
	}
	inter, err := tcp.New(tc)
	if err != nil {
		return nil, err
	}
	if p.Size == 1 {
		return opened(inter, "tcp"), nil
	}
	w, err := autoShm(cfg, inter)
	if err != nil {
		inter.Close()
		return nil, err
	}
	return w, nil
}

// autoShm agrees with every rank on whether to use shared memory, then
// builds the host worlds and the hierarchy, or stays on TCP.
func autoShm(cfg Config, inter comm.Group) (*World, error) {
	p := cfg.Placement
	hosts, err := gatherInts(inter, p.NodeRank)
	if err != nil {
		return nil, err
	}
	var members []int
	idx := 0
	for r, h := range hosts {
		if h == p.NodeRank {
			if r == p.Rank {
				idx = len(members)
			}
			members = append(members, r)
		}
	}
	sc, cerr := shmConfig(cfg, members, idx)
	if cerr == nil {
		dir := sc.Dir
		if dir == "" {
			dir = shm.DefaultDir
		}
		cerr = shm.Usable(dir, shmGroups*shm.SegmentBytes(sc, len(members)))
	}
	bad := 0
	if cerr != nil {
		bad = 1
		cfg.log().Warn("backend auto: shared memory is unusable on this rank's host; the job falls back to tcp", "rank", p.Rank, "reason", cerr.Error())
	}
	flag := []float32{float32(bad)}
	if err := comm.AllReduce(inter, comm.F32(flag), comm.Max); err != nil {
		return nil, err
	}
	if flag[0] != 0 {
		if bad == 0 && idx == 0 {
			cfg.log().Warn("backend auto: another rank cannot use shared memory (see its warning); the job falls back to tcp", "rank", p.Rank)
		}
		return opened(inter, "tcp"), nil
	}
	intra, err := shm.New(sc)
	if err != nil {
		return nil, err
	}
	g, err := hier.New(hier.Config{Inter: inter, Intra: intra, Hosts: hosts})
	if err != nil {
		return nil, errors.Join(err, intra.Close())
	}
	backend := "hier"
	switch g {
	case intra:
		backend = "shm" // one host
	case inter:
		backend = "tcp" // one rank per host
	}
	return opened(g, backend), nil
}
