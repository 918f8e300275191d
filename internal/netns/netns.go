// Package netns builds a small network of Linux network namespaces for
// tests and benchmarks that need several "hosts" on one machine: each
// host is a namespace with one veth link to a hub namespace holding a
// bridge, its egress shaped by a tc token bucket (tbf) in both
// directions, so traffic between hosts crosses a link of a chosen
// bandwidth while each host's loopback stays fast. The root namespace's
// network is not touched. It needs root and iproute2 (ip, tc); netem is
// not assumed, so links have bandwidth but no added latency.
//
//	n, err := netns.Create(netns.Config{Hosts: 2, RateMbit: 1000})
//	defer n.Close()
//	cmd := n.Command(0, "trellis", "launch", ...)   // runs inside host 0
//
// Names are netns-<tag>-<pid>-h<i> and netns-<tag>-<pid>-hub; Sweep removes
// those of processes that no longer run (a test killed before its
// clean-up), and Close removes this network's, links included (a veth
// goes with its namespace).
package netns

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
)

// Config describes the network.
type Config struct {
	Hosts int // namespaces that stand for hosts, at least 2
	// RateMbit shapes every host's link to the hub, each direction, in
	// Mbit/s (0: unshaped).
	RateMbit int
	// Tag names the namespaces (default "trellis"); Subnet is the /24 they
	// share, "10.a.b" (default 10.231.<pid mod 250>).
	Tag, Subnet string
}

// Net is a created network.
type Net struct {
	cfg   Config
	hosts []string // namespace of each host
	hub   string
	addrs []string // IPv4 address of each host
}

// Available says why the network cannot be built here (nil when it can):
// not root, or no ip/tc.
func Available() error {
	if os.Geteuid() != 0 {
		return errors.New("netns: needs root")
	}
	for _, t := range []string{"ip", "tc"} {
		if _, err := exec.LookPath(t); err != nil {
			return fmt.Errorf("netns: %s not found (install iproute2)", t)
		}
	}
	return nil
}

// Create builds the network: the hub with a bridge, and each host with
// its address, loopback, and shaped link. On any failure it removes what
// it made.
func Create(cfg Config) (*Net, error) {
	if cfg.Hosts < 2 || cfg.Hosts > 200 {
		return nil, fmt.Errorf("netns: Hosts=%d: want 2 to 200", cfg.Hosts)
	}
	if cfg.RateMbit < 0 {
		return nil, fmt.Errorf("netns: RateMbit=%d: must not be negative", cfg.RateMbit)
	}
	if cfg.Tag == "" {
		cfg.Tag = "trellis"
	}
	pid := os.Getpid()
	if cfg.Subnet == "" {
		cfg.Subnet = fmt.Sprintf("10.231.%d", pid%250)
	}
	if err := Available(); err != nil {
		return nil, err
	}
	Sweep(cfg.Tag)
	base := fmt.Sprintf("netns-%s-%d", cfg.Tag, pid)
	n := &Net{cfg: cfg, hub: base + "-hub"}
	if err := n.build(base); err != nil {
		n.Close()
		return nil, err
	}
	return n, nil
}

func (n *Net) build(base string) error {
	if err := ip("netns", "add", n.hub); err != nil {
		return err
	}
	steps := [][]string{
		{"-n", n.hub, "link", "add", "br0", "type", "bridge"},
		{"-n", n.hub, "link", "set", "br0", "up"},
		{"-n", n.hub, "link", "set", "lo", "up"},
	}
	for _, s := range steps {
		if err := ip(s...); err != nil {
			return err
		}
	}
	for i := range n.cfg.Hosts {
		ns := fmt.Sprintf("%s-h%d", base, i)
		addr := fmt.Sprintf("%s.%d", n.cfg.Subnet, i+1)
		if err := ip("netns", "add", ns); err != nil {
			return err
		}
		n.hosts, n.addrs = append(n.hosts, ns), append(n.addrs, addr)
		in, out := fmt.Sprintf("veth%d", i), fmt.Sprintf("port%d", i)
		for _, s := range [][]string{
			{"-n", ns, "link", "add", in, "type", "veth", "peer", "name", out, "netns", n.hub},
			{"-n", ns, "addr", "add", addr + "/24", "dev", in},
			{"-n", ns, "link", "set", in, "up"},
			{"-n", ns, "link", "set", "lo", "up"},
			{"-n", n.hub, "link", "set", out, "master", "br0"},
			{"-n", n.hub, "link", "set", out, "up"},
		} {
			if err := ip(s...); err != nil {
				return err
			}
		}
		if n.cfg.RateMbit > 0 {
			if err := shape(ns, in, n.cfg.RateMbit); err != nil {
				return err
			}
			if err := shape(n.hub, out, n.cfg.RateMbit); err != nil {
				return err
			}
		}
	}
	return nil
}

// shape puts a token bucket of rate Mbit/s on dev's egress in namespace ns.
func shape(ns, dev string, rate int) error {
	burst := max(rate*1250, 16*1024) // 10 ms at the rate (rate·10⁶/8 B/s × 0.01 s), at least 16 KiB
	return run("ip", "netns", "exec", ns, "tc", "qdisc", "add", "dev", dev, "root", "tbf",
		"rate", strconv.Itoa(rate)+"mbit", "burst", strconv.Itoa(burst), "latency", "100ms")
}

// Addr is host i's IPv4 address.
func (n *Net) Addr(i int) string { return n.addrs[i] }

// Name is host i's namespace.
func (n *Net) Name(i int) string { return n.hosts[i] }

// Command is name with args run inside host i's namespace.
func (n *Net) Command(i int, name string, args ...string) *exec.Cmd {
	return exec.Command("ip", append([]string{"netns", "exec", n.hosts[i], name}, args...)...)
}

// Close removes the namespaces (and with them the links).
func (n *Net) Close() error {
	var errs []error
	for _, ns := range append(n.hosts, n.hub) {
		if err := ip("netns", "del", ns); err != nil && !strings.Contains(err.Error(), "No such file") {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// Sweep removes the namespaces named for tag whose creating process no
// longer runs, returning how many.
func Sweep(tag string) int {
	out, err := exec.Command("ip", "netns", "list").Output()
	if err != nil {
		return 0
	}
	removed := 0
	prefix := "netns-" + tag + "-"
	for _, line := range strings.Split(string(out), "\n") {
		name, _, _ := strings.Cut(strings.TrimSpace(line), " ")
		rest, ok := strings.CutPrefix(name, prefix)
		if !ok {
			continue
		}
		pidText, _, _ := strings.Cut(rest, "-")
		pid, err := strconv.Atoi(pidText)
		if err != nil || syscall.Kill(pid, 0) == nil {
			continue
		}
		if ip("netns", "del", name) == nil {
			removed++
		}
	}
	return removed
}

func ip(args ...string) error { return run("ip", args...) }

func run(name string, args ...string) error {
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("netns: %s %s: %v: %s", name, strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}
