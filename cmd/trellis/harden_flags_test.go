package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Issue 29: --devices -3 and --until -1 were accepted silently; launch
// --nproc-per-node -1 panicked; errors named Go fields (NProcPerNode=0).
func TestFlagsRefusedNamingTheFlag(t *testing.T) {
	dir := t.TempDir()
	for _, c := range []struct {
		args []string
		want []string
	}{
		{append(tiny(), "--devices", "-3"), []string{"--devices=-3 must be >= 1"}},
		{append(tiny(), "--until", "-1"), []string{"--until=-1 must be >= 0"}},
		{tiny("parallel.devices=-3"), []string{"parallel.devices=-3 must be >= 1"}},
		{tiny("train.loss_scale=1e308", "parallel.plan=precision=fp16"), []string{"train.loss_scale=1e+308 must be in [1, 2^40]"}},
		{[]string{"launch", "--nproc-per-node", "-1", "--", "true"}, []string{"--nproc-per-node=-1: must be at least 1"}},
		{[]string{"launch", "--nproc-per-node", "0", "--", "true"}, []string{"--nproc-per-node=0"}},
		{[]string{"launch", "--nproc-per-node", "99999", "--", "true"}, []string{"more than 1024 workers on one node"}},
		{[]string{"launch", "--nnodes", "4611686018427387904", "--nproc-per-node", "4", "--master-addr", "h", "--", "true"}, []string{"--nnodes=4611686018427387904 × --nproc-per-node=4: more than 1048576 workers"}},
		{[]string{"bench", "comm", "--sizes", "7", "--ops", "reducescatter", "--ranks", "3"}, []string{"each rank's part would hold 0 fp32 elements"}},
	} {
		r := run(t, dir, c.args...)
		checkOneLineError(t, r, c.want)
		if strings.Contains(r.stderr, "panic") || strings.Contains(r.stderr, "NProcPerNode") {
			t.Errorf("%v: %s", c.args, r.stderr)
		}
	}
}

// Issue 29: export --out over an existing model replaced it silently.
func TestExportKeepsAnExistingModel(t *testing.T) {
	dir := t.TempDir()
	if r := run(t, dir, tiny("checkpoint.dir=ck", "train.steps=2")...); r.err != nil {
		t.Fatalf("%v\n%s", r.err, r.stderr)
	}
	if r := run(t, dir, "export", "--checkpoint", "ck", "--out", "m"); r.err != nil {
		t.Fatalf("export: %v\n%s", r.err, r.stderr)
	}
	before := treeHash(t, filepath.Join(dir, "m"))
	checkOneLineError(t, run(t, dir, "export", "--checkpoint", "ck", "--out", "m", "--dtype", "bf16"), []string{"--out m already holds a model", "--force"})
	if treeHash(t, filepath.Join(dir, "m")) != before {
		t.Error("the refused export changed the model")
	}
	if r := run(t, dir, "export", "--checkpoint", "ck", "--out", "m", "--dtype", "bf16", "--force"); r.err != nil {
		t.Errorf("--force: %v\n%s", r.err, r.stderr)
	}
	os.WriteFile(filepath.Join(dir, "afile"), nil, 0o644)
	checkOneLineError(t, run(t, dir, "export", "--checkpoint", "ck", "--out", "afile"), []string{"--out afile is a regular file"})
	checkOneLineError(t, run(t, dir, "export", "--checkpoint", "ck", "--out", "ck"), []string{"is the --checkpoint directory"})
}

// Issue 29: raw terminal escape sequences in a config.json's _name_or_path
// reached the terminal.
func TestNoEscapeSequencesFromFiles(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "config.json")
	os.WriteFile(cfg, []byte(`{"model_type":"gpt2","_name_or_path":"a\u001b]0;pwned\u0007\u001b[2Jb\u009b","n_embd":64,"n_layer":2,"n_head":2,"vocab_size":256,"n_positions":128}`), 0o644)
	out, err := runPlanArgs(t, "--model", cfg, "--cluster", "dgx-h100", "--seq", "128", "--global-batch", "8", "--top", "1")
	if err != nil {
		t.Fatal(err, out)
	}
	if strings.ContainsAny(out, "\x1b\x07\u009b") {
		t.Errorf("raw control characters reach the terminal: %q", out)
	}
	if !strings.Contains(out, `a\x1b]0;pwned\a\x1b[2Jb\u009b`) {
		t.Errorf("the name is not shown escaped:\n%s", out)
	}
}
