package tcp

// The ring. Rank r of p sends to r+1 and receives from r-1 (mod p). The
// buffer is cut into p chunks (bounds), each chunk into pieces. A ring
// all-reduce is 2(p-1) steps, numbered globally so every step has its own
// tag:
//
//	reduce-scatter, steps t = 0 … p-2:  send chunk r-t-1; receive chunk r-t-2
//	                                    and combine it into this rank's copy
//	all-gather,  steps t = p-1 … 2p-3:  with u = t-(p-1), send chunk r-u;
//	                                    receive chunk r-u-1 into place
//
// After the reduce-scatter chunk r holds the reduction over all ranks
// (accumulated in ring order r+1, r+2, …, r: rank order only for p = 2,
// so reductions use these steps only then, see algo.go); the all-gather starts by
// sending it. In every step, the chunk sent is the chunk received in the
// step before, so piece k of step t may go once piece k of step t-1 has
// arrived (been reduced). Every receive targets a distinct chunk, so all of
// them are posted before the first send, and frames land in place.
//
// Sends are issued along a wavefront: piece k of step t when k + lag·t
// comes up. So a piece is forwarded right after it was received and
// combined, while it is still in cache, instead of after the whole of the
// previous step, and receiving, reducing and sending overlap.
type ring struct {
	o           *op
	b           []byte
	bounds      []int // element offsets of the p chunks, len p+1
	es          int   // element size
	left, right int
	first, n    int // the global steps this ring runs: first … first+n-1
}

// lag is how many pieces step t runs ahead of step t+1 in the wavefront.
const lag = 2

// newRing runs steps first … first+n-1 over b.
func (o *op) newRing(b []byte, es int, bounds []int, first, n int) *ring {
	p, r := o.size(), o.me()
	return &ring{o: o, b: b, bounds: bounds, es: es, left: mod(r-1, p), right: mod(r+1, p), first: first, n: n}
}

func (rg *ring) chunk(c int) []byte {
	c = mod(c, rg.o.size())
	return rg.b[rg.bounds[c]*rg.es : rg.bounds[c+1]*rg.es]
}

// sendChunk and recvChunk are the chunks step t sends and receives.
func (rg *ring) sendChunk(t int) int {
	p, r := rg.o.size(), rg.o.me()
	if t < p-1 {
		return r - t - 1
	}
	return r - (t - (p - 1))
}

func (rg *ring) recvChunk(t int) int { return rg.sendChunk(t) - 1 }

// post posts the receives of every step, combined by red in reduce-scatter
// steps and copied in all-gather steps; recvs[i] belongs to step first+i.
func (rg *ring) post(red *reducer) [][]*req {
	p := rg.o.size()
	recvs := make([][]*req, rg.n)
	for i := range recvs {
		t := rg.first + i
		var how *reducer
		if t < p-1 {
			how = red
		}
		recvs[i] = rg.o.recvMsg(rg.left, rg.chunk(rg.recvChunk(t)), rg.es, how, uint64(t))
	}
	return recvs
}

// run sends every step's pieces along the wavefront, each after its
// dependency. prep, if set, runs on each piece of step t before it is sent
// (the all-reduce scales its own chunk for Avg at step p-1).
func (rg *ring) run(recvs [][]*req, prep func(t int, piece []byte)) error {
	sends := make([][][]byte, rg.n)
	width := 0
	for i := range sends {
		sends[i] = pieces(rg.chunk(rg.sendChunk(rg.first+i)), rg.es)
		width = max(width, len(sends[i]))
	}
	for d := 0; d < width+lag*(rg.n-1); d++ {
		for i := range sends {
			k := d - lag*i
			if k < 0 || k >= len(sends[i]) {
				continue
			}
			if i > 0 {
				if err := rg.o.wait(recvs[i-1][k]); err != nil {
					return err
				}
			}
			t, pc := rg.first+i, sends[i][k]
			if prep != nil {
				prep(t, pc)
			}
			rg.o.send(rg.right, pc, k == len(sends[i])-1, uint64(t))
		}
	}
	return nil
}
