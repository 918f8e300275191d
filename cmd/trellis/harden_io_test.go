package main

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Issue 29: every file read from outside has a size bound. Each of these
// read /dev/zero (or a 3 GB argument file) until memory ran out.
func TestOutsideReadsBounded(t *testing.T) {
	dir := t.TempDir()
	bigArgs := filepath.Join(dir, "megatron.args")
	os.WriteFile(bigArgs, []byte(strings.Repeat("--bf16 ", 300000)), 0o644) // 2.1 MB
	traceDir := filepath.Join(dir, "trace")
	os.Mkdir(traceDir, 0o755)
	os.Symlink("/dev/zero", filepath.Join(traceDir, "trace.rank0.json"))
	job := []string{"--model", "llama3-8b", "--cluster", "dgx-h100", "--seq", "4096", "--global-batch", "64"}
	for _, c := range []struct {
		name string
		run  func() error
		want string
	}{
		{"--model /dev/zero", func() error {
			_, err := runPlanArgs(t, "--model", "/dev/zero", "--cluster", "dgx-h100", "--seq", "4096", "--global-batch", "64")
			return err
		}, "--model: /dev/zero: a model file (config.json) may have at most 1048576 bytes (1 MiB)"},
		{"--cluster /dev/zero", func() error {
			_, err := runPlanArgs(t, "--model", "llama3-8b", "--cluster", "/dev/zero", "--seq", "4096", "--global-batch", "64")
			return err
		}, "--cluster: /dev/zero: a cluster file may have at most 1048576 bytes"},
		{"--from deepspeed /dev/zero", func() error {
			_, err := runPlanArgs(t, append(job, "--from", "deepspeed", "/dev/zero")...)
			return err
		}, "a deepspeed configuration may have at most 1048576 bytes"},
		{"--from torchtitan /dev/zero", func() error {
			_, err := runPlanArgs(t, append(job, "--from", "torchtitan", "/dev/zero")...)
			return err
		}, "a torchtitan configuration may have at most 1048576 bytes"},
		{"--from megatron FILE of 2 MB", func() error {
			_, err := runPlanArgs(t, append(job, "--from", "megatron", bigArgs)...)
			return err
		}, "a megatron configuration may have at most 1048576 bytes"},
		{"trace merge of a rank file linked to /dev/zero", func() error {
			return execute(newTraceCmd(), "merge", traceDir)
		}, "a trace file must be a regular file, not a character device"},
	} {
		err := c.run()
		if err == nil || !strings.Contains(err.Error(), c.want) || strings.Contains(err.Error(), "\n") {
			t.Errorf("%s: %v, want one line containing %q", c.name, err, c.want)
		}
	}
}

// Issue 29: report x.jsonl -o x.jsonl replaced the metrics with the HTML;
// report -o and profile -o replaced a FIFO, a symbolic link or a device
// node with a regular file. Now the output must not be an input, and must
// be a regular file or a link to one (which is written through).
func TestOutputsDoNotDestroy(t *testing.T) {
	dir := t.TempDir()
	metrics := filepath.Join(dir, "x.jsonl")
	const line = `{"step":1,"loss":2,"ranks":[{"rank":0}]}` + "\n"
	os.WriteFile(metrics, []byte(line), 0o644)
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	linkToInput := filepath.Join(dir, "in.html")
	os.Symlink(metrics, linkToInput)
	for _, c := range []struct{ out, want string }{
		{metrics, "-o " + metrics + " is the input " + metrics},
		{linkToInput, "is the input"},
		{fifo, "is a named pipe (FIFO), not a regular file"},
		{"/dev/null", "-o /dev/null is a character device, not a regular file"},
		{dir, "is a directory, not a regular file"},
	} {
		err := runReport(metrics, reportFlags{out: c.out})
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("report -o %s: %v, want %q", c.out, err, c.want)
		}
	}
	if b, _ := os.ReadFile(metrics); string(b) != line {
		t.Fatalf("the metrics file changed: %q", b)
	}
	if st, err := os.Lstat(fifo); err != nil || st.Mode()&os.ModeNamedPipe == 0 {
		t.Fatalf("the FIFO was replaced")
	}
	// A symbolic link to a regular file is followed, and stays a link.
	real := filepath.Join(dir, "real.html")
	os.WriteFile(real, nil, 0o644)
	link := filepath.Join(dir, "link.html")
	os.Symlink(real, link)
	if err := runReport(metrics, reportFlags{out: link}); err != nil {
		t.Fatal(err)
	}
	if st, _ := os.Lstat(link); st.Mode()&os.ModeSymlink == 0 {
		t.Error("the link was replaced")
	}
	if b, _ := os.ReadFile(real); !strings.Contains(string(b), "<html") {
		t.Error("the link's target was not written")
	}
	// profile -o refuses at once, before measuring for minutes.
	start := time.Now()
	if err := execute(newProfileCmd(), "-o", fifo, "--quick"); err == nil || !strings.Contains(err.Error(), "named pipe") {
		t.Errorf("profile -o FIFO: %v", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("profile -o FIFO took %v to refuse", d)
	}
	// trace merge: trace.json linked to a rank file.
	td := filepath.Join(dir, "trace")
	os.Mkdir(td, 0o755)
	os.WriteFile(filepath.Join(td, "trace.rank0.json"), []byte(`{"traceEvents":[]}`), 0o644)
	os.Symlink("trace.rank0.json", filepath.Join(td, "trace.json"))
	if err := execute(newTraceCmd(), "merge", td); err == nil || !strings.Contains(err.Error(), "is the input") {
		t.Errorf("trace merge onto its input: %v", err)
	}
}
