package tcp

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"sync/atomic"
	"syscall"
	"time"

	"trellis/comm"
)

// scratchBytes is the block a reader receives into before reducing it into
// its destination: small enough to stay in cache, large enough to keep
// syscalls few.
const scratchBytes = 256 << 10

// errPeerClosed is the cause when a peer closed its world in good order.
var errPeerClosed = errors.New(comm.PeerClosedText)

// peer is the persistent connection to one other rank: a reader goroutine
// that always drains the socket into the mailbox, and a writer goroutine
// that sends queued frames and a heartbeat when idle. Reading and writing
// run concurrently, so a collective's send and receive overlap.
type peer struct {
	w       *world
	rank    int
	conn    net.Conn
	br      *bufio.Reader
	box     *mailbox
	out     outbox
	scratch []byte
	tx, rx  *framer // frame tags of each direction; nil unless Config.FrameAuth

	violated atomic.Bool // it sent a tampered frame or more than MaxBuffered

	readerDone chan struct{}
	writerDone chan struct{}
}

func newPeer(w *world, rank int, conn net.Conn, keys sessionKeys) *peer {
	if tc, ok := conn.(*net.TCPConn); ok {
		tc.SetNoDelay(true)
		if n := w.cfg.SocketBuffer; n > 0 {
			tc.SetReadBuffer(n)
			tc.SetWriteBuffer(n)
		}
	}
	p := &peer{w: w, rank: rank, conn: conn, br: bufio.NewReaderSize(conn, 64<<10),
		box: newMailbox(rank, &w.pool, w.cfg.MaxBuffered), scratch: alignedBytes(scratchBytes),
		readerDone: make(chan struct{}), writerDone: make(chan struct{})}
	p.out.wake = make(chan struct{}, 1)
	if w.cfg.FrameAuth {
		p.tx, p.rx = newFramer(keys.send), newFramer(keys.recv)
		p.scratch = alignedBytes(pieceBytes) // a frame is checked whole before it is reduced
	}
	return p
}

func (p *peer) start() {
	go p.readLoop()
	go p.writeLoop()
}

func (p *peer) writeLoop() {
	defer close(p.writerDone)
	interval := p.w.cfg.Timeout / 4
	tick := time.NewTicker(interval)
	defer tick.Stop()
	var hb req
	encodeHeader(hb.hdr[:], header{typ: frameHeartbeat})
	last := time.Now()
	for {
		batch := p.out.takeAll()
		for i, r := range batch {
			if err := p.write(r); err != nil {
				p.writeFailed(err, batch[i:])
				return
			}
			r.done <- nil
		}
		if len(batch) > 0 {
			last = time.Now()
			continue
		}
		select {
		case <-p.out.wake:
		case <-p.w.shut:
			p.drainOut(comm.ErrClosed)
			return
		case now := <-tick.C:
			if now.Sub(last) >= interval {
				if err := p.write(&hb); err != nil {
					p.writeFailed(err, nil)
					return
				}
				last = now
			}
		}
	}
}

// writeFailed handles a failed write: the connection is lost, and the
// frames not sent fail with the reason (a *comm.PeerError naming the peer,
// or comm.ErrClosed when this rank is closing).
func (p *peer) writeFailed(err error, unsent []*req) {
	p.lost(err)
	reason := p.box.error()
	if reason == nil {
		reason = p.w.peerError(p.rank, err)
	}
	for _, r := range unsent {
		r.done <- reason
	}
	p.out.failData(reason)
	p.drainOut(reason)
}

// drainOut fails whatever is still queued once the writer stops.
func (p *peer) drainOut(err error) {
	p.out.mu.Lock()
	if p.out.err == nil {
		p.out.err = err
	}
	q := p.out.q
	p.out.q = nil
	p.out.mu.Unlock()
	for _, r := range q {
		r.done <- err
	}
}

func (p *peer) write(r *req) error {
	p.conn.SetWriteDeadline(time.Now().Add(p.w.cfg.Timeout))
	bufs := net.Buffers{r.hdr[:], r.payload}
	if p.tx != nil {
		bufs = append(bufs, p.tx.tag(r.hdr[:], r.payload))
	}
	_, err := bufs.WriteTo(p.conn)
	return err
}

// verify reads and checks the tag of the frame just read (a no-op with
// plain frames). A mismatch is a *comm.PeerError naming the peer.
func (p *peer) verify(hdr, payload []byte) error {
	if p.rx == nil {
		return nil
	}
	err := p.rx.check(p.br, hdr, payload)
	if errors.Is(err, ErrTampered) {
		return &comm.PeerError{Rank: p.rank, Op: "recv", Err: fmt.Errorf("%w, from rank %d", err, p.rank)}
	}
	return err
}

func (p *peer) readLoop() {
	defer close(p.readerDone)
	hb := make([]byte, headerSize)
	for {
		p.conn.SetReadDeadline(time.Now().Add(p.w.cfg.Timeout))
		if _, err := io.ReadFull(p.br, hb); err != nil {
			p.lost(err)
			return
		}
		h, err := decodeHeader(hb)
		if err == nil && p.rx != nil && h.length > pieceBytes {
			err = fmt.Errorf("%w: %d-byte frame: authenticated frames are at most %d bytes", errFrame, h.length, pieceBytes)
		}
		if err != nil {
			p.lost(err)
			return
		}
		switch h.typ {
		case frameData:
			err = p.readData(h, hb)
		case frameAbort:
			err = p.readAbort(h, hb)
		case frameHeartbeat:
			err = p.verify(hb, nil)
		case frameBye:
			if err = p.verify(hb, nil); err == nil {
				p.byePeer()
				return
			}
		}
		if err != nil {
			p.lost(err)
			if p.violated.Load() {
				// Keep draining until the world closes the connection, so
				// that it closes with nothing unread (a FIN, not a reset
				// that could overtake the abort telling the peer why).
				p.conn.SetReadDeadline(time.Now().Add(p.w.cfg.Timeout))
				io.Copy(io.Discard, p.br)
			}
			return
		}
	}
}

// readData reads one data frame's payload straight into the receive that
// waits for it (reducing through the scratch block), or into a buffer, and
// checks its tag before the receive or the buffer is marked complete.
func (p *peer) readData(h header, hb []byte) error {
	if !validGroupID(h.group) {
		return fmt.Errorf("%w: data frame for group id %#x, which no group can have", errFrame, h.group)
	}
	r, a, err := p.box.take(h)
	if err != nil {
		return err
	}
	if a != nil {
		_, err := io.ReadFull(p.br, a.data)
		if err == nil {
			err = p.verify(hb, a.data)
		}
		if err != nil {
			p.box.filled(a, p.broken(err))
			return err
		}
		p.box.filled(a, nil)
		return nil
	}
	if err := p.box.check(r, int(h.length), h.last, h.bf16); err != nil {
		rerr := p.discard(h, hb)
		r.done <- err
		return rerr
	}
	err = p.readInto(r, hb)
	if err != nil {
		r.done <- p.broken(err)
		return err
	}
	r.done <- nil
	return nil
}

// broken handles a read error in the middle of a frame: the connection is
// lost (see lost), and the frame fails with the same reason as every other
// receive from this peer.
func (p *peer) broken(err error) error {
	p.lost(err)
	if reason := p.box.error(); reason != nil {
		return reason
	}
	return p.w.peerError(p.rank, err)
}

// discard reads and checks a frame nobody can use.
func (p *peer) discard(h header, hb []byte) error {
	if p.rx == nil {
		_, err := io.CopyN(io.Discard, p.br, int64(h.length))
		return err
	}
	b := p.scratch[:h.length]
	if _, err := io.ReadFull(p.br, b); err != nil {
		return err
	}
	return p.verify(hb, b)
}

// readInto reads a frame into its receive: copied straight into dst, or
// reduced into it block by block; with tags, the whole frame is read into
// the scratch and checked before it is reduced.
func (p *peer) readInto(r *req, hb []byte) error {
	if r.red == nil {
		if _, err := io.ReadFull(p.br, r.dst); err != nil {
			return err
		}
		return p.verify(hb, r.dst)
	}
	if p.rx != nil {
		b := p.scratch[:len(r.dst)]
		if _, err := io.ReadFull(p.br, b); err != nil {
			return err
		}
		if err := p.verify(hb, b); err != nil {
			return err
		}
		r.red.apply(r.dst, b)
		return nil
	}
	for off := 0; off < len(r.dst); {
		n := min(len(p.scratch), len(r.dst)-off)
		if _, err := io.ReadFull(p.br, p.scratch[:n]); err != nil {
			return err
		}
		r.red.apply(r.dst[off:off+n], p.scratch[:n])
		off += n
	}
	return nil
}

func (p *peer) readAbort(h header, hb []byte) error {
	reason := make([]byte, h.length)
	if _, err := io.ReadFull(p.br, reason); err != nil {
		return err
	}
	if err := p.verify(hb, reason); err != nil {
		return err
	}
	dead := int(h.tag)
	if h.tag >= uint64(p.w.size) {
		return fmt.Errorf("%w: abort names rank %d of %d", errFrame, h.tag, p.w.size)
	}
	cause := fmt.Errorf("reported by rank %d: %s", p.rank, reason)
	if h.timeout {
		cause = fmt.Errorf("%w: reported by rank %d: %s", comm.ErrTimeout, p.rank, reason)
	}
	p.w.aborted(p.rank, &comm.PeerError{Rank: dead, Op: "abort", Err: cause})
	return nil
}

// byePeer: the peer closed its world in good order. Receives it has
// already delivered still complete; anything more from or to it fails.
func (p *peer) byePeer() {
	pe := &comm.PeerError{Rank: p.rank, Op: "connection", Err: errPeerClosed}
	p.box.fail(pe)
	p.out.failData(pe)
}

// lost handles a broken connection. Unless this rank is closing, the peer
// is dead: receives from it that it has not already satisfied, and sends to
// it, fail with a *comm.PeerError naming it. An operation that needed it
// then fails the world (op.end), which tells every other rank; operations
// that no longer need it (its part already arrived) still complete.
func (p *peer) lost(err error) {
	if p.w.isClosing() {
		p.box.fail(comm.ErrClosed)
		return
	}
	if p.box.failed() {
		// It said goodbye or aborted first: the end of the connection is
		// expected and says nothing new. After a violation the world's
		// failure closes the connection, once the abort is out.
		if !p.violated.Load() {
			p.conn.Close()
		}
		return
	}
	pe := p.w.lostPeer(p.w.peerError(p.rank, err))
	p.box.fail(pe)
	p.out.failData(pe)
	if errors.Is(err, ErrTampered) || errors.Is(err, comm.ErrBufferFull) {
		// The peer broke the protocol but may be alive: fail the world,
		// which tells it why (an abort naming it) before closing.
		p.violated.Store(true)
		p.w.fail(pe)
		return
	}
	p.conn.Close()
}

// sendCtrl queues an abort or bye frame.
func (p *peer) sendCtrl(h header, payload []byte) *req {
	r := newReq(p.rank)
	r.ctrl = true
	h.length = uint32(len(payload))
	encodeHeader(r.hdr[:], h)
	r.payload = payload
	p.out.push(r)
	return r
}

// peerError turns a connection error into a *PeerError naming rank, with
// comm.ErrTimeout for silence.
func (w *world) peerError(rank int, err error) *comm.PeerError {
	var pe *comm.PeerError
	if errors.As(err, &pe) {
		return pe
	}
	var ne net.Error
	switch {
	case errors.As(err, &ne) && ne.Timeout():
		err = fmt.Errorf("%w: nothing received for %v (not even a heartbeat): %v", comm.ErrTimeout, w.cfg.Timeout, err)
	case errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF):
		err = fmt.Errorf("connection closed without goodbye (process died?): %w", err)
	case errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE):
		err = fmt.Errorf("connection reset (process died?): %w", err)
	}
	return &comm.PeerError{Rank: rank, Op: "connection", Err: err}
}
