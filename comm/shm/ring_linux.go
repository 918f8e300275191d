package shm

import (
	"encoding/binary"
	"sync/atomic"

	"trellis/comm"
	"trellis/tensor"
)

// ring is the byte stream from one member to another in a group's
// segment: the sender writes at head, the receiver consumes at tail
// (single producer, single consumer). A message is a 32-byte header —
// tag, element count, dtype, payload bytes — and the payload padded to 8
// bytes; a header is only ever published whole.
type ring struct {
	m   mem
	off int
	cap uint64
}

const hdrBytes = 32

func (g *group) ring(src, dst int) ring {
	l := g.l()
	return ring{m: g.seg.m, off: l.ringOf(src, dst), cap: uint64(l.ring)}
}

func (r ring) head() *atomic.Uint64 { return r.m.u64(r.off + rHead) }
func (r ring) tail() *atomic.Uint64 { return r.m.u64(r.off + rTail) }
func (r ring) tailEv() event        { return r.m.event(r.off + rTailEv) }
func (r ring) free() uint64         { return r.cap - (r.head().Load() - r.tail().Load()) }

// put copies b into the ring at stream position pos.
func (r ring) put(pos uint64, b []byte) {
	d := r.m.at(r.off+ringHead, int(r.cap))
	at := int(pos % r.cap)
	n := copy(d[at:], b)
	copy(d, b[n:])
}

// get copies the ring's bytes at stream position pos into b.
func (r ring) get(pos uint64, b []byte) {
	d := r.m.at(r.off+ringHead, int(r.cap))
	at := int(pos % r.cap)
	n := copy(b, d[at:])
	copy(b[n:], d)
}

// header is a message's header.
type header struct {
	tag   uint64
	n     int
	dt    tensor.DType
	bytes int
}

func (h header) put(b []byte) {
	binary.LittleEndian.PutUint64(b[0:], h.tag)
	binary.LittleEndian.PutUint64(b[8:], uint64(h.n))
	binary.LittleEndian.PutUint32(b[16:], uint32(h.dt))
	binary.LittleEndian.PutUint64(b[24:], uint64(h.bytes))
}

func parseHeader(b []byte) header {
	return header{tag: binary.LittleEndian.Uint64(b[0:]), n: int(binary.LittleEndian.Uint64(b[8:])),
		dt: tensor.DType(binary.LittleEndian.Uint32(b[16:])), bytes: int(binary.LittleEndian.Uint64(b[24:]))}
}

// padded is the ring bytes a payload of n bytes takes.
func padded(n int) int { return roundUp(n, 8) }

func headerOf(b comm.Buf, tag int) header {
	return header{tag: uint64(tag), n: b.Len(), dt: b.DType(), bytes: b.Bytes()}
}
