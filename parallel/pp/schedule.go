// Package pp is pipeline parallelism: the model's layers are cut into
// pp·vpp chunks (model stages), chunk c of the pipeline running on pipeline
// rank c mod pp, and a step's m micro-batches flow through them.
//
// A schedule is data: for each pipeline rank, the ordered list of Actions
// it performs in one step — forwards F(mb, chunk), backwards B(mb, chunk)
// (for zb-h1 only the input gradient, its weight gradient deferred to
// W(mb, chunk)) and the point-to-point receives and sends they need. Build
// makes the lists, Simulate steps every rank's list together at given
// costs and proves the schedule deadlock-free with every dependency met,
// measuring its bubble and the micro-batches each rank keeps in flight.
// The executor (Stage.Run) runs exactly these lists.
//
// Model stage s = chunk·pp + rank (Megatron's virtual pipeline layout): the
// activations of stage s go to stage s+1 on rank (rank+1) mod pp, the
// gradients to stage s−1 on rank (rank−1) mod pp. DualPipeV lays its 2·pp
// stages out in a V instead (Placement): rank r holds stages r and
// 2pp−1−r, so stages pp−1 and pp meet on rank pp−1, which passes the
// activations and gradients between them locally, without a message.
package pp

import (
	"fmt"
	"strings"
)

// Kind is a pipeline schedule; the names are plan's schedule key.
type Kind string

// The schedules.
const (
	// GPipe runs all m forwards, then all m backwards (Huang et al. 2018):
	// bubble (p−1)/(m+p−1), m micro-batches in flight on every rank.
	GPipe Kind = "gpipe"
	// OneFOneB is PipeDream-Flush (Narayanan et al. 2019): rank r runs
	// p−r−1 warm-up forwards, then alternates one forward and one backward:
	// the same bubble as GPipe with at most p−r micro-batches in flight.
	OneFOneB Kind = "1f1b"
	// Interleaved is 1F1B over v chunks per rank (Narayanan et al. 2021):
	// bubble (p−1)/(v·m+p−1) at the cost of v times the point-to-point
	// traffic; Megatron's order needs m to be a multiple of p.
	Interleaved Kind = "interleaved"
	// ZBH1 is Qi et al. 2023's ZB-H1: 1F1B whose backward is split into the
	// input gradient B (on the critical path) and the weight gradient W,
	// scheduled into what would be the bubble; at most p−r micro-batches
	// in flight (counted until their W) as 1F1B, and a bubble of
	// (p−1)(F+B−W) instead of 1F1B's (p−1)(F+B+W).
	ZBH1 Kind = "zb-h1"
	// DualPipeV is the V-shaped, "cut-in-half" DualPipe (DeepSeek-AI 2024,
	// §3.2.1; Sea AI Lab's DualPipeV, deepseek-ai/DualPipe's dualpipev.py):
	// 2p model stages, rank r holding stages r and 2p−1−r (dualpipev.go),
	// forwards and backwards of different micro-batches paired in the
	// steady state and the backward split into B and W in the warm-up and
	// cool-down. Per chunk costs F, B, W (a chunk is half a 1F1B stage),
	// its bubble is (p−1)(F&B + B − 3W) with F&B a paired forward and
	// backward (F+B+W here, where nothing overlaps compute), against 1F1B's
	// 2(p−1)(F+B+W) in the same chunk units; every rank keeps 2p+1
	// (micro-batch, chunk) pairs in flight at its peak (2p − r of chunk 0,
	// r + 1 of chunk 1), as many as 1F1B's first stage holds of stages twice
	// the size. It needs m ≥ 2p micro-batches.
	DualPipeV Kind = "dualpipev"
)

// Kinds lists the schedules.
func Kinds() []Kind { return []Kind{GPipe, OneFOneB, Interleaved, ZBH1, DualPipeV} }

// Split says whether the kind splits backward passes into B and W (zb-h1,
// dualpipev): a W follows every B, the weight gradients complete there.
func (k Kind) Split() bool { return k == ZBH1 || k == DualPipeV }

// Chunks is the number of chunks per rank the kind runs with vpp set:
// vpp (at least 1), but 2 for dualpipev, whatever vpp says.
func (k Kind) Chunks(vpp int) int {
	if k == DualPipeV {
		return 2
	}
	return max(vpp, 1)
}

// Op is what an Action does.
type Op uint8

// The operations. RecvAct and SendAct carry stage activations forward,
// RecvGrad and SendGrad their gradients backward.
const (
	Forward  Op = iota // F: the chunk's forward pass of a micro-batch
	Backward           // B: its backward pass (zb-h1: the input gradient only)
	Weight             // W: zb-h1's deferred weight gradient
	RecvAct            // receive the chunk's input activations from Peer
	SendAct            // send the chunk's output activations to Peer
	RecvGrad           // receive the gradient of the chunk's output from Peer
	SendGrad           // send the gradient of the chunk's input to Peer
)

var opNames = [...]string{"F", "B", "W", "recvA", "sendA", "recvG", "sendG"}

func (o Op) String() string {
	if int(o) < len(opNames) {
		return opNames[o]
	}
	return fmt.Sprintf("op(%d)", uint8(o))
}

// Compute says whether the op runs the model (F, B, W) rather than moving data.
func (o Op) Compute() bool { return o <= Weight }

// Action is one step of a rank's list.
type Action struct {
	Op    Op
	MB    int // micro-batch, 0..m−1
	Chunk int // this rank's chunk, 0..vpp−1 (model stage Chunk·pp + rank)
	Peer  int // pipeline rank at the other end of a send or receive
	// Movable (zb-h1's W) marks an action the executor may run earlier
	// than its place in the list: where the rank has waited on a receive
	// as long as the action takes, once the action's backward has run and every movable
	// action listed before it has run (movable actions keep their order
	// among themselves). It is never run later, and what it frees is
	// freed at its place in the list (Stage.Step, ahead.go).
	Movable bool
	// Paired (Config.Pair's F) marks a forward that runs beside the
	// backward listed right after it, on a second runner, the two passes
	// handing one compute token between them while each waits on its
	// expert-parallel all-to-alls (Stage's pair.go). The results are the
	// list's order's: the forward accumulates no gradient, and the
	// backwards still run in micro-batch order.
	Paired bool
}

// String is "F3.1" (op, micro-batch, chunk) or "recvA3.1<0" / "sendA3.1>2".
func (a Action) String() string {
	s := fmt.Sprintf("%v%d.%d", a.Op, a.MB, a.Chunk)
	switch a.Op {
	case RecvAct, RecvGrad:
		s += fmt.Sprintf("<%d", a.Peer)
	case SendAct, SendGrad:
		s += fmt.Sprintf(">%d", a.Peer)
	}
	return s
}

// Config is a schedule's shape.
type Config struct {
	Kind  Kind
	PP    int // pipeline ranks
	VPP   int // chunks per rank (>1 only for interleaved; dualpipev: 2 whatever it says; 0 means 1)
	Micro int // micro-batches per step
	// Pair (ep_overlap=on) lists a one-stage 1F1B as F0, then F(k+1)
	// paired with B(k) for k < m−1 (Action.Paired), then B(m−1): two
	// micro-batches in flight instead of one (PeakInFlight).
	Pair bool
}

// Validate names the first rule the configuration breaks.
func (c Config) Validate() error {
	v := max(c.VPP, 1)
	switch {
	case c.PP < 1:
		return fmt.Errorf("pp: pp=%d must be >= 1", c.PP)
	case c.Micro < 1:
		return fmt.Errorf("pp: micro-batches=%d must be >= 1", c.Micro)
	case c.Kind != GPipe && c.Kind != OneFOneB && c.Kind != Interleaved && c.Kind != ZBH1 && c.Kind != DualPipeV:
		return fmt.Errorf("pp: schedule=%q must be one of gpipe, 1f1b, interleaved, zb-h1, dualpipev", c.Kind)
	case c.Kind == DualPipeV && v > 2:
		return fmt.Errorf("pp: schedule=dualpipev holds 2 chunks per rank (a V), got vpp=%d", v)
	case c.Kind == DualPipeV && c.PP < 2:
		return fmt.Errorf("pp: schedule=dualpipev needs pp >= 2 (its V folds 2·pp stages over the ranks), got pp=%d", c.PP)
	case c.Kind == DualPipeV && c.Micro < 2*c.PP:
		return fmt.Errorf("pp: schedule=dualpipev needs micro-batches >= 2·pp = %d (its warm-up fills the V), got %d", 2*c.PP, c.Micro)
	case c.Pair && (c.Kind != OneFOneB || c.PP != 1):
		return fmt.Errorf("pp: pair (ep_overlap=on) needs schedule=1f1b with pp=1, got schedule=%s pp=%d", c.Kind, c.PP)
	case v > 1 && c.Kind != Interleaved && c.Kind != DualPipeV:
		return fmt.Errorf("pp: vpp=%d needs schedule=interleaved", v)
	case c.Kind == Interleaved && c.Micro < c.PP:
		return fmt.Errorf("pp: schedule=interleaved needs at least pp=%d micro-batches, got %d", c.PP, c.Micro)
	case c.Kind == Interleaved && c.Micro%c.PP != 0:
		return fmt.Errorf("pp: schedule=interleaved needs micro-batches=%d to be a multiple of pp=%d (Megatron's interleaved order)", c.Micro, c.PP)
	}
	return nil
}

// Schedule is every pipeline rank's ordered actions for one step.
type Schedule struct {
	Config
	Ranks [][]Action // (PP) per rank
}

// Stages is the number of model stages, pp·vpp.
func (s *Schedule) Stages() int { return s.PP * s.vpp() }

func (s *Schedule) vpp() int { return max(s.VPP, 1) }

// Split says whether backward passes are split into B and W (zb-h1,
// dualpipev).
func (s *Schedule) Split() bool { return s.Kind.Split() }

// Placement is where the schedule's model stages live.
func (c Config) Placement() Placement {
	return Placement{PP: c.PP, VPP: c.Kind.Chunks(c.VPP), V: c.Kind == DualPipeV}
}

// Build makes the schedule of c.
func Build(c Config) (*Schedule, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	c.VPP = c.Kind.Chunks(c.VPP)
	s := &Schedule{Config: c, Ranks: make([][]Action, c.PP)}
	var order [][]Action
	switch c.Kind {
	case GPipe:
		order = gpipe(c)
	case OneFOneB:
		order = oneFOneB(c)
		if c.Pair {
			order = [][]Action{paired(c.Micro)}
		}
	case Interleaved:
		order = interleaved(c)
	case ZBH1:
		order = zbH1(c)
	case DualPipeV:
		order = dualPipeV(c)
	}
	for r, acts := range order {
		s.Ranks[r] = s.withComm(r, acts)
	}
	return s, nil
}

// gpipe: F(0..m−1), then B(0..m−1) (backwards in micro-batch order, so the
// gradients accumulate in the order one device adds them).
func gpipe(c Config) [][]Action {
	out := make([][]Action, c.PP)
	for r := range out {
		for mb := 0; mb < c.Micro; mb++ {
			out[r] = append(out[r], Action{Op: Forward, MB: mb})
		}
		for mb := 0; mb < c.Micro; mb++ {
			out[r] = append(out[r], Action{Op: Backward, MB: mb})
		}
	}
	return out
}

// oneFOneB: w = min(p−r−1, m) warm-up forwards, m−w pairs F(w+k), B(k),
// then the last w backwards.
func oneFOneB(c Config) [][]Action {
	out := make([][]Action, c.PP)
	for r := range out {
		w := min(c.PP-r-1, c.Micro)
		for mb := 0; mb < w; mb++ {
			out[r] = append(out[r], Action{Op: Forward, MB: mb})
		}
		for k := 0; k < c.Micro-w; k++ {
			out[r] = append(out[r], Action{Op: Forward, MB: w + k}, Action{Op: Backward, MB: k})
		}
		for mb := c.Micro - w; mb < c.Micro; mb++ {
			out[r] = append(out[r], Action{Op: Backward, MB: mb})
		}
	}
	return out
}

// paired is Config.Pair's one-stage 1F1B over m micro-batches: F0, then
// F(k+1) beside B(k) for k = 0..m−2, then B(m−1). The backwards keep
// their order (B(k) before B(k+1)), so the gradients accumulate as
// 1F1B's do.
func paired(m int) []Action {
	out := []Action{{Op: Forward, MB: 0}}
	for k := 0; k+1 < m; k++ {
		out = append(out, Action{Op: Forward, MB: k + 1, Paired: true}, Action{Op: Backward, MB: k})
	}
	return append(out, Action{Op: Backward, MB: m - 1})
}

// interleaved is Megatron-LM's interleaved 1F1B. The k-th forward of a
// rank (k < v·m) runs chunk (k/p) mod v of micro-batch (k/(p·v))·p + k mod
// p; the k-th backward the same micro-batch's chunk v−1−(k/p) mod v. Rank r
// warms up with min(2(p−r−1) + (v−1)·p, v·m) forwards (all of them when
// m = p), then alternates forward and backward, then drains.
func interleaved(c Config) [][]Action {
	p, v, m := c.PP, c.VPP, c.Micro
	total := v * m
	at := func(k int, fwd bool) Action {
		ch := (k / p) % v
		op := Forward
		if !fwd {
			ch, op = v-1-ch, Backward
		}
		return Action{Op: op, MB: (k/(p*v))*p + k%p, Chunk: ch}
	}
	out := make([][]Action, p)
	for r := range out {
		w := min(2*(p-r-1)+(v-1)*p, total)
		if m == p {
			w = total
		}
		for k := 0; k < w; k++ {
			out[r] = append(out[r], at(k, true))
		}
		for k := 0; k < total-w; k++ {
			out[r] = append(out[r], at(w+k, true), at(k, false))
		}
		for k := total - w; k < total; k++ {
			out[r] = append(out[r], at(k, false))
		}
	}
	return out
}

// withComm inserts the receives before and the sends after each compute
// action of rank r that needs them: none between two stages on the same
// rank (DualPipeV's turn of the V on rank pp−1), which the executor passes
// locally.
func (s *Schedule) withComm(r int, acts []Action) []Action {
	pl := s.Placement()
	var out []Action
	for _, a := range acts {
		prev, next := pl.Neighbours(r, a.Chunk)
		switch a.Op {
		case Forward:
			if prev.Remote(r) {
				out = append(out, Action{Op: RecvAct, MB: a.MB, Chunk: a.Chunk, Peer: prev.Rank})
			}
			out = append(out, a)
			if next.Remote(r) {
				out = append(out, Action{Op: SendAct, MB: a.MB, Chunk: a.Chunk, Peer: next.Rank})
			}
		case Backward:
			if next.Remote(r) {
				out = append(out, Action{Op: RecvGrad, MB: a.MB, Chunk: a.Chunk, Peer: next.Rank})
			}
			out = append(out, a)
			if prev.Remote(r) {
				out = append(out, Action{Op: SendGrad, MB: a.MB, Chunk: a.Chunk, Peer: prev.Rank})
			}
		default:
			out = append(out, a)
		}
	}
	return out
}

// Format is the schedule as text, one rank per line (golden files), a
// movable action marked "*" and explained on a last line.
func (s *Schedule) Format() string {
	var b strings.Builder
	fmt.Fprintf(&b, "schedule=%s pp=%d vpp=%d micro-batches=%d\n", s.Kind, s.PP, s.vpp(), s.Micro)
	movable, paired := false, false
	for r, acts := range s.Ranks {
		fmt.Fprintf(&b, "rank %d:", r)
		for _, a := range acts {
			if a.Op.Compute() {
				b.WriteString(" " + a.String())
				if a.Movable {
					b.WriteByte('*')
					movable = true
				}
				if a.Paired {
					b.WriteByte('+')
					paired = true
				}
			}
		}
		b.WriteByte('\n')
	}
	if movable {
		b.WriteString("* may run earlier, in this order, where the rank waits on a receive longer than a W takes; frees its stashes here\n")
	}
	if paired {
		b.WriteString("+ runs beside the backward after it, the two handing one compute token while each waits on its expert all-to-alls\n")
	}
	return b.String()
}

// PeakInFlight is the most (micro-batch, chunk) pairs rank r keeps in
// flight under c (Simulate measures the same, a test holds them together):
//
//	gpipe        m
//	1f1b         min(p−r, m); with Pair (p = 1) min(2, m)
//	interleaved  min(2(p−r−1) + (v−1)·p + 1, v·m), or v·m when m = p (Narayanan et al. 2021)
//	zb-h1        min(p, m) on every rank (from F to W)
//	dualpipev    2p + 1 on every rank (m ≥ 2p; from F to W): 2p − r of chunk 0, r + 1 of chunk 1
func PeakInFlight(c Config, r int) int {
	p, v, m := c.PP, max(c.VPP, 1), c.Micro
	switch c.Kind {
	case DualPipeV:
		return 2*p + 1
	case GPipe:
		return m
	case OneFOneB:
		if c.Pair {
			return min(2, m)
		}
		return min(p-r, m)
	case Interleaved:
		if m == p {
			return v * m
		}
		return min(2*(p-r-1)+(v-1)*p+1, v*m)
	}
	return min(p, m)
}
