package tcp

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"
	"time"

	"trellis/comm"
)

// The rendezvous store: a tiny key-value service rank 0 serves at
// MasterAddr while the world connects. After the authentication handshake a
// client sends requests and reads one response each:
//
//	request   op(1) ‖ keyLen(2) ‖ key ‖ valLen(4) ‖ val     op: 'S' set, 'G' get
//	response  status(1) ‖ len(4) ‖ value or error text      status: 0 ok, 1 error
//
// Set fails if the key exists (a rank registered twice); get blocks until the
// key is set or the store is closed. Keys are at most
// maxKeyBytes and values maxValueBytes; longer ones are refused.
const (
	maxKeyBytes   = 256
	maxValueBytes = 64 << 10
	opSet         = 'S'
	opGet         = 'G'
)

// store serves the rendezvous.
type store struct {
	ln      net.Listener
	token   []byte
	size    int
	limit   time.Duration // per-handshake deadline
	log     *slog.Logger
	refused refusals

	mu    sync.Mutex
	cond  *sync.Cond
	kv    map[string][]byte
	conns map[net.Conn]struct{}
	done  bool
	wg    sync.WaitGroup
}

// serveStore starts serving on ln until close. Every connection is
// authenticated on its own goroutine within limit; one that fails (a stray
// or a rank with another token, which learns why from the refusal) is
// logged and closed, and the store serves on.
func serveStore(ln net.Listener, token []byte, size int, limit time.Duration, log *slog.Logger) *store {
	s := &store{ln: ln, token: token, size: size, limit: limit, log: log, kv: map[string][]byte{},
		conns: map[net.Conn]struct{}{}}
	s.cond = sync.NewCond(&s.mu)
	s.wg.Add(1)
	go s.acceptLoop()
	return s
}

// joined lists the ranks that have not published their address yet, and
// the hosts of those that have.
func (s *store) joined() (missing []int, hosts []string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	seen := map[string]bool{}
	for r := range s.size {
		v, ok := s.kv[fmt.Sprintf("addr/%d", r)]
		if !ok {
			missing = append(missing, r)
			continue
		}
		if h, _, err := net.SplitHostPort(string(v)); err == nil && !seen[h] {
			seen[h] = true
			hosts = append(hosts, h)
		}
	}
	return missing, hosts
}

func (s *store) acceptLoop() {
	defer s.wg.Done()
	for {
		c, err := s.ln.Accept()
		if err != nil {
			return
		}
		s.mu.Lock()
		if s.done {
			s.mu.Unlock()
			c.Close()
			return
		}
		s.conns[c] = struct{}{}
		s.wg.Add(1)
		s.mu.Unlock()
		go s.serve(c)
	}
}

func (s *store) serve(c net.Conn) {
	defer s.wg.Done()
	defer func() {
		s.mu.Lock()
		delete(s.conns, c)
		s.mu.Unlock()
		c.Close()
	}()
	check := func(r int) error {
		if r < 0 || r >= s.size {
			return fmt.Errorf("rank %d is outside a world of %d", r, s.size)
		}
		return nil
	}
	if _, _, err := serverHandshake(c, s.token, roleStore, 0, time.Now().Add(s.limit), false, check); err != nil {
		s.refused.log(s.log, "tcp: refused a connection to the rendezvous store", "from", c.RemoteAddr().String(), "reason", err)
		return
	}
	br := bufio.NewReader(c)
	for {
		op, key, val, err := readRequest(br)
		if err != nil {
			return
		}
		var resp []byte
		switch op {
		case opSet:
			resp = response(s.set(key, val))
		case opGet:
			v, err := s.get(key)
			resp = response(v, err)
		}
		if _, err := c.Write(resp); err != nil {
			return
		}
	}
}

func (s *store) set(key string, val []byte) ([]byte, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.kv[key]; ok {
		return nil, fmt.Errorf("key %q is already set (a rank registered twice?)", key)
	}
	s.kv[key] = val
	s.cond.Broadcast()
	return nil, nil
}

func (s *store) get(key string) ([]byte, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for {
		if v, ok := s.kv[key]; ok {
			return v, nil
		}
		if s.done {
			return nil, errors.New("store closed")
		}
		s.cond.Wait()
	}
}

// close stops the store and waits for its goroutines.
func (s *store) close() {
	s.mu.Lock()
	s.done = true
	for c := range s.conns {
		c.Close()
	}
	s.cond.Broadcast()
	s.mu.Unlock()
	s.ln.Close()
	s.wg.Wait()
}

func response(v []byte, err error) []byte {
	status := byte(0)
	if err != nil {
		status, v = 1, []byte(err.Error())
		if len(v) > maxValueBytes {
			v = v[:maxValueBytes]
		}
	}
	b := make([]byte, 5+len(v))
	b[0] = status
	binary.LittleEndian.PutUint32(b[1:], uint32(len(v)))
	copy(b[5:], v)
	return b
}

func encodeRequest(op byte, key string, val []byte) []byte {
	b := make([]byte, 7+len(key)+len(val))
	b[0] = op
	binary.LittleEndian.PutUint16(b[1:], uint16(len(key)))
	copy(b[3:], key)
	binary.LittleEndian.PutUint32(b[3+len(key):], uint32(len(val)))
	copy(b[7+len(key):], val)
	return b
}

// readRequest decodes one bounded request.
func readRequest(r io.Reader) (byte, string, []byte, error) {
	var h [3]byte
	if _, err := io.ReadFull(r, h[:]); err != nil {
		return 0, "", nil, err
	}
	kn := binary.LittleEndian.Uint16(h[1:])
	if (h[0] != opSet && h[0] != opGet) || kn > maxKeyBytes {
		return 0, "", nil, fmt.Errorf("%w: malformed store request", errFrame)
	}
	key := make([]byte, kn+4)
	if _, err := io.ReadFull(r, key); err != nil {
		return 0, "", nil, err
	}
	vn := binary.LittleEndian.Uint32(key[kn:])
	if vn > maxValueBytes || (h[0] == opGet && vn != 0) {
		return 0, "", nil, fmt.Errorf("%w: store value of %d bytes", errFrame, vn)
	}
	val := make([]byte, vn)
	if _, err := io.ReadFull(r, val); err != nil {
		return 0, "", nil, err
	}
	return h[0], string(key[:kn]), val, nil
}

// readResponse decodes one bounded response.
func readResponse(r io.Reader) ([]byte, error) {
	var h [5]byte
	if _, err := io.ReadFull(r, h[:]); err != nil {
		return nil, err
	}
	n := binary.LittleEndian.Uint32(h[1:])
	if n > maxValueBytes || h[0] > 1 {
		return nil, fmt.Errorf("%w: malformed store response", errFrame)
	}
	v := make([]byte, n)
	if _, err := io.ReadFull(r, v); err != nil {
		return nil, err
	}
	if h[0] == 1 {
		return nil, fmt.Errorf("tcp: store: %s", v)
	}
	return v, nil
}

// storeClient talks to the store.
type storeClient struct {
	conn net.Conn
	br   *bufio.Reader
}

// dialStore connects to the store at addr, retrying until deadline (rank 0
// may not be listening yet), and authenticates within hsTimeout.
func dialStore(addr string, token []byte, rank int, deadline time.Time, hsTimeout time.Duration) (*storeClient, error) {
	wait := 20 * time.Millisecond
	for {
		c, err := net.DialTimeout("tcp", addr, min(time.Until(deadline), hsTimeout))
		if err == nil {
			if _, _, err := clientHandshake(c, token, roleStore, rank, earliest(deadline, hsTimeout), false); err != nil {
				c.Close()
				return nil, fmt.Errorf("tcp: rank %d: joining the rendezvous store at %s (rank 0): %w", rank, addr, err)
			}
			return &storeClient{conn: c, br: bufio.NewReader(c)}, nil
		}
		if time.Now().Add(wait).After(deadline) {
			return nil, fmt.Errorf("tcp: rank %d: %w: cannot reach the rendezvous store at %s (rank 0) before the rendezvous deadline: %v", rank, comm.ErrTimeout, addr, err)
		}
		time.Sleep(wait)
		wait = min(2*wait, time.Second)
	}
}

func (c *storeClient) do(op byte, key string, val []byte, deadline time.Time) ([]byte, error) {
	if len(key) > maxKeyBytes || len(val) > maxValueBytes {
		return nil, fmt.Errorf("tcp: store request too large")
	}
	c.conn.SetDeadline(deadline)
	defer c.conn.SetDeadline(time.Time{})
	if _, err := c.conn.Write(encodeRequest(op, key, val)); err != nil {
		return nil, fmt.Errorf("tcp: store: %w", err)
	}
	v, err := readResponse(c.br)
	if err != nil {
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			return nil, fmt.Errorf("tcp: store: waiting for %q: %w", key, err)
		}
		return nil, err
	}
	return v, nil
}

func (c *storeClient) set(key string, val []byte, deadline time.Time) error {
	_, err := c.do(opSet, key, val, deadline)
	return err
}

func (c *storeClient) get(key string, deadline time.Time) ([]byte, error) {
	return c.do(opGet, key, nil, deadline)
}

func (c *storeClient) close() { c.conn.Close() }
