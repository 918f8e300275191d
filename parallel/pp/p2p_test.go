package pp

import (
	"errors"
	"strings"
	"testing"

	"trellis/comm"
	"trellis/comm/local"
	"trellis/device"
)

// The link moves activations only forward and gradients only back, between
// neighbours (across the wrap only with vpp > 1); anything else fails at
// once with ErrArgs, naming the peer.
func TestP2PLinkDirections(t *testing.T) {
	gs, err := local.New(local.Config{Size: 3})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		for _, g := range gs {
			g.Close()
		}
	}()
	buf := make([]float32, 4)
	for _, tc := range []struct {
		me, vpp, peer int
		grad, send    bool
	}{
		{0, 1, 2, false, true},  // activations to the previous rank without the wrap
		{0, 1, 1, false, false}, // activations from the next rank
		{2, 1, 0, false, true},  // the wrap needs vpp > 1
		{1, 2, 0, true, false},  // gradients come from the next rank
		{1, 2, 2, true, true},   // and go to the previous one
	} {
		l, err := NewP2PLink(gs[tc.me], "t", []int{0, 1, 2}, tc.me, tc.vpp)
		if err != nil {
			t.Fatal(err)
		}
		var w comm.Work
		if tc.send {
			w = l.Send(buf, tc.peer, tc.grad)
		} else {
			w = l.Recv(buf, tc.peer, tc.grad)
		}
		if err := w.Wait(); !errors.Is(err, comm.ErrArgs) || !strings.Contains(err.Error(), "pipeline rank") {
			t.Errorf("%+v: error %v, want ErrArgs naming the rank", tc, err)
		}
		l.Close()
	}
}

// stubLink reports a fixed Buffered gauge.
type stubLink struct {
	Link
	buffered int64
}

func (l *stubLink) Stats() comm.Stats { return comm.Stats{Buffered: l.buffered} }

// Messages that arrive before their receive is posted are charged to the
// device's comm tag while the transport holds them, released when
// received, and refused beyond the budget with the bytes named. Over
// comm/local: a send to a rank that has not posted its receive is held
// by the receiver.
func TestStageChargesBufferedMessages(t *testing.T) {
	gs, err := local.New(local.Config{Size: 2})
	if err != nil {
		t.Fatal(err)
	}
	links := make([]*P2PLink, 2)
	for r, g := range gs {
		if links[r], err = NewP2PLink(g, "t", []int{0, 1}, r, 1); err != nil {
			t.Fatal(err)
		}
		defer g.Close()
		defer links[r].Close()
	}
	msg := make([]float32, 256)
	if err := links[0].Send(msg, 1, false).Wait(); err != nil {
		t.Fatal(err)
	}
	dev := device.New(device.Config{ID: 1})
	s := &Stage{cfg: StageConfig{Link: links[1], Device: dev}}
	if err := s.chargeBuffered(); err != nil {
		t.Fatal(err)
	}
	if got := dev.Stats().Live[device.Comm]; got != 1024 {
		t.Errorf("comm tag holds %d bytes with one early 1 KiB message, want 1024", got)
	}
	if err := links[1].Recv(msg, 0, false).Wait(); err != nil {
		t.Fatal(err)
	}
	if err := s.chargeBuffered(); err != nil {
		t.Fatal(err)
	}
	if got := dev.Stats().Live[device.Comm]; got != 0 {
		t.Errorf("comm tag holds %d bytes after the receive, want 0", got)
	}
	small := device.New(device.Config{ID: 1, Budget: 100})
	s = &Stage{cfg: StageConfig{Link: &stubLink{buffered: 1 << 10}, Device: small}}
	if err := s.chargeBuffered(); err == nil || !strings.Contains(err.Error(), "1024 bytes of messages") {
		t.Errorf("early messages beyond the budget: %v", err)
	}
}
