package local

import (
	"strings"
	"testing"
	"time"
)

func TestChunk(t *testing.T) {
	for _, n := range []int{0, 1, 15, 16, 17, 100, 1000, 4099} {
		for p := 1; p <= 9; p++ {
			next := 0
			for r := 0; r < p; r++ {
				lo, hi := chunk(n, p, r)
				if lo != next || hi < lo || (r < p-1 && hi%16 != 0) {
					t.Fatalf("n=%d p=%d r=%d: chunk [%d, %d), previous ended at %d", n, p, r, lo, hi, next)
				}
				next = hi
			}
			if next != n {
				t.Fatalf("n=%d p=%d: chunks end at %d", n, p, next)
			}
		}
	}
}

func TestLinkCost(t *testing.T) {
	m := &LinkModel{
		RanksPerNode: 2,
		Intra:        Link{Bandwidth: 1e9, Latency: time.Microsecond},
		Inter:        Link{Bandwidth: 1e8, Latency: time.Millisecond},
	}
	world := []int{0, 1, 2, 3}
	cases := []struct {
		name string
		me   int
		x    func(i int) (int64, int64, bool)
		want time.Duration
	}{
		{"nothing", 0, func(int) (int64, int64, bool) { return 0, 0, false }, 0},
		{"zero bytes pays latency", 0, func(int) (int64, int64, bool) { return 0, 0, true }, time.Millisecond},
		{"intra only", 0, func(i int) (int64, int64, bool) { return 1e6, 0, i == 1 }, time.Microsecond + time.Millisecond},
		{"inter shares the port", 0, func(i int) (int64, int64, bool) { return 1e6, 0, i >= 2 }, time.Millisecond + 20*time.Millisecond},
		{"duplex: max of send and receive", 3, func(i int) (int64, int64, bool) { return 1e6, 3e6, i == 0 }, time.Millisecond + 30*time.Millisecond},
		{"classes in parallel", 1, func(i int) (int64, int64, bool) { return 1e7, 1e7, true }, time.Millisecond + 200*time.Millisecond},
		{"self is free", 2, func(i int) (int64, int64, bool) { return 1e9, 1e9, i == 2 }, 0},
	}
	for _, c := range cases {
		if got := m.Cost(c.me, world, c.x); got != c.want {
			t.Errorf("%s: cost %v, want %v", c.name, got, c.want)
		}
	}
	one := &LinkModel{Intra: Link{Latency: 5 * time.Millisecond}} // one node, unlimited bandwidth
	if got := one.Cost(0, world, func(int) (int64, int64, bool) { return 1e12, 1e12, true }); got != 5*time.Millisecond {
		t.Errorf("one node: cost %v", got)
	}
}

func TestConfigValidate(t *testing.T) {
	cases := []struct {
		cfg  Config
		want string
	}{
		{Config{Size: 1}, ""},
		{Config{Size: 4, Timeout: time.Second, Link: &LinkModel{RanksPerNode: 2}}, ""},
		{Config{Size: 0}, "Size=0"},
		{Config{Size: 2, Timeout: -1}, "Timeout=-1ns"},
		{Config{Size: 2, Link: &LinkModel{RanksPerNode: -1}}, "RanksPerNode=-1"},
		{Config{Size: 2, Link: &LinkModel{Inter: Link{Bandwidth: -5}}}, "bandwidths"},
		{Config{Size: 2, Link: &LinkModel{Intra: Link{Latency: -5}}}, "latencies"},
	}
	for _, c := range cases {
		err := c.cfg.Validate()
		_, nerr := New(c.cfg)
		if c.want == "" {
			if err != nil || nerr != nil {
				t.Errorf("%+v: %v / %v", c.cfg, err, nerr)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), c.want) || nerr == nil {
			t.Errorf("%+v: got %v, want %q", c.cfg, err, c.want)
		}
	}
}

// Point-to-point messages queue on their link: each group's own, or with
// SharedPorts one link from a world rank to another, whatever the group.
func TestSharedPorts(t *testing.T) {
	for _, shared := range []bool{false, true} {
		l := Link{Bandwidth: 1e6, Latency: time.Millisecond}
		gs, err := New(Config{Size: 2, Link: &LinkModel{Intra: l, Inter: l, SharedPorts: shared}})
		if err != nil {
			t.Fatal(err)
		}
		a, err := gs[0].NewGroup("a", []int{0, 1})
		if err != nil {
			t.Fatal(err)
		}
		b, err := gs[0].NewGroup("b", []int{0, 1})
		if err != nil {
			t.Fatal(err)
		}
		t0 := time.Now()
		first := a.(*group).arrival(100_000, 1) // 100 ms on the link
		second := b.(*group).arrival(100_000, 1)
		if d := first.Sub(t0); d < 101*time.Millisecond || d > 150*time.Millisecond {
			t.Errorf("shared %v: the first message arrives after %v, want 101 ms", shared, d)
		}
		gap := second.Sub(first)
		if shared && gap < 99*time.Millisecond {
			t.Errorf("shared ports: the other group's message arrives %v after the first, want 100 ms (it queues)", gap)
		}
		if !shared && gap > 50*time.Millisecond {
			t.Errorf("a link per group: the other group's message arrives %v after the first, want at once", gap)
		}
	}
}

// A collective's emulated wire time runs from when its last member posted
// it, not from when the member's goroutine ran it (on cores the ranks
// keep busy, much later): posted 50 ms ago, a 20 ms phase sleeps no more;
// and it runs after the member's previous operation's wire time, not
// beside it.
func TestWireStartsWhenPosted(t *testing.T) {
	gs, err := New(Config{Size: 2, Link: &LinkModel{Intra: Link{Latency: 20 * time.Millisecond}}})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		for _, g := range gs {
			g.Close()
		}
	}()
	g := gs[0].(*group)
	none := func(int) (int64, int64, bool) { return 0, 0, true }
	g.posted = time.Now().Add(-50 * time.Millisecond)
	t0 := time.Now()
	g.emulate(t0, none)
	if d := time.Since(t0); d > 10*time.Millisecond {
		t.Errorf("a phase posted 50 ms ago with 20 ms of wire time slept %v", d)
	}
	if !g.posted.IsZero() {
		t.Error("the posting time was not consumed by the first phase")
	}
	// The link is busy until 30 ms from now: the next phase ends 20 ms
	// after that, even though it was posted before.
	g.wire = time.Now().Add(30 * time.Millisecond)
	g.posted = time.Now().Add(-50 * time.Millisecond)
	t0 = time.Now()
	g.emulate(t0, none)
	if d := time.Since(t0); d < 48*time.Millisecond {
		t.Errorf("a phase behind 30 ms of the link's earlier work ended after %v, want at least 50 ms", d)
	}
}
