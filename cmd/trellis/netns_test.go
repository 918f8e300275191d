package main

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"trellis/internal/netns"
)

// Multi-host runs for real: two network namespaces joined through a hub
// by veth links shaped with tc (tbf), one trellis launch per namespace as
// on two machines (internal/netns). They need root and iproute2: without
// them they skip, unless TRELLIS_NETNS_TESTS=require (CI), which fails.

// hosts is a two-host network and a job's shared token.
type hosts struct {
	n              *netns.Net
	dir, bin, tok  string
	rateMbit, port int
}

func newHosts(t *testing.T, rateMbit int) *hosts {
	t.Helper()
	if err := netns.Available(); err != nil {
		if os.Getenv("TRELLIS_NETNS_TESTS") == "require" {
			t.Fatal(err)
		}
		t.Skip(err)
	}
	n, err := netns.Create(netns.Config{Hosts: 2, RateMbit: rateMbit})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := n.Close(); err != nil {
			t.Error(err)
		}
	})
	h := &hosts{n: n, dir: t.TempDir(), bin: trellisBin(t), rateMbit: rateMbit, port: 29500}
	var b [16]byte
	rand.Read(b[:])
	h.tok = filepath.Join(h.dir, "job.token")
	if err := os.WriteFile(h.tok, []byte(hex.EncodeToString(b[:])), 0o600); err != nil {
		t.Fatal(err)
	}
	return h
}

// launch starts trellis launch on both hosts, nproc workers each, with
// the launcher flags and the worker's arguments; node 0 is the master.
func (h *hosts) launch(t *testing.T, nproc int, flags, worker []string) ([]*exec.Cmd, []*lockedBuf) {
	t.Helper()
	var cmds []*exec.Cmd
	var outs []*lockedBuf
	for node := range 2 {
		args := append([]string{"launch", "--nnodes", "2", "--node-rank", strconv.Itoa(node), "--nproc-per-node", strconv.Itoa(nproc),
			"--master-addr", h.n.Addr(0), "--master-port", strconv.Itoa(h.port), "--token-file", h.tok}, flags...)
		cmd := h.n.Command(node, h.bin, append(append(args, "--", h.bin), worker...)...)
		cmd.Dir = h.dir
		out := new(lockedBuf)
		cmd.Stdout, cmd.Stderr = out, out
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
		cmds, outs = append(cmds, cmd), append(outs, out)
	}
	return cmds, outs
}

// run launches and waits for both hosts.
func (h *hosts) run(t *testing.T, nproc int, flags, worker []string) []*lockedBuf {
	t.Helper()
	cmds, outs := h.launch(t, nproc, flags, worker)
	for node, c := range cmds {
		if err := c.Wait(); err != nil {
			t.Fatalf("node %d: %v\n%s\nnode %d's output:\n%s", node, err, outs[node], 1-node, outs[1-node])
		}
	}
	return outs
}

// netnsJob is tiny with a plan and the rest given (later --set win).
func netnsJob(plan string, extra ...string) []string {
	return append(tiny(append([]string{"train.micro_batch=1", "train.steps=6", "checkpoint.dir="}, extra...)...), "--set", "parallel.plan="+plan)
}

// A 3D plan and a tp × pp × sp plan, launched on two hosts with the
// default backend (auto: shared memory inside a host, TCP between them,
// which needs comm/hier), train bit for bit as the same plan does in one
// process.
func TestNetnsPlansMatchInProcess(t *testing.T) {
	h := newHosts(t, 1000)
	for _, c := range []struct {
		plan  string
		nproc int
	}{{"tp=2,pp=2,sp=on", 2}, {"dp=2,tp=2,pp=2", 4}} {
		t.Run(c.plan, func(t *testing.T) {
			job := netnsJob(c.plan, "train.global_batch=8")
			local := filepath.Join(h.dir, "local-"+c.plan+".jsonl")
			if r := run(t, h.dir, append(job, "--metrics", local)...); r.err != nil {
				t.Fatalf("in-process: %v\n%s", r.err, r.stderr)
			}
			launched := filepath.Join(h.dir, "hosts-"+c.plan+".jsonl")
			outs := h.run(t, c.nproc, nil, append(job, "--metrics", launched))
			if !strings.Contains(outs[0].String(), "msg=world backend=hier") {
				t.Errorf("rank 0 did not open a hierarchical world:\n%s", outs[0])
			}
			want, got := losses(t, local), losses(t, launched)
			if len(got) != 6 || len(want) != 6 {
				t.Fatalf("steps: %d launched, %d in-process", len(got), len(want))
			}
			for s, l := range want {
				if got[s] != l {
					t.Errorf("step %d: loss %.9g on two hosts, %.9g in one process", s, got[s], l)
				}
			}
		})
	}
}

// stepTimes is the median measured and predicted step time over steps
// after the first of a metrics file.
func stepTimes(t *testing.T, path string) (measured, predicted float64) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var ms, ps []float64
	for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		var m struct {
			Step      int     `json:"step"`
			StepS     float64 `json:"step_s"`
			Predicted float64 `json:"predicted_step_s"`
		}
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatal(err)
		}
		if m.Step > 1 {
			ms, ps = append(ms, m.StepS), append(ps, m.Predicted)
		}
	}
	return median(ms), median(ps)
}

func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s) == 0 {
		return 0
	}
	return s[len(s)/2]
}

// netnsCluster is a cluster file for the two hosts: two devices per node,
// each node one of this machine's two cores, the device this machine's
// (rounded from trellis profile on an unloaded moment), [intra] comm/shm
// on it, [inter] the shaped link.
func netnsCluster(t *testing.T, dir string, rateMbit int) string {
	t.Helper()
	body := fmt.Sprintf(`name = "two-namespaces"
devices_per_node = 2
engine_stash = true
cores = 1          # the two namespaces share this machine's two cores
core_speedup = 1

[device]
name = "a rank of this host"
memory_gib = 4
reserved_gib = 0
mem_bw_gbps = 6
peak_tflops = { fp32 = 0.1, bf16 = 0.1, fp16 = 0.05 }
gemm_efficiency = 0.6
gemm_knee = 40
attn_efficiency = 0.1
mem_efficiency = 0.2
kernel_gap_us = 1

[intra]   # comm/shm between processes of one host
bw_gbps = 1
latency_us = 15

[inter]   # the veth link, tbf %d Mbit/s each way
bw_gbps = %g
latency_us = 200
`, rateMbit, float64(rateMbit)/8/1000)
	p := filepath.Join(dir, "hosts.toml")
	if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// The plan's rank order puts tensor parallelism inside a host (its
// all-reduces, every layer, on shared memory) and data parallelism across
// (one gradient all-reduce a step over the link); the reverse order puts
// TP on the link. On a shaped link the plan's order is measurably
// faster, as the planner predicts for a cluster file of these hosts.
// (On a 100 Mbit/s link.)
// Runs alternate, two of each; the ratio is of the medians.
func TestNetnsRankOrder(t *testing.T) {
	if testing.Short() {
		t.Skip("eight launched runs")
	}
	const rate = 100
	h := newHosts(t, rate)
	cluster := netnsCluster(t, h.dir, rate)
	orders := []string{"tp-cp-dp-pp", "dp-cp-tp-pp"}
	meas, pred := map[string][]float64{}, map[string][]float64{}
	for round := range 2 {
		for _, o := range orders {
			path := filepath.Join(h.dir, fmt.Sprintf("%s-%d.jsonl", o, round))
			job := netnsJob("dp=2,tp=2,order="+o, "model.hidden=64", "model.heads=4", "model.seq_len=64",
				"train.micro_batch=4", "train.global_batch=32", "parallel.cluster="+cluster)
			h.run(t, 2, nil, append(job, "--metrics", path))
			m, p := stepTimes(t, path)
			meas[o], pred[o] = append(meas[o], m), append(pred[o], p)
		}
	}
	mr := median(meas[orders[1]]) / median(meas[orders[0]])
	pr := median(pred[orders[1]]) / median(pred[orders[0]])
	t.Logf("step time, TP inside hosts (%s): measured %v, predicted %v", orders[0], meas[orders[0]], pred[orders[0]])
	t.Logf("step time, TP across hosts (%s): measured %v, predicted %v", orders[1], meas[orders[1]], pred[orders[1]])
	t.Logf("reverse order / plan's order: measured %.2f×, predicted %.2f×; reverse − plan: measured %.3f s, predicted %.3f s a step",
		mr, pr, median(meas[orders[1]])-median(meas[orders[0]]), median(pred[orders[1]])-median(pred[orders[0]]))
	if pr <= 1 {
		t.Errorf("the planner does not predict the plan's order faster: %.2f×", pr)
	}
	if mr < 1.2 {
		t.Errorf("the plan's order is not measurably faster on the shaped link: reverse/plan = %.2f×", mr)
	}
}

// kill -9 of a worker on one host: the other host's launcher names it
// (its workers fail naming the dead rank), both launchers restart the job
// from its last checkpoint, and it finishes with the uninterrupted run's
// losses bit for bit.
func TestNetnsKillRestart(t *testing.T) {
	h := newHosts(t, 1000)
	job := netnsJob("dp=2,tp=2", "train.global_batch=8", "train.steps=16", "checkpoint.dir=ck", "checkpoint.every=4", "train.log_every=1")
	want := filepath.Join(h.dir, "want.jsonl")
	if r := run(t, h.dir, append(netnsJob("dp=2,tp=2", "train.global_batch=8", "train.steps=16"), "--metrics", want)...); r.err != nil {
		t.Fatalf("in-process: %v\n%s", r.err, r.stderr)
	}
	got := filepath.Join(h.dir, "got.jsonl")
	cmds, outs := h.launch(t, 2, []string{"--max-restarts", "1", "--stop-grace", "1s"}, append(job, "--metrics", got))
	waitLines(t, outs[0], got, 6)
	ws := workers(cmds[0].Process.Pid)
	kill9(t, ws[1], outs[0])
	for node, c := range cmds {
		if err := c.Wait(); err != nil {
			t.Fatalf("node %d: %v\n%s", node, err, outs[node])
		}
	}
	var lines []string
	for node, o := range outs {
		for _, l := range strings.Split(o.String(), "\n") {
			if strings.HasPrefix(l, "trellis launch:") {
				lines = append(lines, fmt.Sprintf("node %d: %s", node, l))
			}
		}
	}
	t.Log(strings.Join(lines, "\n"))
	if !strings.Contains(outs[0].String(), "trellis launch: rank 1 died (signal: killed); restart 1 of 1: resuming from checkpoint ck/step-") {
		t.Errorf("node 0's launcher does not report rank 1's death and the resume:\n%s", outs[0])
	}
	if !strings.Contains(outs[1].String(), "it named rank 1 (node 0) as the peer that failed); restart 1 of 1: resuming from checkpoint ck/step-") {
		t.Errorf("node 1's launcher does not name rank 1 on node 0 and resume:\n%s", outs[1])
	}
	w, g := losses(t, want), losses(t, got)
	if len(g) != 16 {
		t.Fatalf("%d steps after the restart, want 16", len(g))
	}
	for s, l := range w {
		if g[s] != l {
			t.Errorf("step %d: loss %.9g after the restart, %.9g uninterrupted", s, g[s], l)
		}
	}
}

// busbwOn runs trellis bench comm's workers (one all-reduce size) under
// one launcher per host with nproc workers each and returns rank 0's
// busbw in GB/s.
func (h *hosts) busbwOn(t *testing.T, nproc int, backend string, size string, iters int) float64 {
	t.Helper()
	out := filepath.Join(h.dir, fmt.Sprintf("bench-%s-%d.json", backend, nproc))
	os.Setenv("TRELLIS_BENCH_OUT", out)
	defer os.Unsetenv("TRELLIS_BENCH_OUT")
	h.run(t, nproc, nil, []string{"bench", "comm", "--worker", "--backend", backend, "--ranks", strconv.Itoa(2 * nproc),
		"--ops", "allreduce", "--sizes", size, "--iters", strconv.Itoa(iters), "--warmup", "1"})
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	var rows []struct {
		Busbw float64 `json:"busbw_gbps"`
	}
	if err := json.Unmarshal(b, &rows); err != nil || len(rows) != 1 {
		t.Fatalf("%s: %v %s", out, err, b)
	}
	return rows[0].Busbw
}

// All-reduce busbw on the two hosts of a 1 Gbit/s link: between two
// processes of one host (shared memory), across the link (one process per
// host, TCP), and the 2 × 2 world of auto (comm/hier). Logged for
// docs/LAUNCH.md; the test holds only the order of the three.
func TestNetnsBusbw(t *testing.T) {
	h := newHosts(t, 1000)
	out := filepath.Join(h.dir, "intra.json")
	cmd := h.n.Command(0, h.bin, "bench", "comm", "--backend", "shm", "--ranks", "2", "--ops", "allreduce", "--sizes", "16MiB", "--iters", "5", "--json")
	cmd.Dir = h.dir
	b, err := cmd.Output()
	if err != nil {
		t.Fatalf("intra: %v", err)
	}
	os.WriteFile(out, b, 0o644)
	var rep struct {
		Rows []struct {
			Busbw float64 `json:"busbw_gbps"`
		} `json:"rows"`
	}
	if err := json.Unmarshal(b, &rep); err != nil || len(rep.Rows) != 1 {
		t.Fatalf("intra: %v %s", err, b)
	}
	intra := rep.Rows[0].Busbw
	inter := h.busbwOn(t, 1, "tcp", "16MiB", 5)
	world := h.busbwOn(t, 2, "auto", "16MiB", 5)
	flat := h.busbwOn(t, 2, "tcp", "16MiB", 5)
	t.Logf("16 MiB all-reduce busbw: intra-host (shm, 2 processes) %.3f GB/s, inter-host (tcp, 1 per host, %d Mbit/s) %.3f GB/s, 2 × 2 world: auto (hier) %.3f GB/s, tcp %.3f GB/s",
		intra, h.rateMbit, inter, world, flat)
	if !(intra > inter) {
		t.Errorf("shared memory (%.3f GB/s) is not faster than the link (%.3f GB/s)", intra, inter)
	}
	if !(world > flat) {
		t.Errorf("the 2 × 2 world: hier %.3f GB/s, not faster than tcp alone %.3f GB/s", world, flat)
	}
}
