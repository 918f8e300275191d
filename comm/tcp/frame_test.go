package tcp

import (
	"bytes"
	"errors"
	"testing"
)

func TestHeaderRoundTrip(t *testing.T) {
	for _, h := range []header{
		{typ: frameData, last: true, group: 7, tag: collTag | 3, length: 12},
		{typ: frameData, bf16: true, group: ^uint64(0), tag: 5, length: maxFrameBytes},
		{typ: frameData, last: true},
		{typ: frameHeartbeat},
		{typ: frameBye},
		{typ: frameAbort, tag: 3, length: maxReasonBytes, timeout: true},
	} {
		b := make([]byte, headerSize)
		encodeHeader(b, h)
		got, err := decodeHeader(b)
		if err != nil || got != h {
			t.Errorf("round trip of %+v: got %+v, %v", h, got, err)
		}
	}
}

func TestDecodeHeaderRejects(t *testing.T) {
	good := func() []byte {
		b := make([]byte, headerSize)
		encodeHeader(b, header{typ: frameData, last: true, group: 1, tag: 2, length: 8})
		return b
	}
	for _, c := range []struct {
		name string
		edit func(b []byte) []byte
	}{
		{"short", func(b []byte) []byte { return b[:headerSize-1] }},
		{"magic", func(b []byte) []byte { b[0] = 'X'; return b }},
		{"version", func(b []byte) []byte { b[2] = 9; return b }},
		{"unknown type", func(b []byte) []byte { b[3] = 99; return b }},
		{"zero type", func(b []byte) []byte { b[3] = 0; return b }},
		{"unknown flag", func(b []byte) []byte { b[4] |= 0x80; return b }},
		{"timeout flag on data", func(b []byte) []byte { b[4] |= flagTimeout; return b }},
		{"reserved byte 5", func(b []byte) []byte { b[5] = 1; return b }},
		{"reserved byte 31", func(b []byte) []byte { b[31] = 1; return b }},
		{"oversize data", func(b []byte) []byte {
			encodeHeader(b, header{typ: frameData, length: maxFrameBytes + 1})
			return b
		}},
		{"heartbeat with payload", func(b []byte) []byte {
			encodeHeader(b, header{typ: frameHeartbeat, length: 1})
			return b
		}},
		{"bye with tag", func(b []byte) []byte { encodeHeader(b, header{typ: frameBye, tag: 1}); return b }},
		{"last flag on bye", func(b []byte) []byte { encodeHeader(b, header{typ: frameBye, last: true}); return b }},
		{"oversize abort", func(b []byte) []byte {
			encodeHeader(b, header{typ: frameAbort, length: maxReasonBytes + 1})
			return b
		}},
		{"abort with group", func(b []byte) []byte { encodeHeader(b, header{typ: frameAbort, group: 1}); return b }},
	} {
		if _, err := decodeHeader(c.edit(good())); !errors.Is(err, errFrame) {
			t.Errorf("%s: got %v, want errFrame", c.name, err)
		}
	}
	if _, err := decodeHeader(good()); err != nil {
		t.Fatalf("the unedited header fails: %v", err)
	}
}

// FuzzDecodeFrame: whatever arrives, the decoder neither panics nor accepts
// a length beyond its type's bound, and what it accepts re-encodes to the
// same bytes (so no field is silently ignored).
func FuzzDecodeFrame(f *testing.F) {
	for _, h := range []header{
		{typ: frameData, last: true, group: 1, tag: 2, length: 8},
		{typ: frameAbort, tag: 1, length: 5, timeout: true},
		{typ: frameHeartbeat}, {typ: frameBye},
	} {
		b := make([]byte, headerSize)
		encodeHeader(b, h)
		f.Add(b)
	}
	f.Add([]byte("TF\x01"))
	f.Fuzz(func(t *testing.T, b []byte) {
		h, err := decodeHeader(b)
		if err != nil {
			if !errors.Is(err, errFrame) {
				t.Fatalf("error %v does not wrap errFrame", err)
			}
			return
		}
		limit := uint32(0)
		switch h.typ {
		case frameData:
			limit = maxFrameBytes
		case frameAbort:
			limit = maxReasonBytes
		}
		if h.length > limit {
			t.Fatalf("accepted a %v frame of %d bytes", h.typ, h.length)
		}
		again := make([]byte, headerSize)
		encodeHeader(again, h)
		if !bytes.Equal(again, b[:headerSize]) {
			t.Fatalf("decode/encode changed the header: %x -> %+v -> %x", b[:headerSize], h, again)
		}
	})
}

// FuzzDecodeHello: the handshake's first message.
func FuzzDecodeHello(f *testing.F) {
	h, _ := newHello(rolePeer, []byte("k"), 3, true)
	f.Add(h.encode())
	f.Add([]byte("TRELLIS1"))
	f.Fuzz(func(t *testing.T, b []byte) {
		h, err := decodeHello(b)
		if err != nil {
			return
		}
		if !bytes.Equal(h.encode(), b) {
			t.Fatalf("hello %x decodes to %+v, which encodes differently", b, h)
		}
	})
}

// FuzzStoreMessages: store requests, responses and handshake verdicts are
// decoded with bounded allocations and never panic.
func FuzzStoreMessages(f *testing.F) {
	f.Add(encodeRequest(opSet, "addr/1", []byte("127.0.0.1:5")))
	f.Add(encodeRequest(opGet, "addr/0", nil))
	f.Add(response([]byte("x"), nil))
	f.Add(encodeVerdict(verdictWrongToken, "wrong"))
	f.Fuzz(func(t *testing.T, b []byte) {
		if op, key, val, err := readRequest(bytes.NewReader(b)); err == nil {
			if len(key) > maxKeyBytes || len(val) > maxValueBytes || (op != opSet && op != opGet) {
				t.Fatalf("accepted request op %q key %d bytes value %d bytes", op, len(key), len(val))
			}
			if !bytes.Equal(encodeRequest(op, key, val), b[:7+len(key)+len(val)]) {
				t.Fatal("request does not re-encode")
			}
		}
		if v, err := readResponse(bytes.NewReader(b)); err == nil && len(v) > maxValueBytes {
			t.Fatalf("accepted a %d-byte value", len(v))
		}
		if code, reason, err := readVerdict(bytes.NewReader(b)); err == nil {
			if code > verdictRefused || len(reason) > maxVerdictLen {
				t.Fatalf("accepted verdict %d with a %d-byte reason", code, len(reason))
			}
		}
	})
}
