package tcp

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"time"
)

// Authentication. Every connection (to the store and between peers) starts
// with a mutual HMAC-SHA256 challenge-response over the job token; the token
// itself never crosses the wire.
//
//	client → server  hello{role, hasToken, rank, nonce_c}        48 bytes
//	server → client  hello{role, hasToken, rank, nonce_s}        48 bytes
//	client → server  proof_c = HMAC(token, "client" ‖ hello_c ‖ hello_s)
//	server → client  verdict{code, reason} ‖ proof_s = HMAC(token, "server" ‖ hello_c ‖ hello_s)
//
// The server checks proof_c and answers with a verdict; a refusal carries the
// reason, so both sides report the same clear error (wrong token, missing
// token, unexpected rank). The client then checks proof_s, so a rank never
// talks to a server that does not know the token either.

// ErrAuth is matched by every authentication failure (wrong or missing job
// token, on either side of a connection).
var ErrAuth = errors.New("tcp: job token check failed")

const (
	helloSize     = 48
	macSize       = sha256.Size
	maxVerdictLen = 512
	roleStore     = 'S'
	rolePeer      = 'P'
)

// Verdict codes.
const (
	verdictOK = iota
	verdictWrongToken
	verdictClientNoToken
	verdictServerNoToken
	verdictRefused
)

type hello struct {
	role      byte
	hasToken  bool
	frameAuth bool // peer connections: this side tags its frames (seal.go)
	rank      uint32
	nonce     [32]byte
}

func (h hello) encode() []byte {
	b := make([]byte, helloSize)
	copy(b, "TRELLIS1")
	b[8] = h.role
	if h.hasToken {
		b[9] = 1
	}
	if h.frameAuth {
		b[10] = 1
	}
	binary.LittleEndian.PutUint32(b[12:], h.rank)
	copy(b[16:], h.nonce[:])
	return b
}

func decodeHello(b []byte) (hello, error) {
	if len(b) != helloSize || string(b[:8]) != "TRELLIS1" {
		return hello{}, fmt.Errorf("%w: not a trellis peer (bad hello)", errFrame)
	}
	if b[9] > 1 || b[10] > 1 || b[11] != 0 || (b[8] != roleStore && b[8] != rolePeer) {
		return hello{}, fmt.Errorf("%w: malformed hello", errFrame)
	}
	h := hello{role: b[8], hasToken: b[9] == 1, frameAuth: b[10] == 1, rank: binary.LittleEndian.Uint32(b[12:])}
	copy(h.nonce[:], b[16:])
	return h, nil
}

func newHello(role byte, token []byte, rank int, frameAuth bool) (hello, error) {
	h := hello{role: role, hasToken: len(token) > 0, frameAuth: frameAuth, rank: uint32(rank)}
	if _, err := rand.Read(h.nonce[:]); err != nil {
		return hello{}, fmt.Errorf("tcp: nonce: %w", err)
	}
	return h, nil
}

func proof(token []byte, label string, hc, hs []byte) []byte {
	m := hmac.New(sha256.New, token)
	m.Write([]byte(label))
	m.Write(hc)
	m.Write(hs)
	return m.Sum(nil)
}

// encodeVerdict is code(1) ‖ len(2) ‖ reason.
func encodeVerdict(code byte, reason string) []byte {
	if len(reason) > maxVerdictLen {
		reason = reason[:maxVerdictLen]
	}
	b := make([]byte, 3+len(reason))
	b[0] = code
	binary.LittleEndian.PutUint16(b[1:], uint16(len(reason)))
	copy(b[3:], reason)
	return b
}

// readVerdict reads and bounds a verdict.
func readVerdict(r io.Reader) (byte, string, error) {
	var h [3]byte
	if _, err := io.ReadFull(r, h[:]); err != nil {
		return 0, "", err
	}
	n := binary.LittleEndian.Uint16(h[1:])
	if n > maxVerdictLen || h[0] > verdictRefused {
		return 0, "", fmt.Errorf("%w: malformed verdict", errFrame)
	}
	reason := make([]byte, n)
	if _, err := io.ReadFull(r, reason); err != nil {
		return 0, "", err
	}
	return h[0], string(reason), nil
}

// clientHandshake authenticates conn from the dialing side and returns the
// rank the server claims and the connection's session keys (seal.go);
// frameAuth says whether this side wants tagged frames (peers must agree).
func clientHandshake(conn net.Conn, token []byte, role byte, rank int, deadline time.Time, frameAuth bool) (int, sessionKeys, error) {
	conn.SetDeadline(deadline)
	defer conn.SetDeadline(time.Time{})
	who := conn.RemoteAddr().String()
	mine, err := newHello(role, token, rank, frameAuth)
	if err != nil {
		return 0, sessionKeys{}, err
	}
	r, hc, hs, err := clientExchange(conn, token, mine, who)
	if err != nil {
		return 0, sessionKeys{}, err
	}
	return r, deriveKeys(token, hc, hs, true), nil
}

// clientExchange runs the client's side of the messages.
func clientExchange(conn net.Conn, token []byte, mine hello, who string) (int, []byte, []byte, error) {
	hc := mine.encode()
	if _, err := conn.Write(hc); err != nil {
		return 0, nil, nil, fmt.Errorf("tcp: handshake with %s: %w", who, err)
	}
	hs := make([]byte, helloSize)
	if _, err := io.ReadFull(conn, hs); err != nil {
		return 0, nil, nil, fmt.Errorf("tcp: handshake with %s: %w", who, err)
	}
	theirs, err := decodeHello(hs)
	if err != nil {
		return 0, nil, nil, fmt.Errorf("tcp: handshake with %s: %w", who, err)
	}
	pc := make([]byte, macSize)
	if mine.hasToken {
		pc = proof(token, "client", hc, hs)
	}
	if _, err := conn.Write(pc); err != nil {
		return 0, nil, nil, fmt.Errorf("tcp: handshake with %s: %w", who, err)
	}
	code, reason, err := readVerdict(conn)
	if err != nil {
		return 0, nil, nil, fmt.Errorf("tcp: handshake with %s: %w", who, err)
	}
	if code != verdictOK {
		return 0, nil, nil, clientRefusal(code, reason, who, int(theirs.rank))
	}
	ps := make([]byte, macSize)
	if _, err := io.ReadFull(conn, ps); err != nil {
		return 0, nil, nil, fmt.Errorf("tcp: handshake with %s: %w", who, err)
	}
	if !hmac.Equal(ps, proof(token, "server", hc, hs)) {
		return 0, nil, nil, fmt.Errorf("%w: rank %d at %s accepted this rank but failed to prove the job token", ErrAuth, theirs.rank, who)
	}
	return int(theirs.rank), hc, hs, nil
}

func clientRefusal(code byte, reason, who string, rank int) error {
	switch code {
	case verdictWrongToken:
		return fmt.Errorf("%w: rank %d at %s refused this rank: wrong job token (TRELLIS_JOB_TOKEN differs between ranks)", ErrAuth, rank, who)
	case verdictClientNoToken:
		return fmt.Errorf("%w: rank %d at %s refused this rank: this rank has no job token (set TRELLIS_JOB_TOKEN)", ErrAuth, rank, who)
	case verdictServerNoToken:
		return fmt.Errorf("%w: rank %d at %s refused this rank: that rank has no job token", ErrAuth, rank, who)
	}
	return fmt.Errorf("tcp: rank %d at %s refused this rank: %s", rank, who, reason)
}

// serverHandshake authenticates an accepted conn and returns the client's
// rank and the session keys. check vets the claimed rank once the token is
// proven; its error is sent to the client as the refusal reason. A peer
// whose frameAuth differs from this side's is refused.
func serverHandshake(conn net.Conn, token []byte, role byte, rank int, deadline time.Time, frameAuth bool, check func(int) error) (int, sessionKeys, error) {
	conn.SetDeadline(deadline)
	defer conn.SetDeadline(time.Time{})
	who := conn.RemoteAddr().String()
	r, hc, hs, err := serverExchange(conn, token, role, rank, who, frameAuth, check)
	if err != nil {
		return 0, sessionKeys{}, err
	}
	return r, deriveKeys(token, hc, hs, false), nil
}

// serverExchange runs the server's side of the messages.
func serverExchange(conn net.Conn, token []byte, role byte, rank int, who string, frameAuth bool, check func(int) error) (int, []byte, []byte, error) {
	hc := make([]byte, helloSize)
	if _, err := io.ReadFull(conn, hc); err != nil {
		return 0, nil, nil, fmt.Errorf("tcp: handshake from %s: %w", who, err)
	}
	theirs, err := decodeHello(hc)
	if err != nil {
		return 0, nil, nil, fmt.Errorf("tcp: handshake from %s: %w", who, err)
	}
	if theirs.role != role {
		return 0, nil, nil, fmt.Errorf("tcp: handshake from %s: wrong role %q", who, theirs.role)
	}
	mine, err := newHello(role, token, rank, frameAuth)
	if err != nil {
		return 0, nil, nil, err
	}
	hs := mine.encode()
	if _, err := conn.Write(hs); err != nil {
		return 0, nil, nil, fmt.Errorf("tcp: handshake from %s: %w", who, err)
	}
	pc := make([]byte, macSize)
	if _, err := io.ReadFull(conn, pc); err != nil {
		return 0, nil, nil, fmt.Errorf("tcp: handshake from %s: %w", who, err)
	}
	code, refusal := serverVerdict(token, theirs, mine, pc, hc, hs, who, check)
	if code != verdictOK {
		conn.Write(encodeVerdict(code, refusal.Error()))
		drainRefused(conn)
		return 0, nil, nil, refusal
	}
	if _, err := conn.Write(append(encodeVerdict(verdictOK, ""), proof(token, "server", hc, hs)...)); err != nil {
		return 0, nil, nil, fmt.Errorf("tcp: handshake from %s: %w", who, err)
	}
	return int(theirs.rank), hc, hs, nil
}

func serverVerdict(token []byte, theirs, mine hello, pc, hc, hs []byte, who string, check func(int) error) (byte, error) {
	claim := fmt.Sprintf("%s (claiming rank %d)", who, theirs.rank)
	switch {
	case len(token) == 0:
		return verdictServerNoToken, fmt.Errorf("%w: refused %s: this rank has no job token (set TRELLIS_JOB_TOKEN)", ErrAuth, claim)
	case !theirs.hasToken:
		return verdictClientNoToken, fmt.Errorf("%w: refused %s: it has no job token", ErrAuth, claim)
	case !hmac.Equal(pc, proof(token, "client", hc, hs)):
		return verdictWrongToken, fmt.Errorf("%w: refused %s: wrong job token", ErrAuth, claim)
	case theirs.role == rolePeer && theirs.frameAuth != mine.frameAuth:
		return verdictRefused, fmt.Errorf("tcp: refused %s: frame authentication is %s there and %s here (%s must agree on every rank)",
			claim, onOff(theirs.frameAuth), onOff(mine.frameAuth), EnvFrameAuth)
	}
	if check != nil {
		if err := check(int(theirs.rank)); err != nil {
			return verdictRefused, fmt.Errorf("tcp: refused %s: %w", claim, err)
		}
	}
	return verdictOK, nil
}

func onOff(b bool) string {
	if b {
		return "on"
	}
	return "off"
}

// drainRefused lets a refusal reach the refused peer before the caller
// closes the connection: a close while the peer's bytes sit unread sends
// a reset, which discards the verdict on its way (the peer then sees
// "connection reset" instead of the reason). The connection is half-closed
// and read until the peer closes its end, at most 64 KiB or 1 s.
func drainRefused(conn net.Conn) {
	if hc, ok := conn.(interface{ CloseWrite() error }); ok {
		hc.CloseWrite()
	}
	conn.SetReadDeadline(time.Now().Add(time.Second))
	io.CopyN(io.Discard, conn, 64<<10)
}
