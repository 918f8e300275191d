package tcp

// The ring. Rank r of p sends to r+1 and receives from r-1 (mod p). The
// buffer is cut into p chunks (bounds), each chunk into pieces.
//
// Reduce-scatter, p-1 steps: at step s rank r sends chunk r-s-1 and
// receives chunk r-s-2, which it combines into its own copy; after the last
// step chunk r holds the reduction over all ranks (accumulated in ring
// order r+1, r+2, …, r). All-gather, p-1 steps: at step s rank r sends
// chunk r-s and receives chunk r-s-1 into place.
//
// Every receive of both phases targets a distinct chunk, so all of them are
// posted before the first send and frames land in place as they arrive.
// Piece k of a step is forwarded as soon as piece k of the previous step has
// been received, so transfers, reductions and forwarding overlap.
type ring struct {
	o           *op
	b           []byte
	bounds      []int // element offsets of the p chunks, len p+1
	es          int   // element size
	left, right int
}

// partition cuts n elements into p chunks whose sizes differ by at most one.
func partition(n, p int) []int {
	b := make([]int, p+1)
	for c := range b {
		b[c] = c * n / p
	}
	return b
}

func (o *op) newRing(b []byte, es int, bounds []int) *ring {
	p, r := o.size(), o.me()
	return &ring{o: o, b: b, bounds: bounds, es: es, left: mod(r-1, p), right: mod(r+1, p)}
}

func (rg *ring) chunk(c int) []byte {
	c = mod(c, rg.o.size())
	return rg.b[rg.bounds[c]*rg.es : rg.bounds[c+1]*rg.es]
}

// postRS posts the reduce-scatter's receives: step s, chunk r-s-2.
func (rg *ring) postRS(red *reducer) [][]*req {
	p, r := rg.o.size(), rg.o.me()
	rs := make([][]*req, p-1)
	for s := range rs {
		rs[s] = rg.o.recvMsg(rg.left, rg.chunk(r-s-2), rg.es, red)
	}
	return rs
}

// postAG posts the all-gather's receives: step s, chunk r-s-1.
func (rg *ring) postAG() [][]*req {
	p, r := rg.o.size(), rg.o.me()
	ag := make([][]*req, p-1)
	for s := range ag {
		ag[s] = rg.o.recvMsg(rg.left, rg.chunk(r-s-1), rg.es, nil)
	}
	return ag
}

// runRS sends the reduce-scatter: step s forwards chunk r-s-1, piece by
// piece as the previous step's receive of that piece completes.
func (rg *ring) runRS(rs [][]*req) error {
	p, r := rg.o.size(), rg.o.me()
	for s := 0; s < p-1; s++ {
		ps := pieces(rg.chunk(r-s-1), rg.es)
		for k, pc := range ps {
			if s > 0 {
				if err := rg.o.wait(rs[s-1][k]); err != nil {
					return err
				}
			}
			rg.o.send(rg.right, pc, k == len(ps)-1)
		}
	}
	return nil
}

// runAG sends the all-gather: step 0 sends this rank's chunk r, each piece
// once ready[k] completes (nil: the chunk is ready) and prep has run on it;
// step s > 0 forwards what step s-1 received.
func (rg *ring) runAG(ag [][]*req, ready []*req, prep func([]byte)) error {
	p, r := rg.o.size(), rg.o.me()
	for s := 0; s < p-1; s++ {
		ps := pieces(rg.chunk(r-s), rg.es)
		for k, pc := range ps {
			var dep *req
			switch {
			case s > 0:
				dep = ag[s-1][k]
			case ready != nil:
				dep = ready[k]
			}
			if dep != nil {
				if err := rg.o.wait(dep); err != nil {
					return err
				}
			}
			if s == 0 && prep != nil {
				prep(pc)
			}
			rg.o.send(rg.right, pc, k == len(ps)-1)
		}
	}
	return nil
}
