package tcp

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// Wire format. Every byte between two peers after the handshake is a frame:
// a fixed 32-byte header followed by Length payload bytes.
//
//	off size field
//	0   2    magic 'T','F'
//	2   1    version (1)
//	3   1    type: 1 data, 2 heartbeat, 3 abort, 4 bye
//	4   1    flags: data: bit 0 = last frame of a message, bit 1 = bf16
//	         elements (else fp32); abort: bit 2 = the cause was a timeout
//	5   3    reserved, zero
//	8   8    group id (data), 0 otherwise
//	16  8    tag (data); the failed world rank (abort); 0 otherwise
//	24  4    payload length in bytes
//	28  4    reserved, zero
//
// Integers are little-endian, and so is the payload (elements are sent as
// their in-memory little-endian bytes). A data payload is at most
// maxFrameBytes (pieceBytes when frames are authenticated); an abort
// payload (a UTF-8 reason) at most maxReasonBytes; heartbeats and byes
// carry none. The decoder rejects anything else. With frame authentication
// (Config.FrameAuth; seal.go) every frame is followed by a 16-byte tag, checked
// before the frame is used.
//
// Memory. One frame is bounded, but frames whose receive is not posted yet
// are buffered, and a peer may legitimately run ahead: a Send before its
// Recv, or a collective on a subgroup this rank has not created yet
// (NewGroup needs no communication, so such group ids cannot be told from
// unknown ones). So the bytes buffered per peer are capped at
// Config.MaxBuffered; the frame beyond the cap fails the connection with
// comm.ErrBufferFull naming the peer (which is told why). A group id that
// no group can have (even, other than the world's 0 and the rendezvous
// barrier's 2) is rejected as a bad frame.
const (
	headerSize     = 32
	frameVersion   = 1
	maxFrameBytes  = 16 << 20
	maxReasonBytes = 1 << 10
	flagLast       = 1
	flagBF16       = 2
	flagTimeout    = 4
)

// frameType is the kind of a frame.
type frameType uint8

const (
	frameData      frameType = 1
	frameHeartbeat frameType = 2
	frameAbort     frameType = 3
	frameBye       frameType = 4
)

func (t frameType) String() string {
	switch t {
	case frameData:
		return "data"
	case frameHeartbeat:
		return "heartbeat"
	case frameAbort:
		return "abort"
	case frameBye:
		return "bye"
	}
	return fmt.Sprintf("frametype(%d)", uint8(t))
}

// header is a decoded frame header.
type header struct {
	typ     frameType
	last    bool // data: the last frame of its message
	bf16    bool // data: the elements are bf16
	timeout bool // abort: the failure was a timeout
	group   uint64
	tag     uint64
	length  uint32
}

// errFrame is matched by every decoding error.
var errFrame = errors.New("tcp: bad frame")

// encodeHeader writes h into b (len(b) >= headerSize).
func encodeHeader(b []byte, h header) {
	b = b[:headerSize]
	clear(b)
	b[0], b[1], b[2], b[3] = 'T', 'F', frameVersion, byte(h.typ)
	if h.last {
		b[4] |= flagLast
	}
	if h.bf16 {
		b[4] |= flagBF16
	}
	if h.timeout {
		b[4] |= flagTimeout
	}
	binary.LittleEndian.PutUint64(b[8:], h.group)
	binary.LittleEndian.PutUint64(b[16:], h.tag)
	binary.LittleEndian.PutUint32(b[24:], h.length)
}

// decodeHeader parses and validates a header: magic, version, known type
// and flags, zero reserved bytes, and a payload length within the bound of
// its type.
func decodeHeader(b []byte) (header, error) {
	if len(b) < headerSize {
		return header{}, fmt.Errorf("%w: short header (%d bytes)", errFrame, len(b))
	}
	if b[0] != 'T' || b[1] != 'F' {
		return header{}, fmt.Errorf("%w: bad magic %q", errFrame, b[:2])
	}
	if b[2] != frameVersion {
		return header{}, fmt.Errorf("%w: version %d, want %d", errFrame, b[2], frameVersion)
	}
	if b[5]|b[6]|b[7]|b[28]|b[29]|b[30]|b[31] != 0 {
		return header{}, fmt.Errorf("%w: reserved bits set", errFrame)
	}
	h := header{
		typ:     frameType(b[3]),
		last:    b[4]&flagLast != 0,
		bf16:    b[4]&flagBF16 != 0,
		timeout: b[4]&flagTimeout != 0,
		group:   binary.LittleEndian.Uint64(b[8:]),
		tag:     binary.LittleEndian.Uint64(b[16:]),
		length:  binary.LittleEndian.Uint32(b[24:]),
	}
	allowed := byte(0)
	switch h.typ {
	case frameData:
		allowed = flagLast | flagBF16
	case frameAbort:
		allowed = flagTimeout
	}
	if b[4]&^allowed != 0 {
		return header{}, fmt.Errorf("%w: flags %#x not allowed on a %v frame", errFrame, b[4], h.typ)
	}
	switch h.typ {
	case frameData:
		if h.length > maxFrameBytes {
			return header{}, fmt.Errorf("%w: data frame of %d bytes exceeds the %d-byte limit", errFrame, h.length, maxFrameBytes)
		}
	case frameAbort:
		if h.length > maxReasonBytes || h.group != 0 {
			return header{}, fmt.Errorf("%w: malformed abort frame", errFrame)
		}
	case frameHeartbeat, frameBye:
		if h.length != 0 || h.group != 0 || h.tag != 0 {
			return header{}, fmt.Errorf("%w: malformed %v frame", errFrame, h.typ)
		}
	default:
		return header{}, fmt.Errorf("%w: unknown frame type %d", errFrame, b[3])
	}
	return h, nil
}
