package comm

import (
	"errors"
	"strings"
	"testing"

	"trellis/tensor"
)

func TestChecks(t *testing.T) {
	f := func(n int) Buf { return F32(make([]float32, n)) }
	h := func(n int) Buf { return BF16(make([]tensor.BF16Bits, n)) }
	whole := f(12) // 3 chunks of 4
	cases := []struct {
		name string
		err  error
		want string // "" means accepted
	}{
		{"allreduce ok", CheckAllReduce(f(3), Avg), ""},
		{"allreduce op", CheckAllReduce(f(3), ReduceOp(3)), "unknown reduce op reduceop(3)"},
		{"reducescatter ok", CheckReduceScatter(f(4), f(12), Sum, 1, 3), ""},
		{"reducescatter in place", CheckReduceScatter(whole.Slice(4, 8), whole, Sum, 1, 3), ""},
		{"reducescatter wrong chunk", CheckReduceScatter(whole.Slice(0, 4), whole, Sum, 1, 3), "overlaps src other than as this rank's chunk 1"},
		{"reducescatter partial overlap", CheckReduceScatter(whole.Slice(5, 9), whole, Sum, 1, 3), "overlaps"},
		{"reducescatter len", CheckReduceScatter(f(4), f(11), Sum, 0, 3), "len(src)=11, want group size × len(dst) = 3 × 4"},
		{"reducescatter dtype", CheckReduceScatter(h(4), f(12), Sum, 0, 3), "src is fp32 but dst is bf16"},
		{"allgather ok", CheckAllGather(h(6), h(2), 2, 3), ""},
		{"allgather empty", CheckAllGather(f(0), f(0), 0, 5), ""},
		{"allgather in place", CheckAllGather(whole, whole.Slice(8, 12), 2, 3), ""},
		{"allgather wrong chunk", CheckAllGather(whole, whole.Slice(8, 12), 0, 3), "overlaps dst"},
		{"allgather len", CheckAllGather(f(7), f(2), 0, 3), "len(dst)=7"},
		{"broadcast ok", CheckBroadcast(f(1), 2, 3), ""},
		{"broadcast root", CheckBroadcast(f(1), 3, 3), "root 3 out of range [0, 3)"},
		{"alltoall ok", CheckAllToAll(f(6), f(6), 3), ""},
		{"alltoall divisible", CheckAllToAll(f(7), f(7), 3), "divisible by the group size 3"},
		{"alltoall overlap", CheckAllToAll(whole.Slice(0, 6), whole.Slice(3, 9), 3), "overlap"},
		{"alltoall dtype", CheckAllToAll(f(6), h(6), 3), "dst is fp32 but src is bf16"},
		{"peer ok", CheckPeer("send", 0, 1), ""},
		{"peer", CheckPeer("recv", -1, 2), "recv: peer -1 out of range [0, 2)"},
		{"match ok", CheckMatch(h(3), tensor.BF16, 3), ""},
		{"match", CheckMatch(f(3), tensor.BF16, 3), "buffer is 3 × fp32 but the message is 3 × bf16"},
	}
	for _, c := range cases {
		if c.want == "" {
			if c.err != nil {
				t.Errorf("%s: unexpected %v", c.name, c.err)
			}
			continue
		}
		if !errors.Is(c.err, ErrArgs) || !strings.Contains(c.err.Error(), c.want) {
			t.Errorf("%s: got %v, want ErrArgs containing %q", c.name, c.err, c.want)
		}
	}
}

func TestCheckNewGroup(t *testing.T) {
	cases := []struct {
		ranks    []int
		rank     int
		want     string
		wantRank int
	}{
		{[]int{2, 0, 1}, 0, "", 1},
		{[]int{3}, 3, "", 0},
		{nil, 0, "empty rank list", 0},
		{[]int{0, 4}, 0, "rank 4 out of range [0, 4)", 0},
		{[]int{1, 1}, 1, "rank 1 listed twice", 0},
		{[]int{1, 2}, 0, "called by rank 0, which is not in [1 2]", 0},
	}
	for _, c := range cases {
		got, err := CheckNewGroup("g", c.ranks, c.rank, 4)
		if c.want == "" {
			if err != nil || got != c.wantRank {
				t.Errorf("%v by %d: got %d, %v; want %d", c.ranks, c.rank, got, err, c.wantRank)
			}
			continue
		}
		if !errors.Is(err, ErrArgs) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v by %d: got %v, want %q", c.ranks, c.rank, err, c.want)
		}
	}
}
