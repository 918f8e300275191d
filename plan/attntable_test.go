package plan

import (
	"strings"
	"testing"
)

// testAttnTable is a table whose costs are a(d) + b(d)/T exactly, with
// a = d/64 ns and b = 40 ns, per kernel scaled by k+1: Score must give
// the formula at the grid points, between them (linear in 1/T, linear
// in d) and below the shortest length; above the longest it holds.
func testAttnTable() *AttnTable { return testAttnTableOf(32, 64) }

// testAttnTableOf is testAttnTable at the head sizes given.
func testAttnTableOf(heads ...int) *AttnTable {
	t := &AttnTable{Seq: []int{128, 512}, Head: heads}
	for k := range t.Cost {
		t.Cost[k] = make([][]float64, len(t.Seq))
		for i, T := range t.Seq {
			for _, d := range t.Head {
				t.Cost[k][i] = append(t.Cost[k][i], attnFormula(k, T, d))
			}
		}
	}
	return t
}

func attnFormula(k, T, d int) float64 {
	return float64(k+1) * (float64(d)/64 + 40/float64(T)) * 1e-9
}

func TestAttnTableScore(t *testing.T) {
	tab := testAttnTable()
	if err := tab.Validate("device.attention"); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ T, d int }{{128, 32}, {512, 64}, {256, 32}, {200, 48}, {64, 64}, {32, 32}, {384, 96}, {128, 128}} {
		for k := range AttnKinds {
			if got, want := tab.Score(k, c.T, c.d), attnFormula(k, c.T, c.d); !near(got, want) {
				t.Errorf("kind %d T %d d %d: %g ns per score, want %g", k, c.T, c.d, got*1e9, want*1e9)
			}
		}
	}
	if got, want := tab.Score(AttnFlashFwd, 4096, 64), attnFormula(AttnFlashFwd, 512, 64); !near(got, want) {
		t.Errorf("T 4096: %g ns, want the longest length's %g (held, not extrapolated)", got*1e9, want*1e9)
	}
	one := &AttnTable{Seq: []int{256}, Head: []int{64}}
	for k := range one.Cost {
		one.Cost[k] = [][]float64{{float64(k+1) * 1e-9}}
	}
	if got := one.Score(AttnDenseBwd, 64, 128); !near(got, 4e-9) {
		t.Errorf("a one-point table: %g ns, want its 4", got*1e9)
	}
	c := tab.Core(true, 8, 128, 64)
	if s := 8.0 * 128 * 129 / 2; !near(c.fwd, s*attnFormula(AttnFlashFwd, 128, 64)) || !near(c.bwd, s*attnFormula(AttnFlashBwd, 128, 64)) {
		t.Errorf("flash core %+v, want %g scores at the flash costs", c, s)
	}
	if d := tab.Core(false, 8, 128, 64); !near(d.fwd, 3*c.fwd) || !near(d.bwd, 2*c.bwd) {
		t.Errorf("dense core %+v, want the dense costs (3× and 2× the flash ones here)", d)
	}
}

// [device.attention] is read in ns per score and checked: a wrong shape
// or value is an error naming the key.
func TestAttnTableKey(t *testing.T) {
	base := "name = \"h\"\ndevices_per_node = 2\nengine_stash = true\n[device]\nmemory_gib = 1\nmem_bw_gbps = 10\npeak_tflops = { fp32 = 0.2 }\n[device.attention]\n%s\n[intra]\nbw_gbps = 1\n[inter]\nbw_gbps = 1\n"
	good := "seq = [128, 512]\nhead = [32, 64]\nflash_fwd = [[1, 2], [3, 4]]\nflash_bwd = [[1, 2], [3, 4]]\ndense_fwd = [[1, 2], [3, 4]]\ndense_bwd = [[1, 2], [3, 4.5]]"
	cl, err := ParseClusterFile([]byte(strings.Replace(base, "%s", good, 1)))
	if err != nil || cl.Accel.Attn == nil || !near(cl.Accel.Attn.Cost[AttnDenseBwd][1][1], 4.5e-9) || cl.Accel.Attn.Seq[1] != 512 {
		t.Fatalf("parsed %+v err %v, want dense_bwd[1][1] = 4.5 ns", cl.Accel.Attn, err)
	}
	for _, c := range []struct{ from, to, want string }{
		{"seq = [128, 512]", "seq = [512, 128]", "device.attention.seq=[512 128]: must be positive and ascending"},
		{"head = [32, 64]", "head = []", "device.attention.head: must list at least one value"},
		{"head = [32, 64]", "head = [32, 32]", "must not repeat"},
		{"flash_bwd = [[1, 2], [3, 4]]", "flash_bwd = [[1, 2]]", "device.attention.flash_bwd: has 1 rows: must have one per seq (2)"},
		{"dense_fwd = [[1, 2], [3, 4]]", "dense_fwd = [[1, 2], [3]]", "device.attention.dense_fwd: row 1 has 1 values"},
		{"dense_bwd = [[1, 2], [3, 4.5]]", "dense_bwd = [[1, 2], [3, -4]]", "device.attention.dense_bwd: -4 ns per score: must be positive"},
		{"flash_fwd = [[1, 2], [3, 4]]\n", "", "device.attention.flash_fwd: has 0 rows"},
	} {
		_, err := ParseClusterFile([]byte(strings.Replace(base, "%s", strings.Replace(good, c.from, c.to, 1), 1)))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: got %v, want an error containing %q", c.to, err, c.want)
		}
	}
}

// The planner prices the attention core from the table on an engine
// cluster at head sizes of whole 32-column tiles without cp, flash and
// materialising alike, and from the efficiency model otherwise.
func TestAttentionCoreFromTable(t *testing.T) {
	j := hostJob(t, 2, 0, 0)
	tab := testAttnTable()
	withT := j
	withT.Cluster.Accel.Attn = tab
	core := func(j Job, plan string) passTime {
		p := mustParse(t, plan)
		return j.attentionCore(p, j.kernelsFor(p.Precision))
	}
	heads := func(plan string) float64 {
		p := mustParse(t, plan)
		return float64(p.MBS) * float64(j.Model.Heads) / float64(p.TP)
	}
	hd := j.Model.HD()
	if !FlashHeadTiled(hd) {
		t.Fatalf("hostJob's head size %d: want a multiple of 32", hd)
	}
	for _, plan := range []string{"dp=2,flash=on", "dp=2,flash=off", "tp=2,flash=on", "dp=2,precision=bf16,flash=off"} {
		p := mustParse(t, plan)
		want := tab.Core(p.Flash, heads(plan), j.Seq, hd)
		if got := core(withT, plan); got != want {
			t.Errorf("%s: core %+v, want the table's %+v", plan, got, want)
		}
	}
	for _, c := range []struct {
		name string
		j    Job
		plan string
	}{{"cp=2", withT, "cp=2,flash=on"}, {"GPU ranks", gpuRanks(withT), "dp=2,flash=on"}} {
		if got, want := core(c.j, c.plan), core(without(c.j), c.plan); got != want {
			t.Errorf("%s: core %+v, want the efficiency model's %+v", c.name, got, want)
		}
	}
	narrow := withT
	narrow.Model.Heads = j.Model.Hidden / 16
	if got, want := core(narrow, "dp=2,flash=on"), core(without(narrow), "dp=2,flash=on"); got != want {
		t.Errorf("head size 16: core %+v, want the efficiency model's %+v", got, want)
	}
	// A table that measured head size 16 prices it; 48, neither measured
	// nor whole tiles, stays the efficiency model's.
	narrow.Cluster.Accel.Attn = testAttnTableOf(16, 32, 64)
	for _, plan := range []string{"dp=2,flash=on", "dp=2,flash=off"} {
		p := mustParse(t, plan)
		if got, want := core(narrow, plan), narrow.Cluster.Accel.Attn.Core(p.Flash, float64(p.MBS)*float64(narrow.Model.Heads)/float64(p.TP), j.Seq, 16); got != want {
			t.Errorf("head size 16 in the table, %s: core %+v, want the table's %+v", plan, got, want)
		}
	}
	odd := narrow
	odd.Model.Heads, odd.Model.Hidden = 4, 192
	if got, want := core(odd, "dp=2,flash=off"), core(without(odd), "dp=2,flash=off"); got != want {
		t.Errorf("head size 48: core %+v, want the efficiency model's %+v", got, want)
	}
}

func gpuRanks(j Job) Job { j.Cluster.EngineStash = false; return j }
func without(j Job) Job  { j.Cluster.Accel.Attn = nil; return j }
