package commbench

import (
	"fmt"
	"time"

	"trellis/comm"
)

// Ops are the operations the benchmark knows, in table order.
func Ops() []string {
	return []string{"allreduce", "reducescatter", "allgather", "broadcast", "alltoall", "sendrecv"}
}

// busFactor converts algorithm bandwidth to bus bandwidth as nccl-tests
// does: the fraction of the data each rank must move over its busiest link
// for an optimal algorithm — all-reduce 2(p-1)/p, reduce-scatter and
// all-gather and all-to-all (p-1)/p (of the whole p-chunk buffer: the
// part that leaves the rank), broadcast and send/recv 1.
func busFactor(op string, p int) float64 {
	switch op {
	case "allreduce":
		return 2 * float64(p-1) / float64(p)
	case "reducescatter", "allgather", "alltoall":
		return float64(p-1) / float64(p)
	}
	return 1
}

// iterations is how many timed repetitions a size gets: enough to move
// about 256 MiB, between 5 and 200. Every rank computes the same count.
func (c Config) iterations(bytes int64) int {
	if c.Iters > 0 {
		return c.Iters
	}
	return int(min(max((256<<20)/max(bytes, 1), 5), 200))
}

// Measure runs the benchmark on one rank of a world; every rank of g must
// call it with the same cfg. Each row's time is the slowest rank's mean
// time per operation, so every rank returns the same rows.
func Measure(g comm.Group, cfg Config) ([]Row, error) {
	var rows []Row
	for _, op := range cfg.Ops {
		for _, size := range cfg.Sizes {
			row, err := measureOne(g, cfg, op, size)
			if err != nil {
				return nil, fmt.Errorf("commbench: %s %s: %w", op, FormatBytes(size), err)
			}
			rows = append(rows, row)
		}
	}
	return rows, nil
}

func measureOne(g comm.Group, cfg Config, op string, size int64) (Row, error) {
	p := g.Size()
	run, bytes, err := prepare(g, op, size)
	if err != nil {
		return Row{}, err
	}
	for i := 0; i < cfg.warmup(); i++ {
		if err := run(); err != nil {
			return Row{}, err
		}
	}
	iters := cfg.iterations(bytes)
	if err := comm.Barrier(g); err != nil {
		return Row{}, err
	}
	start := time.Now()
	for i := 0; i < iters; i++ {
		if err := run(); err != nil {
			return Row{}, err
		}
	}
	t := []float32{float32(time.Since(start).Seconds() / float64(iters))}
	if err := comm.AllReduce(g, comm.F32(t), comm.Max); err != nil {
		return Row{}, err
	}
	sec := float64(t[0])
	alg := float64(bytes) / sec / 1e9
	return Row{Backend: cfg.Backend, Op: op, Ranks: p, Bytes: bytes, TimeS: sec,
		AlgBWGBps: alg, BusBWGBps: alg * busFactor(op, p)}, nil
}

// prepare allocates op's buffers for a size in bytes (fp32 elements) and
// returns one repetition and the byte count the row reports: the whole
// buffer (for reduce-scatter and all-gather the larger, p-chunk one, as
// nccl-tests does), rounded down to whole elements divisible as the op
// needs.
func prepare(g comm.Group, op string, size int64) (func() error, int64, error) {
	p, r := g.Size(), g.Rank()
	n := int(size / 4)
	switch op {
	case "allreduce":
		buf := comm.F32(make([]float32, n))
		return func() error { return comm.AllReduce(g, buf, comm.Sum) }, int64(n) * 4, nil
	case "reducescatter":
		c := n / p
		src, dst := comm.F32(make([]float32, c*p)), comm.F32(make([]float32, c))
		return func() error { return comm.ReduceScatter(g, dst, src, comm.Sum) }, int64(c*p) * 4, nil
	case "allgather":
		c := n / p
		src, dst := comm.F32(make([]float32, c)), comm.F32(make([]float32, c*p))
		return func() error { return comm.AllGather(g, dst, src) }, int64(c*p) * 4, nil
	case "alltoall":
		c := n / p
		src, dst := comm.F32(make([]float32, c*p)), comm.F32(make([]float32, c*p))
		return func() error { return comm.AllToAll(g, dst, src) }, int64(c*p) * 4, nil
	case "broadcast":
		buf := comm.F32(make([]float32, n))
		return func() error { return comm.Broadcast(g, buf, 0) }, int64(n) * 4, nil
	case "sendrecv":
		// A ring shift: every rank sends to the next and receives from the
		// previous, both issued before either is waited on.
		out, in := comm.F32(make([]float32, n)), comm.F32(make([]float32, n))
		next, prev := (r+1)%p, (r-1+p)%p
		return func() error {
			ws, wr := g.Send(out, next, 0), g.Recv(in, prev, 0)
			return errorsJoin(ws.Wait(), wr.Wait())
		}, int64(n) * 4, nil
	}
	return nil, 0, fmt.Errorf("unknown op %q (want one of %v)", op, Ops())
}

func errorsJoin(a, b error) error {
	if a != nil {
		return a
	}
	return b
}
