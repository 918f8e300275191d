package tcp

import (
	"fmt"
	"log/slog"
	"net"
	"os"
	"strconv"
	"strings"
	"time"

	"trellis/comm"
)

// Defaults for the zero values of Config's durations.
const (
	DefaultTimeout           = 10 * time.Second
	DefaultOpTimeout         = 10 * time.Minute
	DefaultRendezvousTimeout = 5 * time.Minute
)

// Config describes one rank of a TCP world.
type Config struct {
	Rank int // this process's world rank, 0 ≤ Rank < Size
	Size int // world size

	// MasterAddr is host:port of the rendezvous store that rank 0 serves.
	MasterAddr string
	// Token is the job token every connection proves with an HMAC
	// challenge; connections with a different or empty token are refused.
	// At least MinTokenBytes long when Size > 1.
	Token string

	// Timeout bounds how long a peer may stay silent (each connection
	// carries heartbeats every Timeout/4) and how long one handshake or
	// write may take before the peer is declared dead. Default 10 s.
	Timeout time.Duration
	// OpTimeout bounds how long one operation may wait for a live peer
	// (a peer busy computing is alive). Default 10 min.
	OpTimeout time.Duration
	// RendezvousTimeout bounds how long New waits for the whole world to
	// connect. Default 5 min.
	RendezvousTimeout time.Duration

	// ListenAddr is the host (or host:port) peers connect to. Default: the
	// local address this rank uses to reach MasterAddr, on a free port.
	ListenAddr string
	// StoreListener, for rank 0 only, serves the store on an existing
	// listener instead of listening at MasterAddr (tests use a free port).
	StoreListener net.Listener
	// SocketBuffer sets SO_SNDBUF and SO_RCVBUF in bytes; 0 keeps the
	// kernel's autotuning, which is usually best.
	SocketBuffer int
	// Logger receives the rendezvous's progress (whom a rank waits for,
	// every few seconds) and the refused connections. Default
	// slog.Default().
	Logger *slog.Logger

	waitLogEvery time.Duration           // how often the rendezvous logs (tests); default 5 s
	onListen     func(addr net.Addr)     // tests: called once the peer listener is open, before it is published
	wrapConn     func(net.Conn) net.Conn // tests: wraps each connection this rank dials to a peer (an on-path attacker)

	// FrameAuth turns frame authentication on: every frame between two
	// ranks then carries a 16-byte AES-GCM tag under a session key from the
	// handshake, so a frame altered, injected, replayed or dropped on the
	// network fails with ErrTampered naming the peer. It costs about half
	// again the CPU time of an all-reduce, so it is off by default; turn it
	// on wherever the network between the ranks is not trusted
	// (docs/SECURITY.md). Every rank must agree; TRELLIS_COMM_FRAME_AUTH=on
	// sets it.
	FrameAuth bool

	// MaxBuffered bounds the bytes this rank holds, per peer, of frames
	// that arrived before their receives were posted (a Send far ahead of
	// its Recv, or frames nobody will receive); a frame beyond it fails
	// the connection with comm.ErrBufferFull naming the peer. 0 means
	// comm.DefaultMaxBuffered.
	MaxBuffered int64
}

// Validate names the first field that breaks its rule.
func (c Config) Validate() error {
	if err := c.validateShape(); err != nil || c.Size == 1 {
		return err
	}
	return checkToken(c.Token, "Token ("+EnvToken+")", c.Size)
}

// validateShape checks everything but the token.
func (c Config) validateShape() error {
	switch {
	case c.Size < 1:
		return fmt.Errorf("tcp: Size=%d: must be at least 1", c.Size)
	case c.Rank < 0 || c.Rank >= c.Size:
		return fmt.Errorf("tcp: Rank=%d: must be in [0, Size=%d)", c.Rank, c.Size)
	case c.Timeout < 0 || c.OpTimeout < 0 || c.RendezvousTimeout < 0:
		return fmt.Errorf("tcp: Timeout=%v, OpTimeout=%v, RendezvousTimeout=%v: must not be negative", c.Timeout, c.OpTimeout, c.RendezvousTimeout)
	case c.MaxBuffered < 0:
		return fmt.Errorf("tcp: MaxBuffered=%d: must not be negative", c.MaxBuffered)
	case c.SocketBuffer < 0:
		return fmt.Errorf("tcp: SocketBuffer=%d: must not be negative", c.SocketBuffer)
	case c.StoreListener != nil && c.Rank != 0:
		return fmt.Errorf("tcp: StoreListener is set on rank %d: only rank 0 serves the store", c.Rank)
	}
	if c.Size == 1 {
		return nil
	}
	if _, _, err := net.SplitHostPort(c.MasterAddr); err != nil {
		return fmt.Errorf("tcp: MasterAddr=%q: must be host:port: %v", c.MasterAddr, err)
	}
	return nil
}

// MinTokenBytes is the shortest job token accepted: 16 bytes, such as the
// 32 hex digits of `openssl rand -hex 16`.
const MinTokenBytes = 16

// checkToken holds a token to MinTokenBytes; source names where it came
// from. The token itself is never printed.
func checkToken(token, source string, size int) error {
	switch {
	case token == "":
		return fmt.Errorf("tcp: %s is not set: every rank of a world of %d needs the job token (generate one with `openssl rand -hex 16`)", source, size)
	case len(token) < MinTokenBytes:
		return fmt.Errorf("tcp: %s is %d bytes: a job token must be at least %d bytes (generate one with `openssl rand -hex 16`)", source, len(token), MinTokenBytes)
	}
	return nil
}

// withDefaults fills zero durations.
func (c Config) withDefaults() Config {
	if c.Timeout == 0 {
		c.Timeout = DefaultTimeout
	}
	if c.OpTimeout == 0 {
		c.OpTimeout = DefaultOpTimeout
	}
	if c.RendezvousTimeout == 0 {
		c.RendezvousTimeout = DefaultRendezvousTimeout
	}
	if c.MaxBuffered == 0 {
		c.MaxBuffered = comm.DefaultMaxBuffered
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c
}

// Environment variables FromEnv reads.
const (
	EnvRank              = "RANK"
	EnvWorldSize         = "WORLD_SIZE"
	EnvMasterAddr        = "MASTER_ADDR"
	EnvMasterPort        = "MASTER_PORT"
	EnvToken             = "TRELLIS_JOB_TOKEN"
	EnvTokenFile         = "TRELLIS_JOB_TOKEN_FILE"
	EnvTimeout           = "TRELLIS_COMM_TIMEOUT"
	EnvOpTimeout         = "TRELLIS_COMM_OP_TIMEOUT"
	EnvRendezvousTimeout = "TRELLIS_RENDEZVOUS_TIMEOUT"
	EnvMaxBuffered       = "TRELLIS_COMM_MAX_BUFFERED"
	EnvFrameAuth         = "TRELLIS_COMM_FRAME_AUTH"
)

// FromEnv builds a Config from the torchrun-style environment that
// `trellis launch` sets: RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT, and
// TRELLIS_JOB_TOKEN (or TRELLIS_JOB_TOKEN_FILE naming a file that holds it),
// with optional TRELLIS_COMM_TIMEOUT, TRELLIS_COMM_OP_TIMEOUT and
// TRELLIS_RENDEZVOUS_TIMEOUT (Go durations such as "30s"),
// TRELLIS_COMM_FRAME_AUTH (on, or off: the default) and
// TRELLIS_COMM_MAX_BUFFERED (bytes). Package launch
// also understands Slurm and Open MPI environments.
func FromEnv() (Config, error) { return FromLookup(os.LookupEnv) }

// FromLookup is FromEnv over any variable lookup.
func FromLookup(lookup func(string) (string, bool)) (Config, error) {
	var c Config
	var err error
	get := func(k string) string { v, _ := lookup(k); return strings.TrimSpace(v) }
	if c.Rank, err = envInt(get, EnvRank); err != nil {
		return c, err
	}
	if c.Size, err = envInt(get, EnvWorldSize); err != nil {
		return c, err
	}
	if c.Size > 1 {
		host, port := get(EnvMasterAddr), get(EnvMasterPort)
		if host == "" || port == "" {
			return c, fmt.Errorf("tcp: %s and %s must be set for a world of %d", EnvMasterAddr, EnvMasterPort, c.Size)
		}
		c.MasterAddr = net.JoinHostPort(host, port)
	}
	var source string
	if c.Token, source, err = envToken(get); err != nil {
		return c, err
	}

	for _, d := range []struct {
		key string
		dst *time.Duration
	}{{EnvTimeout, &c.Timeout}, {EnvOpTimeout, &c.OpTimeout}, {EnvRendezvousTimeout, &c.RendezvousTimeout}} {
		if v := get(d.key); v != "" {
			if *d.dst, err = time.ParseDuration(v); err != nil {
				return c, fmt.Errorf("tcp: %s=%q: %v", d.key, v, err)
			}
		}
	}
	switch v := strings.ToLower(get(EnvFrameAuth)); v {
	case "on", "1", "true":
		c.FrameAuth = true
	case "", "off", "0", "false":
	default:
		return c, fmt.Errorf("tcp: %s=%q: must be on or off", EnvFrameAuth, v)
	}
	if v := get(EnvMaxBuffered); v != "" {
		if c.MaxBuffered, err = strconv.ParseInt(v, 10, 64); err != nil || c.MaxBuffered < 1 {
			return c, fmt.Errorf("tcp: %s=%q: must be a positive number of bytes", EnvMaxBuffered, v)
		}
	}
	if err := c.validateShape(); err != nil || c.Size == 1 {
		return c, err
	}
	return c, checkToken(c.Token, source, c.Size)
}

func envInt(get func(string) string, key string) (int, error) {
	v := get(key)
	if v == "" {
		return 0, fmt.Errorf("tcp: %s is not set", key)
	}
	n, err := strconv.Atoi(v)
	if err != nil {
		return 0, fmt.Errorf("tcp: %s=%q: not an integer", key, v)
	}
	return n, nil
}

// envToken reads the token and says where from, for error messages.
func envToken(get func(string) string) (string, string, error) {
	if t := get(EnvToken); t != "" {
		return t, EnvToken, nil
	}
	f := get(EnvTokenFile)
	if f == "" {
		return "", EnvToken + " (or " + EnvTokenFile + ")", nil
	}
	b, err := os.ReadFile(f)
	if err != nil {
		return "", "", fmt.Errorf("tcp: %s: %w", EnvTokenFile, err)
	}
	return strings.TrimSpace(string(b)), fmt.Sprintf("the token in %s=%s", EnvTokenFile, f), nil
}
