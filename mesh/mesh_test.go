package mesh

import (
	"reflect"
	"strings"
	"testing"
)

func mustNew(t *testing.T, c Config) *Mesh {
	t.Helper()
	m, err := New(c)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func TestValidate(t *testing.T) {
	cases := []struct {
		name string
		cfg  Config
		want string // substring of the error; "" means valid
	}{
		{"ok default order", Config{PP: 2, DP: 2, CP: 1, TP: 2, World: 8}, ""},
		{"ok no world", Config{PP: 1, DP: 3, CP: 1, TP: 1}, ""},
		{"ok custom order", Config{PP: 1, DP: 2, CP: 2, TP: 1, Order: "dp-tp-cp-pp"}, ""},
		{"product mismatch", Config{PP: 2, DP: 3, CP: 1, TP: 2, World: 8},
			"mesh: pp=2 × dp=3 × cp=1 × tp=2 = 12 ≠ world size 8"},
		{"zero axis", Config{PP: 1, DP: 0, CP: 1, TP: 1}, "dp=0: every axis size must be at least 1"},
		{"negative tp", Config{PP: 1, DP: 1, CP: 1, TP: -2}, "tp=-2"},
		{"order too short", Config{PP: 1, DP: 1, CP: 1, TP: 1, Order: "tp-dp-pp"}, "must list the 4 axes"},
		{"order repeats", Config{PP: 1, DP: 1, CP: 1, TP: 1, Order: "tp-dp-dp-pp"}, "names dp twice"},
		{"order unknown", Config{PP: 1, DP: 1, CP: 1, TP: 1, Order: "tp-dp-ep-pp"}, `unknown axis "ep"`},
		{"negative node", Config{PP: 1, DP: 1, CP: 1, TP: 1, RanksPerNode: -1}, "ranks per node=-1"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := c.cfg.Validate()
			_, nerr := New(c.cfg)
			if c.want == "" {
				if err != nil || nerr != nil {
					t.Fatalf("want valid, got %v / %v", err, nerr)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error %v, want it to contain %q", err, c.want)
			}
			if nerr == nil {
				t.Fatal("New accepted an invalid config")
			}
		})
	}
}

// TestMegatronExample checks the layout from Megatron-LM's documentation: 16
// GPUs, tp=2, pp=4, dp=2, tp fastest, then dp, then pp.
func TestMegatronExample(t *testing.T) {
	m := mustNew(t, Config{PP: 4, DP: 2, CP: 1, TP: 2, World: 16, RanksPerNode: 8})
	cases := []struct {
		axes []Axis
		want [][]int
	}{
		{[]Axis{TP}, [][]int{{0, 1}, {2, 3}, {4, 5}, {6, 7}, {8, 9}, {10, 11}, {12, 13}, {14, 15}}},
		{[]Axis{PP}, [][]int{{0, 4, 8, 12}, {1, 5, 9, 13}, {2, 6, 10, 14}, {3, 7, 11, 15}}},
		{[]Axis{DP}, [][]int{{0, 2}, {1, 3}, {4, 6}, {5, 7}, {8, 10}, {9, 11}, {12, 14}, {13, 15}}},
		{[]Axis{DP, CP}, [][]int{{0, 2}, {1, 3}, {4, 6}, {5, 7}, {8, 10}, {9, 11}, {12, 14}, {13, 15}}},
		{[]Axis{CP}, [][]int{{0}, {1}, {2}, {3}, {4}, {5}, {6}, {7}, {8}, {9}, {10}, {11}, {12}, {13}, {14}, {15}}},
		{[]Axis{TP, DP}, [][]int{{0, 1, 2, 3}, {4, 5, 6, 7}, {8, 9, 10, 11}, {12, 13, 14, 15}}},
		{[]Axis{PP, DP, CP, TP}, [][]int{{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15}}},
	}
	for _, c := range cases {
		got, err := m.Groups(c.axes...)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, c.want) {
			t.Errorf("groups along %v:\n got %v\nwant %v", c.axes, got, c.want)
		}
	}
	if c, _ := m.Coords(13); c != (Coord{PP: 3, DP: 0, CP: 0, TP: 1}) {
		t.Errorf("coords of 13 = %v", c)
	}
	for r, wantNode := range []int{0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1} {
		if m.Node(r) != wantNode {
			t.Errorf("node of %d = %d, want %d", r, m.Node(r), wantNode)
		}
	}
	if m.Nodes() != 2 {
		t.Errorf("nodes = %d", m.Nodes())
	}
	tp, _ := m.Group(9, TP)
	pp, _ := m.Group(9, PP)
	if m.SpansNodes(tp) || !m.SpansNodes(pp) {
		t.Errorf("tp group %v should sit in a node, pp group %v should span nodes", tp, pp)
	}
}

// TestOrders checks rank ↔ coordinates against the layout formula for several
// orders, and that every group contains its rank, agrees with it off the
// group's axes, and partitions the world.
func TestOrders(t *testing.T) {
	cases := []struct {
		cfg      Config
		rank     int
		want     Coord
		dpcpOf5  []int
		nameDPCP string
	}{
		{Config{PP: 2, DP: 2, CP: 2, TP: 2}, 5, Coord{PP: 0, DP: 1, CP: 0, TP: 1}, []int{1, 3, 5, 7}, "cp-dp"},
		{Config{PP: 2, DP: 2, CP: 2, TP: 2, Order: "pp-dp-cp-tp"}, 5, Coord{PP: 1, DP: 0, CP: 1, TP: 0}, []int{1, 3, 5, 7}, "dp-cp"},
		{Config{PP: 3, DP: 2, CP: 1, TP: 1, Order: "dp-pp-tp-cp"}, 5, Coord{PP: 2, DP: 1}, []int{4, 5}, "dp-cp"},
	}
	for _, c := range cases {
		m := mustNew(t, c.cfg)
		if got, _ := m.Coords(c.rank); got != c.want {
			t.Errorf("%+v: coords(%d) = %v, want %v", c.cfg, c.rank, got, c.want)
		}
		if g, _ := m.Group(5, DP, CP); !reflect.DeepEqual(g, c.dpcpOf5) {
			t.Errorf("%+v: dp×cp group of 5 = %v, want %v", c.cfg, g, c.dpcpOf5)
		}
		if n := m.GroupName(CP, DP); n != c.nameDPCP {
			t.Errorf("%+v: name %q, want %q", c.cfg, n, c.nameDPCP)
		}
		checkConsistent(t, m)
	}
}

func checkConsistent(t *testing.T, m *Mesh) {
	t.Helper()
	for r := 0; r < m.Size(); r++ {
		c, err := m.Coords(r)
		if err != nil {
			t.Fatal(err)
		}
		if back, err := m.Rank(c); err != nil || back != r {
			t.Fatalf("rank(coords(%d)) = %d, %v", r, back, err)
		}
	}
	axesSets := [][]Axis{{TP}, {CP}, {DP}, {PP}, {DP, CP}, {TP, PP}, {PP, DP, CP, TP}}
	for _, axes := range axesSets {
		gs, err := m.Groups(axes...)
		if err != nil {
			t.Fatal(err)
		}
		count := make([]int, m.Size())
		for _, g := range gs {
			for _, r := range g {
				count[r]++
				mine, _ := m.Group(r, axes...)
				if !reflect.DeepEqual(mine, g) {
					t.Fatalf("Group(%d, %v) = %v, but Groups lists %v", r, axes, mine, g)
				}
				cr, _ := m.Coords(r)
				c0, _ := m.Coords(g[0])
				for _, a := range Axes() {
					if !contains(axes, a) && cr.Get(a) != c0.Get(a) {
						t.Fatalf("group %v along %v mixes %s coordinates", g, axes, a)
					}
				}
			}
		}
		for r, n := range count {
			if n != 1 {
				t.Fatalf("rank %d is in %d groups along %v", r, n, axes)
			}
		}
	}
}

func contains(axes []Axis, a Axis) bool {
	for _, b := range axes {
		if a == b {
			return true
		}
	}
	return false
}

func TestErrors(t *testing.T) {
	m := mustNew(t, Config{PP: 1, DP: 2, CP: 1, TP: 2})
	if _, err := m.Coords(4); err == nil || !strings.Contains(err.Error(), "rank 4 out of range [0, 4)") {
		t.Errorf("Coords(4): %v", err)
	}
	if _, err := m.Rank(Coord{TP: 2}); err == nil || !strings.Contains(err.Error(), "tp=2 out of range") {
		t.Errorf("Rank(tp=2): %v", err)
	}
	if _, err := m.Group(0); err == nil {
		t.Error("Group with no axes accepted")
	}
	if _, err := m.Group(0, Axis("ep")); err == nil {
		t.Error("unknown axis accepted")
	}
	if _, err := m.Group(-1, TP); err == nil {
		t.Error("negative rank accepted")
	}
	if a, err := ParseAxis(" TP "); err != nil || a != TP {
		t.Errorf("ParseAxis: %v %v", a, err)
	}
	if m.Nodes() != 1 || m.RanksPerNode() != 4 || m.SpansNodes([]int{0, 3}) {
		t.Error("unset RanksPerNode should make one node")
	}
}
