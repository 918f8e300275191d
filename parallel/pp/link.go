package pp

import (
	"trellis/comm"
)

// Link moves a stage's boundary tensors between pipeline ranks: Send and
// Recv of activations (grad false) or gradients (grad true) to and from
// the pipeline rank peer. A rank issues its sends and receives in its
// schedule's order; sends never wait for the receiver. The executor knows
// nothing else of the transport: P2PLink (p2p.go) is comm's point-to-point.
type Link interface {
	Send(buf []float32, peer int, grad bool) comm.Work
	Recv(buf []float32, peer int, grad bool) comm.Work
	Stats() comm.Stats
	Close() error
}

// failed is a Work that failed before it was issued.
type failed struct{ err error }

func (f failed) Wait() error { return f.err }
