package checkpoint

import (
	"bytes"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

func TestRoundTrip(t *testing.T) {
	for _, world := range []int{1, 4} {
		s := newStore(t, 0)
		dir := save(t, s, 10, world)
		if want := filepath.Join(s.Config().Dir, "step-00000010"); dir != want {
			t.Errorf("dir = %s, want %s", dir, want)
		}
		c, err := Open(s.Config().Dir)
		if err != nil {
			t.Fatal(err)
		}
		if c.Step() != 10 || c.World() != world || c.Plan() != "dp="+string(rune('0'+world)) || c.Dir() != dir {
			t.Errorf("world %d: step %d world %d plan %q dir %s", world, c.Step(), c.World(), c.Plan(), c.Dir())
		}
		var st trainerState
		if err := c.DecodeMeta(&st); err != nil || st != (trainerState{Step: 10, Seed: 42, Position: 2560}) {
			t.Errorf("meta = %+v, %v", st, err)
		}
		for r := 0; r < world; r++ {
			got, err := c.ReadRank(r)
			if err != nil {
				t.Fatal(err)
			}
			want := rankShards(t, 10, r, world)
			if len(got) != len(want) {
				t.Fatalf("rank %d: %d shards, want %d", r, len(got), len(want))
			}
			for _, w := range want {
				g := findShard(got, w.Name)
				if g == nil || !reflect.DeepEqual(g.Shape, w.Shape) || g.Lo != w.Lo || g.Hi != w.Hi || g.DType != w.DType || !bytes.Equal(g.Data, w.Data) {
					t.Errorf("world %d rank %d %s: got %+v, want %+v", world, r, w.Name, g, w)
				}
			}
		}
		checkGlobal(t, c, world)
		if _, err := os.Stat(dir + partialSuffix); !os.IsNotExist(err) {
			t.Errorf("partial directory left behind: %v", err)
		}
	}
}

func checkGlobal(t *testing.T, c *Checkpoint, world int) {
	t.Helper()
	for _, tc := range []struct {
		name string
		want []float32
	}{
		{"wte", global("wte", 32, 10)}, {"adam.m", global("adam.m", 11, 10)},
		{"ln.bias", global("ln.bias", 4, 10)}, {"bf", bf16Round(global("bf", 6, 10))},
	} {
		sh, err := c.ReadTensor(tc.name)
		if err != nil {
			t.Fatal(err)
		}
		got, err := sh.Float32()
		if err != nil || !equalF32(got, tc.want) {
			t.Errorf("world %d: global %s = %v (%v), want %v", world, tc.name, got, err, tc.want)
		}
	}
	if got := len(c.Index().Tensors["wte"].Shards); got != world {
		t.Errorf("wte has %d shards in the index, want %d", got, world)
	}
	if sh, err := c.ReadTensor("empty"); err != nil || len(sh.Data) != 0 || !reflect.DeepEqual(sh.Shape, []int{0, 3}) {
		t.Errorf("empty tensor: %+v, %v", sh, err)
	}
	if _, err := c.ReadTensor("nope"); err == nil || !strings.Contains(err.Error(), `no tensor "nope"`) {
		t.Errorf("missing tensor: %v", err)
	}
}

func findShard(ss []Shard, name string) *Shard {
	for i := range ss {
		if ss[i].Name == name {
			return &ss[i]
		}
	}
	return nil
}

func TestOpenStepDirAndDeterminism(t *testing.T) {
	a, b := newStore(t, 0), newStore(t, 0)
	da, db := save(t, a, 3, 2), save(t, b, 3, 2)
	for _, name := range []string{IndexName, RankFileName(0, 2), RankFileName(1, 2)} {
		x, _ := os.ReadFile(filepath.Join(da, name))
		y, _ := os.ReadFile(filepath.Join(db, name))
		if !bytes.Equal(x, y) || len(x) == 0 {
			t.Errorf("%s differs between two saves of the same state", name)
		}
	}
	c, err := Open(da)
	if err != nil || c.Step() != 3 {
		t.Fatalf("Open(step dir): %v", err)
	}
	latest, _ := os.ReadFile(filepath.Join(a.Config().Dir, LatestName))
	if string(latest) != "step-00000003\n" {
		t.Errorf("latest = %q", latest)
	}
}

func TestRequireSamePlan(t *testing.T) {
	s := newStore(t, 0)
	save(t, s, 1, 2)
	c, err := Open(s.Config().Dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.RequireSamePlan("dp=2", 2); err != nil {
		t.Errorf("same plan: %v", err)
	}
	err = c.RequireSamePlan("dp=2,zero=3", 2)
	if err == nil || !strings.Contains(err.Error(), `plan "dp=2" (world 2)`) || !strings.Contains(err.Error(), `plan "dp=2,zero=3" (world 2)`) {
		t.Errorf("other plan: %v", err)
	}
	if err := c.RequireSamePlan("dp=2", 4); err == nil {
		t.Error("other world accepted")
	}
}

func TestConfigValidate(t *testing.T) {
	cases := []struct {
		c    Config
		want string
	}{
		{Config{}, ""},
		{Config{Dir: "x", Every: 10, Keep: 3}, ""},
		{Config{Dir: "x", Every: -1}, "every=-1 must be >= 0"},
		{Config{Dir: "x", Keep: -2}, "keep=-2 must be >= 0"},
		{Config{Every: 5}, "dir must be set when every=5"},
	}
	for _, c := range cases {
		err := c.c.Validate()
		if (c.want == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), c.want)) {
			t.Errorf("%+v: err = %v, want %q", c.c, err, c.want)
		}
	}
	if _, err := New(Config{}); err == nil {
		t.Error("New without dir succeeded")
	}
	due := Config{Dir: "x", Every: 5}
	for step, want := range map[int]bool{0: false, 4: false, 5: true, 10: true, 11: false} {
		if due.Due(step) != want {
			t.Errorf("Due(%d) = %v", step, !want)
		}
	}
}
