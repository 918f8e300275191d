package tcp

import (
	"errors"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"trellis/comm"
)

// tamperer is an on-path attacker on one connection: it multiplies the
// first float of the first large write (a data payload) by 50.
type tamperer struct {
	net.Conn
	once sync.Once
}

func (t *tamperer) Write(b []byte) (int, error) {
	if len(b) >= 4096 {
		t.once.Do(func() {
			b = append([]byte(nil), b...) // never the sender's own buffer
			b[3] ^= 0x40                  // fp32 exponent bit: ×2^(±64)-ish, far from rounding
		})
	}
	return t.Conn.Write(b)
}

// TestTamperedFrame: with frame authentication on, a payload
// altered between two ranks fails the all-reduce on the receiver with
// ErrTampered naming the sender; with it off, the same attack goes
// unnoticed and the sum is wrong (which is what authentication is for).
func TestTamperedFrame(t *testing.T) {
	for _, plain := range []bool{false, true} {
		name := map[bool]string{false: "auth", true: "plain"}[plain]
		t.Run(name, func(t *testing.T) {
			gs := startWorld(t, 2, 5*time.Second, func(r int, c *Config) {
				c.FrameAuth = !plain
				if r == 1 { // rank 1 dials rank 0: its frames to rank 0 pass the attacker
					c.wrapConn = func(c net.Conn) net.Conn { return &tamperer{Conn: c} }
				}
			})
			const n = 64 << 10 // 256 KiB: the ring algorithm, several frames
			errs := make([]error, 2)
			sums := make([][]float32, 2)
			var wg sync.WaitGroup
			for r, g := range gs {
				wg.Add(1)
				go func() {
					defer wg.Done()
					sums[r] = make([]float32, n)
					for i := range sums[r] {
						sums[r][i] = 1
					}
					errs[r] = comm.AllReduce(g, comm.F32(sums[r]), comm.Sum)
				}()
			}
			wg.Wait()
			if plain {
				if errs[0] != nil || errs[1] != nil {
					t.Fatalf("plain frames: %v", errors.Join(errs...))
				}
				for r := range sums {
					if sums[r][0] == 2 {
						t.Errorf("rank %d: the tampered element is intact: the attack did not happen", r)
					}
				}
				return
			}
			t.Logf("rank 0: %v\n\trank 1: %v", errs[0], errs[1])
			var pe *comm.PeerError
			if !errors.Is(errs[0], ErrTampered) || !errors.As(errs[0], &pe) || pe.Rank != 1 || !strings.Contains(errs[0].Error(), "from rank 1") {
				t.Errorf("rank 0: got %v, want ErrTampered naming rank 1", errs[0])
			}
			// Rank 1 fails too; it is told why (an abort frame) unless its
			// own write fails first once rank 0 closes, which is a race.
			if !errors.Is(errs[1], comm.ErrPeer) {
				t.Errorf("rank 1: got %v, want a *comm.PeerError", errs[1])
			}
		})
	}
}

// TestFrameAuthMismatch: a rank with frame authentication off is refused
// by a rank with it on, and says why.
func TestFrameAuthMismatch(t *testing.T) {
	_, errs := tryWorld(t, 2, 5*time.Second, func(r int, c *Config) {
		c.RendezvousTimeout = time.Second
		c.FrameAuth = r == 0
	})
	if errs[1] == nil || !strings.Contains(errs[1].Error(), "frame authentication is off there and on here (TRELLIS_COMM_FRAME_AUTH must agree on every rank)") {
		t.Errorf("rank 1: got %v, want the frame authentication mismatch", errs[1])
	}
	if errs[0] == nil {
		t.Errorf("rank 0: New succeeded without rank 1")
	}
}

// TestSessionKeys: the two sides of a handshake derive crossed keys, and
// different connections different keys.
func TestSessionKeys(t *testing.T) {
	var keys [2][2]sessionKeys
	for i := range keys {
		a, b := net.Pipe()
		deadline := time.Now().Add(5 * time.Second)
		done := make(chan error, 1)
		go func() {
			var err error
			_, keys[i][1], err = serverHandshake(b, []byte(testToken), rolePeer, 0, deadline, true, nil)
			done <- err
		}()
		var err error
		_, keys[i][0], err = clientHandshake(a, []byte(testToken), rolePeer, 1, deadline, true)
		if err := errors.Join(err, <-done); err != nil {
			t.Fatal(err)
		}
		a.Close()
		b.Close()
		c, s := keys[i][0], keys[i][1]
		if string(c.send) != string(s.recv) || string(c.recv) != string(s.send) || string(c.send) == string(c.recv) {
			t.Fatalf("connection %d: keys not crossed: %x", i, keys[i])
		}
	}
	if string(keys[0][0].send) == string(keys[1][0].send) {
		t.Fatal("two connections share a session key")
	}
}

// TestFramerRejects: a tag fails for any change of header, payload or
// order.
func TestFramerRejects(t *testing.T) {
	key := make([]byte, 16)
	hdr := make([]byte, headerSize)
	encodeHeader(hdr, header{typ: frameData, last: true, group: 1, tag: 2, length: 4})
	payload := []byte{1, 2, 3, 4}
	for _, c := range []struct {
		name string
		edit func(h, p []byte, rx *framer)
	}{
		{"intact", func(h, p []byte, rx *framer) {}},
		{"payload", func(h, p []byte, rx *framer) { p[2] ^= 1 }},
		{"header", func(h, p []byte, rx *framer) { h[16] ^= 1 }},
		{"replayed or reordered", func(h, p []byte, rx *framer) { rx.n++ }},
	} {
		tx, rx := newFramer(key), newFramer(key)
		tag := append([]byte(nil), tx.tag(hdr, payload)...)
		h, p := append([]byte(nil), hdr...), append([]byte(nil), payload...)
		c.edit(h, p, rx)
		err := rx.check(strings.NewReader(string(tag)), h, p)
		if (c.name == "intact") != (err == nil) || (err != nil && !errors.Is(err, ErrTampered)) {
			t.Errorf("%s: got %v", c.name, err)
		}
	}
}
