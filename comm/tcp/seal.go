package tcp

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// Frame authentication (Config.FrameAuth). After the handshake each direction of a peer
// connection has its own session key,
//
//	k_c→s = HMAC-SHA256(token, "trellis frames client to server" ‖ hello_c ‖ hello_s)[:16]
//	k_s→c = HMAC-SHA256(token, "trellis frames server to client" ‖ hello_c ‖ hello_s)[:16]
//
// fresh per connection (both hellos carry 32 random bytes), and every frame
// is followed by a 16-byte AES-128-GCM tag over the frame,
//
//	tag = GCM-Seal(k, nonce = n ‖ 0⁴, plaintext = header, data = payload).tag
//
// where n counts the frames sent in that direction (64-bit little-endian).
// The tag authenticates the header (its ciphertext enters GHASH) and the
// payload; the counter makes a replayed, dropped, reordered or injected
// frame fail too, since the receiver's count no longer matches. Only the
// tag is sent: frames stay in clear (integrity, not confidentiality). GCM
// over the payload as additional data costs one GHASH pass (carry-less
// multiply), measured several times cheaper than HMAC-SHA256 (see
// docs/SECURITY.md); a frame must then be whole in memory before it is
// checked, so with authentication on, data frames are at most pieceBytes.

// tagSize is the bytes of the tag after each frame.
const tagSize = 16

// ErrTampered is matched by a frame that fails its integrity check: it was
// altered, injected, replayed or dropped between two ranks.
var ErrTampered = errors.New("tcp: frame failed its integrity check (altered, injected or dropped in transit)")

// sessionKeys are a connection's two directions' keys.
type sessionKeys struct{ send, recv []byte }

// deriveKeys computes the keys from the handshake; client says which side
// this is.
func deriveKeys(token, hc, hs []byte, client bool) sessionKeys {
	k := func(label string) []byte {
		m := hmac.New(sha256.New, token)
		m.Write([]byte(label))
		m.Write(hc)
		m.Write(hs)
		return m.Sum(nil)[:16]
	}
	c2s, s2c := k("trellis frames client to server"), k("trellis frames server to client")
	if client {
		return sessionKeys{send: c2s, recv: s2c}
	}
	return sessionKeys{send: s2c, recv: c2s}
}

// framer computes the tags of one direction's frames, in order.
type framer struct {
	aead  cipher.AEAD
	n     uint64 // frames tagged so far
	nonce [12]byte
	out   []byte
}

// newFramer keys a framer; key is 16 bytes (deriveKeys), for which AES and
// GCM cannot fail.
func newFramer(key []byte) *framer {
	blk, err := aes.NewCipher(key)
	if err != nil {
		panic(fmt.Sprintf("tcp: frame key: %v", err))
	}
	aead, err := cipher.NewGCM(blk)
	if err != nil {
		panic(fmt.Sprintf("tcp: frame key: %v", err))
	}
	return &framer{aead: aead, out: make([]byte, 0, headerSize+tagSize)}
}

// tag returns the next frame's tag (valid until the next call).
func (f *framer) tag(hdr, payload []byte) []byte {
	binary.LittleEndian.PutUint64(f.nonce[:], f.n)
	f.n++
	f.out = f.aead.Seal(f.out[:0], f.nonce[:], hdr[:headerSize], payload)
	return f.out[headerSize:]
}

// check reads the tag that follows a frame from r and compares it with
// the frame's own.
func (f *framer) check(r io.Reader, hdr, payload []byte) error {
	var got [tagSize]byte
	if _, err := io.ReadFull(r, got[:]); err != nil {
		return err
	}
	n := f.n
	if subtle.ConstantTimeCompare(got[:], f.tag(hdr, payload)) != 1 {
		return fmt.Errorf("%w: frame %d (a %v frame of %d bytes)", ErrTampered, n, frameType(hdr[3]), len(payload))
	}
	return nil
}
