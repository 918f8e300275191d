package checkpoint

import (
	"strings"
	"testing"
)

// qkvShards cuts a (6,4) tensor as tensor parallelism cuts c_attn for
// t ranks: viewed (3, 2, 4), rank r holds the box (3, 2/t, 4) at
// (0, r·2/t, 0), and ZeRO splits each rank's box in two ranges.
func qkvShards(t *testing.T, v []float32, tp int) [][]Shard {
	t.Helper()
	out := make([][]Shard, tp)
	for r := 0; r < tp; r++ {
		sl := Slice{View: []int{3, 2, 4}, Off: []int{0, r * 2 / tp, 0}, Ext: []int{3, 2 / tp, 4}}
		var box []float32
		sl.runs(0, int64(3*2/tp*4), func(_, g, n int64) { box = append(box, v[g:g+n]...) })
		half := len(box) / 2
		out[r] = []Shard{SliceShard("qkv", []int{6, 4}, sl, 0, box[:half]), SliceShard("qkv2", []int{6, 4}, sl, int64(half), box[half:])}
	}
	return out
}

// Box shards written by several ranks (tp boxes, each split in two ranges
// written by two ranks, as ZeRO over a dp group does) assemble into the
// global tensor.
func TestSliceRoundTrip(t *testing.T) {
	v := make([]float32, 24)
	for i := range v {
		v[i] = float32(i) + 0.25
	}
	for _, tp := range []int{1, 2} {
		s := newStore(t, 0)
		shards := qkvShards(t, v, tp)
		for r := 0; r < tp; r++ {
			second := shards[r][1]
			second.Name = "qkv"
			if err := s.WriteRank(1, r, 2*tp, []Shard{shards[r][0]}); err != nil {
				t.Fatal(err)
			}
			if err := s.WriteRank(1, tp+r, 2*tp, []Shard{second}); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := s.Commit(Manifest{Step: 1, World: 2 * tp}); err != nil {
			t.Fatal(err)
		}
		c, err := Open(s.Config().Dir)
		if err != nil {
			t.Fatal(err)
		}
		sh, err := c.ReadTensor("qkv")
		if err != nil {
			t.Fatal(err)
		}
		got, _ := sh.Float32()
		if !equalF32(got, v) {
			t.Errorf("tp=%d: assembled %v, want %v", tp, got, v)
		}
	}
}

// Boxes that overlap, or that do not cover the tensor, are refused at
// commit; disjoint boxes that cover it are accepted.
func TestSliceCoverage(t *testing.T) {
	v := make([]float32, 24)
	box := func(off int) Shard {
		return SliceShard("w", []int{6, 4}, Slice{View: []int{3, 2, 4}, Off: []int{0, off, 0}, Ext: []int{3, 1, 4}}, 0, v[:12])
	}
	for _, tc := range []struct {
		name   string
		shards [][]Shard
		want   string // "" accepted
	}{
		{"disjoint", [][]Shard{{box(0)}, {box(1)}}, ""},
		{"overlap", [][]Shard{{box(0)}, {box(0)}}, "held twice"},
		{"gap", [][]Shard{{box(1)}}, "shards hold 12 elements of 24"},
	} {
		s := newStore(t, 0)
		for r, sh := range tc.shards {
			if err := s.WriteRank(1, r, len(tc.shards), sh); err != nil {
				t.Fatal(err)
			}
		}
		_, err := s.Commit(Manifest{Step: 1, World: len(tc.shards)})
		if (tc.want == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("%s: commit %v, want %q", tc.name, err, tc.want)
		}
	}
	bad := SliceShard("w", []int{6, 4}, Slice{View: []int{3, 2, 4}, Off: []int{0, 1, 0}, Ext: []int{3, 2, 4}}, 0, v)
	if err := newStore(t, 0).WriteRank(1, 0, 1, []Shard{bad}); err == nil || !strings.Contains(err.Error(), "not inside") {
		t.Errorf("a box outside its view: %v", err)
	}
}
