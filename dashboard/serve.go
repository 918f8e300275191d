package dashboard

import (
	"context"
	"crypto/subtle"
	"fmt"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"
)

// EnvToken names the environment variable holding the token the two
// servers (the training dashboard and the plan explorer) require when it
// is set: at least 16 characters, given as ?token=, a cookie or an
// Authorization: Bearer header.
const EnvToken = "TRELLIS_HTTP_TOKEN"

// Limits of a server, whatever its clients do.
const (
	// DefaultMaxConns bounds the open connections; at the bound a new one
	// takes the place of the oldest that has not sent a request (or sits
	// idle between requests), else it is closed.
	DefaultMaxConns = 512
	// clientWriteTimeout drops a client that does not take a response (or,
	// on the event stream, one event) for this long.
	clientWriteTimeout = 30 * time.Second
	readHeaderTimeout  = 5 * time.Second
	idleTimeout        = 60 * time.Second
	maxHeaderBytes     = 64 << 10
)

// ServeConfig configures Listen.
type ServeConfig struct {
	// Flag names the flag that gave Addr, for errors and warnings
	// ("--dashboard", "--serve").
	Flag string
	// Addr is where to listen. A bare port (":8080") is loopback,
	// 127.0.0.1:8080; any other interface must be named (0.0.0.0:8080).
	Addr    string
	Handler http.Handler
	// Token, when set, is required of every request (see EnvToken).
	Token string
	// MaxConns bounds the open connections (0: DefaultMaxConns).
	MaxConns int
}

// Server is a listening dashboard or explorer server.
type Server struct {
	srv *http.Server
	ln  *limitListener
	// URL is where it serves, e.g. http://127.0.0.1:8080/.
	URL string
	// Warning, when not empty, says the server is reachable from other
	// machines without a token; the caller shows it.
	Warning string
}

// Listen resolves cfg.Addr (loopback unless another interface is named),
// listens, and wraps the handler in the host check (against DNS
// rebinding), the token check and a write deadline per client.
func Listen(cfg ServeConfig) (*Server, error) {
	if cfg.Token != "" && len(cfg.Token) < 16 {
		return nil, fmt.Errorf("%s: %s is %d characters: a token must have at least 16 (e.g. openssl rand -hex 16)", cfg.Flag, EnvToken, len(cfg.Token))
	}
	addr, host, exposed, err := resolveAddr(cfg.Addr)
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", cfg.Flag, cfg.Addr, err)
	}
	inner, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", cfg.Flag, cfg.Addr, err)
	}
	limit := cfg.MaxConns
	if limit <= 0 {
		limit = DefaultMaxConns
	}
	ln := newLimitListener(inner, limit)
	h := guard{next: cfg.Handler, token: cfg.Token, names: allowedNames(host, exposed)}
	s := &Server{ln: ln, srv: &http.Server{
		Handler:           h,
		ReadHeaderTimeout: readHeaderTimeout,
		IdleTimeout:       idleTimeout,
		MaxHeaderBytes:    maxHeaderBytes,
		ConnState:         ln.track,
	}}
	s.URL = "http://" + inner.Addr().String() + "/"
	if exposed && cfg.Token == "" {
		s.Warning = fmt.Sprintf("%s %s listens on %s, beyond this machine, unauthenticated: anyone who can reach it sees the run (set %s to require a token, or use a bare port, :PORT, for loopback only)",
			cfg.Flag, cfg.Addr, inner.Addr(), EnvToken)
	}
	return s, nil
}

// Serve serves until Shutdown or Close; it returns http.ErrServerClosed then.
func (s *Server) Serve() error { return s.srv.Serve(s.ln) }

// Shutdown stops accepting and waits for requests in flight, up to ctx.
func (s *Server) Shutdown(ctx context.Context) error { return s.srv.Shutdown(ctx) }

// Close closes the listener and every connection.
func (s *Server) Close() error { return s.srv.Close() }

// resolveAddr makes a bare port loopback and says whether the address
// reaches beyond this machine; host is the name or address given.
func resolveAddr(addr string) (listen, host string, exposed bool, err error) {
	if n, perr := strconv.Atoi(addr); perr == nil && n >= 0 && n <= 65535 {
		addr = ":" + addr // a bare port, as people type it: loopback
	}
	h, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "", "", false, fmt.Errorf("want a port (8080), :PORT (loopback) or HOST:PORT (e.g. 0.0.0.0:8080 for every interface)")
	}
	if n, perr := strconv.Atoi(port); perr != nil || n < 0 || n > 65535 {
		return "", "", false, fmt.Errorf("port %q: want a number from 0 to 65535", port)
	}
	if h == "" {
		h = "127.0.0.1"
	}
	switch ip := net.ParseIP(strings.Trim(h, "[]")); {
	case ip != nil:
		exposed = !ip.IsLoopback()
	default:
		exposed = !isLocalhost(h)
	}
	return net.JoinHostPort(h, port), h, exposed, nil
}

func isLocalhost(name string) bool {
	name = strings.ToLower(strings.TrimSuffix(name, "."))
	return name == "localhost" || strings.HasSuffix(name, ".localhost")
}

// allowedNames are the host names a request may carry besides an IP
// address and localhost: the name the server was given and, when it is
// reachable from other machines, this machine's.
func allowedNames(host string, exposed bool) map[string]bool {
	names := map[string]bool{}
	if net.ParseIP(strings.Trim(host, "[]")) == nil {
		names[strings.ToLower(host)] = true
	}
	if exposed {
		if hn, err := os.Hostname(); err == nil {
			hn = strings.ToLower(hn)
			names[hn] = true
			short, _, _ := strings.Cut(hn, ".")
			names[short] = true
		}
	}
	return names
}

// guard checks every request before the handler: the Host header must be
// an IP address, localhost or one of names (a page of another site that
// rebinds its name to this machine's address sends that site's name); the
// token, when set, must come with the request (then any Host is allowed:
// the rebinding page cannot know it). Each response must be taken within
// clientWriteTimeout.
type guard struct {
	next  http.Handler
	token string
	names map[string]bool
}

const tokenCookie = "trellis_token"

func (g guard) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	http.NewResponseController(w).SetWriteDeadline(time.Now().Add(clientWriteTimeout))
	if g.token == "" {
		if !g.hostAllowed(r.Host) {
			http.Error(w, fmt.Sprintf("Host %q is not this server's name (a check against DNS rebinding): open it by its address, e.g. http://127.0.0.1:PORT/, or set %s", r.Host, EnvToken), http.StatusMisdirectedRequest)
			return
		}
		g.next.ServeHTTP(w, r)
		return
	}
	got := r.URL.Query().Get("token")
	if got == "" {
		if c, err := r.Cookie(tokenCookie); err == nil {
			got = c.Value
		}
	}
	if got == "" {
		got, _ = strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	}
	if subtle.ConstantTimeCompare([]byte(got), []byte(g.token)) != 1 {
		http.Error(w, fmt.Sprintf("this server needs its token (%s): open it with ?token=..., or send Authorization: Bearer ...", EnvToken), http.StatusUnauthorized)
		return
	}
	if r.URL.Query().Has("token") {
		// The page's own requests (the event stream, the explorer's
		// links) carry it from here on.
		http.SetCookie(w, &http.Cookie{Name: tokenCookie, Value: g.token, Path: "/", HttpOnly: true, SameSite: http.SameSiteStrictMode})
	}
	g.next.ServeHTTP(w, r)
}

func (g guard) hostAllowed(hostport string) bool {
	h := hostport
	if hh, _, err := net.SplitHostPort(hostport); err == nil {
		h = hh
	}
	h = strings.Trim(h, "[]")
	return net.ParseIP(h) != nil || isLocalhost(h) || g.names[strings.ToLower(h)]
}

// limitListener bounds the open connections. At the bound, a new
// connection evicts the oldest one that has not sent a request yet or
// sits idle between requests (stalled clients cannot keep a normal one
// out); when every connection is busy with a request it is refused (each
// request is bounded in time by the read and write deadlines).
type limitListener struct {
	net.Listener
	max int

	mu    sync.Mutex
	conns map[net.Conn]*connInfo
}

type connInfo struct {
	state http.ConnState
	since time.Time
}

func newLimitListener(ln net.Listener, max int) *limitListener {
	return &limitListener{Listener: ln, max: max, conns: map[net.Conn]*connInfo{}}
}

func (l *limitListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if l.admit(c) {
			return c, nil
		}
		c.Close()
	}
}

// admit records c, evicting the oldest waiting connection at the bound;
// false: every connection is in a request, c is refused.
func (l *limitListener) admit(c net.Conn) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.conns) >= l.max {
		var oldest net.Conn
		var at time.Time
		for oc, info := range l.conns {
			if (info.state == http.StateNew || info.state == http.StateIdle) && (oldest == nil || info.since.Before(at)) {
				oldest, at = oc, info.since
			}
		}
		if oldest == nil {
			return false
		}
		delete(l.conns, oldest)
		oldest.Close()
	}
	l.conns[c] = &connInfo{state: http.StateNew, since: time.Now()}
	return true
}

// track follows each connection's state (http.Server.ConnState).
func (l *limitListener) track(c net.Conn, s http.ConnState) {
	l.mu.Lock()
	defer l.mu.Unlock()
	switch s {
	case http.StateClosed, http.StateHijacked:
		delete(l.conns, c)
	default:
		if info, ok := l.conns[c]; ok {
			info.state, info.since = s, time.Now()
		}
	}
}

// open is the number of connections held (for tests).
func (l *limitListener) open() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.conns)
}
