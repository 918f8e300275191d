package tcp

import (
	"errors"
	"net"
	"strings"
	"testing"
	"time"

	"trellis/comm"
)

// TestHandshake runs the handshake over a pipe for every combination of
// tokens and checks that both sides agree, with the reason on both.
func TestHandshake(t *testing.T) {
	for _, c := range []struct {
		name                 string
		client, server       string
		clientErr, serverErr string // substrings; "" means success
	}{
		{"same token", "k1", "k1", "", ""},
		{"wrong token", "k1", "k2", "wrong job token", "wrong job token"},
		{"client has none", "", "k2", "this rank has no job token", "it has no job token"},
		{"server has none", "k1", "", "that rank has no job token", "this rank has no job token"},
		{"neither has one", "", "", "that rank has no job token", "this rank has no job token"},
	} {
		t.Run(c.name, func(t *testing.T) {
			a, b := net.Pipe()
			defer a.Close()
			defer b.Close()
			deadline := time.Now().Add(5 * time.Second)
			srv := make(chan error, 1)
			var gotClient int
			go func() {
				r, _, err := serverHandshake(b, []byte(c.server), rolePeer, 0, deadline, true, nil)
				if err == nil && r != 4 {
					err = errors.New("server saw the wrong rank")
				}
				srv <- err
			}()
			gotServer, _, cerr := clientHandshake(a, []byte(c.client), rolePeer, 4, deadline, true)
			serr := <-srv
			check := func(side string, err error, want string) {
				if want == "" {
					if err != nil {
						t.Errorf("%s: %v", side, err)
					}
					return
				}
				if !errors.Is(err, ErrAuth) || !strings.Contains(err.Error(), want) {
					t.Errorf("%s: got %v, want ErrAuth mentioning %q", side, err, want)
				}
			}
			check("client", cerr, c.clientErr)
			check("server", serr, c.serverErr)
			_ = gotClient
			if cerr == nil && gotServer != 0 {
				t.Errorf("client saw server rank %d, want 0", gotServer)
			}
		})
	}
}

// TestHandshakeRefusesRank: a proven token but an unexpected rank is
// refused with the server's reason.
func TestHandshakeRefusesRank(t *testing.T) {
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	deadline := time.Now().Add(5 * time.Second)
	go serverHandshake(b, []byte("k"), rolePeer, 0, deadline, true, func(r int) error {
		return errors.New("unexpected rank 7")
	})
	if _, _, err := clientHandshake(a, []byte("k"), rolePeer, 7, deadline, true); err == nil || !strings.Contains(err.Error(), "unexpected rank 7") {
		t.Fatalf("got %v, want the refusal reason", err)
	}
}

// TestWorldRefusesBadToken: a rank with a wrong token is refused and fails
// at once, saying why; the others do not abort but wait for it and, at the
// rendezvous deadline, name it as the rank that never joined. A missing or
// short token fails the rank itself before it connects.
func TestWorldRefusesBadToken(t *testing.T) {
	for _, c := range []struct {
		name, token, want2 string
	}{
		{"wrong", "another-token-0123456789abcdef", "wrong job token"},
		{"missing", "", "Token (TRELLIS_JOB_TOKEN) is not set"},
		{"short", "x", "Token (TRELLIS_JOB_TOKEN) is 1 bytes: a job token must be at least 16 bytes"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, errs := tryWorld(t, 3, 5*time.Second, func(r int, cfg *Config) {
				cfg.RendezvousTimeout = time.Second
				if r == 2 {
					cfg.Token = c.token
				}
			})
			if errs[2] == nil || !strings.Contains(errs[2].Error(), c.want2) {
				t.Errorf("rank 2: got %v, want an error mentioning %q", errs[2], c.want2)
			}
			if c.name == "wrong" && !errors.Is(errs[2], ErrAuth) {
				t.Errorf("rank 2: got %v, want ErrAuth", errs[2])
			}
			if !errors.Is(errs[0], comm.ErrTimeout) || !strings.Contains(errs[0].Error(), "ranks 2 never joined the store") {
				t.Errorf("rank 0: got %v, want a timeout naming rank 2 as never joined", errs[0])
			}
			// Rank 1 times out too, or learns first that rank 0 gave up.
			if errs[1] == nil || !strings.Contains(errs[1].Error(), "ranks 2 ") {
				t.Errorf("rank 1: got %v, want an error naming rank 2 as missing", errs[1])
			}
		})
	}
}
