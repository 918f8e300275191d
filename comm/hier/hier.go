package hier

import (
	"errors"
	"fmt"
	"slices"
	"sync"

	"trellis/comm"
)

// Config is the two worlds a hierarchy composes and where every rank is.
type Config struct {
	// Inter is this rank's group of every rank of the job (comm/tcp,
	// comm/mpi): ranks 0..N-1 are the world ranks.
	Inter comm.Group
	// Intra is this rank's group of the ranks of its host (comm/shm), in
	// world-rank order: Intra.GlobalRanks() lists their world ranks.
	Intra comm.Group
	// Hosts[r] identifies the host of world rank r (any integers; equal
	// means one host). len(Hosts) = Inter.Size().
	Hosts []int
}

// Validate checks that Intra holds exactly this rank's host, in order.
func (c Config) Validate() error {
	switch {
	case c.Inter == nil || c.Intra == nil:
		return errors.New("hier: Inter and Intra must both be set")
	case len(c.Hosts) != c.Inter.Size():
		return fmt.Errorf("hier: Hosts has %d entries for an Inter world of %d ranks", len(c.Hosts), c.Inter.Size())
	}
	me := c.Inter.Rank()
	var host []int
	for r, h := range c.Hosts {
		if h == c.Hosts[me] {
			host = append(host, r)
		}
	}
	if got := c.Intra.GlobalRanks(); !slices.Equal(got, host) {
		return fmt.Errorf("hier: Intra holds world ranks %v; this rank's host (Hosts[%d]=%d) holds %v", got, me, c.Hosts[me], host)
	}
	return nil
}

// net is what every group of one hierarchy shares.
type net struct {
	inter, intra comm.Group
	hosts        []int // by world rank
	local        []int // world ranks of this host, by Intra rank
	me           int   // world rank

	mu   sync.Mutex
	made map[string]int // groups made per key, to number their instances
}

// New returns the world group of the hierarchy: Intra itself when the job
// is one host, Inter when every host has one rank, else a hierarchical
// group of all ranks. Closing it closes both worlds.
func New(cfg Config) (comm.Group, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	n := &net{inter: cfg.Inter, intra: cfg.Intra, hosts: slices.Clone(cfg.Hosts), local: cfg.Intra.GlobalRanks(),
		me: cfg.Inter.Rank(), made: map[string]int{}}
	all := make([]int, cfg.Inter.Size())
	for i := range all {
		all[i] = i
	}
	switch n.kind(all) {
	case oneHost:
		cfg.Inter.Close()
		return cfg.Intra, nil
	case allApart:
		cfg.Intra.Close()
		return cfg.Inter, nil
	}
	g, err := n.newGroup("world", all)
	if err != nil {
		return nil, err
	}
	g.world = true
	return g, nil
}

// Kinds of member list.
const (
	oneHost  = iota // every member on this rank's host
	allApart        // no two members on one host
	mixed
)

func (n *net) kind(members []int) int {
	seen := map[int]bool{}
	apart := true
	for _, m := range members {
		apart = apart && !seen[n.hosts[m]]
		seen[n.hosts[m]] = true
	}
	switch {
	case len(seen) == 1:
		return oneHost
	case apart:
		return allApart
	}
	return mixed
}

// intraRanks maps world ranks of this host to Intra ranks.
func (n *net) intraRanks(ws []int) []int {
	out := make([]int, len(ws))
	for i, w := range ws {
		out[i] = slices.Index(n.local, w)
	}
	return out
}

// sub makes the group of members (world ranks) named key#instance: on
// Intra, on Inter, or hierarchical, by where the members are.
func (n *net) sub(key string, members []int) (comm.Group, error) {
	n.mu.Lock()
	inst := n.made[key]
	n.made[key]++
	n.mu.Unlock()
	name := fmt.Sprintf("%s#%d", key, inst)
	switch n.kind(members) {
	case oneHost:
		return n.intra.NewGroup(name, n.intraRanks(members))
	case allApart:
		return n.inter.NewGroup(name, members)
	}
	return n.newGroup(name, members)
}
