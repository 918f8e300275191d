package main

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// binary builds the trellis command once per test process.
var buildOnce = sync.OnceValues(func() (string, error) {
	dir, err := os.MkdirTemp("", "trellis-bin-")
	if err != nil {
		return "", err
	}
	bin := filepath.Join(dir, "trellis")
	out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput()
	if err != nil {
		return "", &buildError{out: string(out), err: err}
	}
	return bin, nil
})

type buildError struct {
	out string
	err error
}

func (e *buildError) Error() string { return e.err.Error() + "\n" + e.out }

func trellisBin(t *testing.T) string {
	t.Helper()
	bin, err := buildOnce()
	if err != nil {
		t.Fatal(err)
	}
	return bin
}

// tiny is "train" with a job small enough to train in a fraction of a second.
func tiny(extra ...string) []string {
	sets := []string{
		"model.layers=2", "model.hidden=32", "model.heads=2", "model.seq_len=16",
		"train.micro_batch=2", "train.global_batch=4", "train.steps=10", "train.warmup=2",
		"train.eval_every=0", "train.eval_batches=2", "train.sample_every=-1", "train.threads=1",
		"data.cache_dir=off", "parallel.plan=dp=1",
	}
	args := []string{"train"}
	for _, s := range append(sets, extra...) {
		args = append(args, "--set", s)
	}
	return args
}

type result struct {
	stdout, stderr string
	err            error
}

func run(t *testing.T, dir string, args ...string) result {
	t.Helper()
	cmd := exec.Command(trellisBin(t), args...)
	cmd.Dir = dir
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	err := cmd.Run()
	return result{o.String(), e.String(), err}
}

func losses(t *testing.T, path string) map[int]float64 {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	out := map[int]float64{}
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var m struct {
			Step int     `json:"step"`
			Loss float64 `json:"loss"`
		}
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			t.Fatal(err)
		}
		out[m.Step] = m.Loss
	}
	return out
}

// Ten straight steps equal five steps, a checkpoint, and a resumed run to
// ten: the same losses and the same final checkpoint, bit for bit.
func TestUntilResumeBitIdentical(t *testing.T) {
	dir := t.TempDir()
	a := run(t, dir, append(tiny("checkpoint.dir=a"), "--metrics", "a.jsonl")...)
	if a.err != nil {
		t.Fatalf("straight run: %v\n%s", a.err, a.stderr)
	}
	b := run(t, dir, append(tiny("checkpoint.dir=b"), "--until", "5", "--metrics", "b1.jsonl")...)
	if b.err != nil {
		t.Fatalf("--until run: %v\n%s", b.err, b.stderr)
	}
	if _, err := os.Stat(filepath.Join(dir, "b", "step-00000005", "index.json")); err != nil {
		t.Fatalf("--until 5 left no checkpoint: %v", err)
	}
	c := run(t, dir, "train", "--resume", "b", "--metrics", "b2.jsonl")
	if c.err != nil {
		t.Fatalf("resumed run: %v\n%s", c.err, c.stderr)
	}
	la, lb1, lb2 := losses(t, filepath.Join(dir, "a.jsonl")), losses(t, filepath.Join(dir, "b1.jsonl")), losses(t, filepath.Join(dir, "b2.jsonl"))
	if len(la) != 10 || len(lb1) != 5 || len(lb2) != 5 {
		t.Fatalf("steps logged: %d, %d, %d", len(la), len(lb1), len(lb2))
	}
	for s := 1; s <= 10; s++ {
		got, ok := lb1[s]
		if s > 5 {
			got, ok = lb2[s]
		}
		if !ok || got != la[s] {
			t.Errorf("step %d: loss %v (split run) vs %v (straight)", s, got, la[s])
		}
	}
	if la[10] >= la[1] {
		t.Errorf("loss did not fall: %v -> %v", la[1], la[10])
	}
	fa := readFile(t, filepath.Join(dir, "a", "step-00000010", "rank-00000-of-00001.safetensors"))
	fb := readFile(t, filepath.Join(dir, "b", "step-00000010", "rank-00000-of-00001.safetensors"))
	if !bytes.Equal(fa, fb) {
		t.Errorf("final checkpoints differ")
	}
	// sample reads the checkpoint the run wrote.
	s := run(t, dir, "sample", "--checkpoint", "b", "--prompt", "It is", "--tokens", "20")
	if s.err != nil || !strings.HasPrefix(s.stdout, "It is") || len(s.stdout) < 10 {
		t.Errorf("sample: %v %q %s", s.err, s.stdout, s.stderr)
	}
}

func readFile(t *testing.T, p string) []byte {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// treeHash fingerprints every file under dir (names and contents).
func treeHash(t *testing.T, dir string) string {
	t.Helper()
	h := sha256.New()
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		h.Write([]byte(p))
		h.Write(readFile(t, p))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return string(h.Sum(nil))
}

// Bad input gets a one-line error that names the field or file, a non-zero
// exit, and overwrites nothing.
func TestTrainBadInput(t *testing.T) {
	dir := t.TempDir()
	if r := run(t, dir, append(tiny("checkpoint.dir=ck", "train.steps=2", "train.warmup=0"), "--metrics", "good.jsonl")...); r.err != nil {
		t.Fatalf("setup run: %v\n%s", r.err, r.stderr)
	}
	rank := filepath.Join(dir, "ck", "step-00000002", "rank-00000-of-00001.safetensors")
	before := treeHash(t, filepath.Join(dir, "ck"))
	os.WriteFile(filepath.Join(dir, "bad.toml"), []byte("[train]\nstepz = 3\n"), 0o644)
	os.WriteFile(filepath.Join(dir, "oddheads.toml"), []byte("[model]\nheads = 3\n"), 0o644)

	cases := []struct {
		name string
		args []string
		want []string
	}{
		{"unknown --set key", tiny("train.stepz=3"), []string{`unknown key "train.stepz"`}},
		{"unknown file key", []string{"train", "--config", "bad.toml"}, []string{"bad.toml", `unknown key "train.stepz"`}},
		{"heads do not divide hidden", []string{"train", "--config", "oddheads.toml"}, []string{"model.heads=3", "model.hidden=256"}},
		{"missing data file", tiny("data.source=no/such/file.txt"), []string{"no/such/file.txt"}},
		{"bad type", tiny("train.steps=abc"), []string{"train.steps"}},
		{"bad plan", tiny(), []string{"parallel.plan"}},
		{"resume from nowhere", []string{"train", "--resume", "nowhere"}, []string{"nowhere"}},
	}
	cases[5].args = append(cases[5].args, "--parallel", "dp=2,tq=3")
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := run(t, dir, append(c.args, "--metrics", "m.jsonl")...)
			checkOneLineError(t, r, c.want)
			if _, err := os.Stat(filepath.Join(dir, "m.jsonl")); err == nil {
				t.Errorf("a failed run created its metrics file")
			}
		})
	}

	// A corrupt checkpoint: one flipped byte in a rank file.
	b := readFile(t, rank)
	b[len(b)/2] ^= 0x40
	if err := os.WriteFile(rank, b, 0o644); err != nil {
		t.Fatal(err)
	}
	corrupt := treeHash(t, filepath.Join(dir, "ck"))
	if corrupt == before {
		t.Fatal("corruption did not change the tree")
	}
	for _, args := range [][]string{{"train", "--resume", "ck", "--set", "train.steps=4"}, {"sample", "--checkpoint", "ck"}} {
		r := run(t, dir, args...)
		checkOneLineError(t, r, []string{"rank-00000-of-00001.safetensors", "checksum"})
	}
	if treeHash(t, filepath.Join(dir, "ck")) != corrupt {
		t.Errorf("a failed resume changed the checkpoint directory")
	}
}

func checkOneLineError(t *testing.T, r result, want []string) {
	t.Helper()
	if r.err == nil {
		t.Fatalf("succeeded; want an error mentioning %q", want)
	}
	msg := strings.TrimSpace(r.stderr)
	if strings.Count(msg, "\n") != 0 {
		t.Errorf("error is not one line:\n%s", msg)
	}
	for _, w := range want {
		if !strings.Contains(msg, w) {
			t.Errorf("error %q does not mention %q", msg, w)
		}
	}
}
