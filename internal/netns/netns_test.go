package netns

import (
	"net"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// requireNetns skips without root and iproute2, unless
// TRELLIS_NETNS_TESTS=require (CI), which fails instead.
func requireNetns(t *testing.T) {
	t.Helper()
	if err := Available(); err != nil {
		if os.Getenv("TRELLIS_NETNS_TESTS") == "require" {
			t.Fatal(err)
		}
		t.Skip(err)
	}
}

// Two hosts reach each other across the hub; the namespaces are gone
// after Close.
func TestCreate(t *testing.T) {
	requireNetns(t)
	n, err := Create(Config{Hosts: 2, RateMbit: 100, Tag: "ttest"})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	// A TCP connection from host 1 to a listener in host 0: listen with a
	// shell-free helper — this test binary itself, inside the namespace.
	exe, _ := os.Executable()
	srv := n.Command(0, exe, "-test.run=^TestHelperListen$")
	srv.Env = append(os.Environ(), "NETNS_HELPER=listen", "NETNS_ADDR="+n.Addr(0)+":7777")
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	defer srv.Process.Kill()
	cli := n.Command(1, exe, "-test.run=^TestHelperListen$")
	cli.Env = append(os.Environ(), "NETNS_HELPER=dial", "NETNS_ADDR="+n.Addr(0)+":7777")
	out, err := cli.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "connected") {
		t.Fatalf("dial from host 1: %v\n%s", err, out)
	}
	names := []string{n.Name(0), n.Name(1)}
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}
	list, _ := runOut("ip", "netns", "list")
	for _, nm := range names {
		if strings.Contains(list, nm) {
			t.Errorf("%s still exists after Close", nm)
		}
	}
}

func runOut(name string, args ...string) (string, error) {
	out, err := exec.Command(name, args...).Output()
	return string(out), err
}

// TestHelperListen is the helper process of TestCreate.
func TestHelperListen(t *testing.T) {
	addr := os.Getenv("NETNS_ADDR")
	switch os.Getenv("NETNS_HELPER") {
	case "listen":
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		c, err := ln.Accept()
		if err == nil {
			c.Write([]byte("hi"))
			c.Close()
		}
	case "dial":
		var c net.Conn
		var err error
		for end := time.Now().Add(5 * time.Second); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
			if c, err = net.Dial("tcp", addr); err == nil {
				break
			}
		}
		if err != nil {
			t.Fatal(err)
		}
		c.Close()
		os.Stdout.WriteString("connected\n")
	default:
		t.Skip("helper")
	}
}
