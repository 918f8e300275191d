package main

import (
	"bufio"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// readmeCmd is one command of README.md: a line of a sh block, or a "$ "
// line of another block (with the error line that follows it, if any).
type readmeCmd struct {
	line    string
	wantErr string // the "trellis: ..." line the README shows after it
}

// readmeCommands extracts the commands of a Markdown file, joining "\"
// continuations and dropping comments.
func readmeCommands(t *testing.T, path string) []readmeCmd {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var (
		out        []readmeCmd
		fence      string // "" outside a block, else its language ("-" for none)
		cont       string
		lastDollar = -1
	)
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "```") {
			if fence == "" {
				fence = strings.TrimPrefix(line, "```") + "-"
			} else {
				fence, lastDollar = "", -1
			}
			continue
		}
		if fence == "" {
			continue
		}
		text := strings.TrimSpace(line)
		isSh := fence == "sh-"
		switch {
		case !isSh && strings.HasPrefix(text, "$ "):
			text = strings.TrimPrefix(text, "$ ")
		case !isSh && cont == "":
			if lastDollar >= 0 && strings.HasPrefix(text, "trellis: ") {
				out[lastDollar].wantErr = text
			}
			lastDollar = -1
			continue
		case isSh && (text == "" || strings.HasPrefix(text, "#")):
			continue
		}
		text = stripComment(text)
		if strings.HasSuffix(text, "\\") {
			cont += strings.TrimSuffix(text, "\\") + " "
			continue
		}
		out = append(out, readmeCmd{line: cont + text})
		cont = ""
		if !isSh {
			lastDollar = len(out) - 1
		}
	}
	return out
}

// stripComment drops a " # ..." comment outside quotes.
func stripComment(s string) string {
	var q rune
	for i, c := range s {
		switch {
		case q != 0 && c == q:
			q = 0
		case q == 0 && (c == '"' || c == '\''):
			q = c
		case q == 0 && c == '#' && i > 0 && s[i-1] == ' ':
			return strings.TrimSpace(s[:i])
		}
	}
	return strings.TrimSpace(s)
}

// shellWords splits a command line as sh would for these simple lines:
// blanks separate words, quotes group them.
func shellWords(s string) []string {
	var (
		out  []string
		cur  strings.Builder
		q    rune
		word bool
	)
	for _, c := range s {
		switch {
		case q != 0 && c == q:
			q = 0
		case q != 0:
			cur.WriteRune(c)
		case c == '"' || c == '\'':
			q, word = c, true
		case c == ' ' || c == '\t':
			if word {
				out = append(out, cur.String())
				cur.Reset()
				word = false
			}
		default:
			cur.WriteRune(c)
			word = true
		}
	}
	if word {
		out = append(out, cur.String())
	}
	return out
}

// tinySets shrink a train command: a small model, few steps, small
// batches, short samples. Appended last, they win over the command's own
// settings (a --resume gets the same ones, so the job still matches).
var tinySets = []string{
	"model.layers=2", "model.hidden=32", "model.heads=2", "model.seq_len=16",
	"train.micro_batch=2", "train.global_batch=8", "train.steps=4", "train.warmup=1",
	"train.eval_batches=1", "train.sample_len=8", "train.threads=1", "data.cache_dir=off",
}

// tinyCommand turns a README command into the trellis arguments that run
// it in a tiny configuration; ok is false for commands that are not
// trellis's (go test, go generate, bash .ci/run: CI runs those).
func tinyCommand(t *testing.T, dir string, c readmeCmd) (args []string, ok bool) {
	w := shellWords(c.line)
	switch {
	case len(w) > 2 && w[0] == "go" && w[1] == "run" && w[2] == "./cmd/trellis":
		w = w[3:]
	case len(w) > 0 && w[0] == "trellis":
		w = w[1:]
	default:
		return nil, false
	}
	if c.wantErr != "" {
		return w, true // run as written: it fails before its first step
	}
	if slices.Contains(w, "--serve") {
		return nil, false // serves until stopped: the browser test drives the explorer
	}
	for i := range w {
		switch {
		case w[i] == "--until" && i+1 < len(w):
			w[i+1] = "2"
		case w[i] == "path/to/config.json":
			w[i] = filepath.Join(dir, "config.json")
			os.WriteFile(w[i], []byte(`{"model_type":"gpt2","n_layer":4,"n_embd":256,"n_head":4,"vocab_size":50257,"n_positions":4096}`), 0o644)
		case w[i] == "my-cluster.toml":
			w[i] = abs(t, "../../plan/testdata/cpu-host.toml")
		case w[i] == "trellis" && i > 0 && w[i-1] == "--":
			w[i] = trellisBin(t)
		}
	}
	if w[0] == "sample" {
		w = append(w, "--tokens", "8")
	}
	if w[0] == "profile" {
		w = append(w, "--quick", "--backends", "local")
	}
	if w[0] == "train" || w[0] == "launch" {
		for _, s := range tinySets {
			w = append(w, "--set", s)
		}
	}
	return w, true
}

func abs(t *testing.T, p string) string {
	a, err := filepath.Abs(p)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// Every command of the README runs, in order, in one directory, as a new
// user would type it — shrunk to a tiny model and a few steps — and a
// command shown failing fails with the error shown.
func TestREADMECommands(t *testing.T) {
	if testing.Short() {
		t.Skip("runs every README command")
	}
	dir := t.TempDir()
	if err := os.Symlink(abs(t, "../../examples"), filepath.Join(dir, "examples")); err != nil {
		t.Fatal(err)
	}
	cmds := readmeCommands(t, "../../README.md")
	ran := 0
	for _, c := range cmds {
		args, ok := tinyCommand(t, dir, c)
		if !ok {
			t.Logf("not a trellis command, skipped: %s", c.line)
			continue
		}
		ran++
		t0 := time.Now()
		r := run(t, dir, args...)
		t.Logf("%.1fs: %s", time.Since(t0).Seconds(), c.line)
		if c.wantErr != "" {
			want, _, _ := strings.Cut(c.wantErr, ";")
			if r.err == nil || !strings.Contains(r.stderr, want) {
				t.Errorf("%s: want the error %q, got %v\n%s", c.line, want, r.err, r.stderr)
			}
			continue
		}
		if r.err != nil {
			t.Errorf("%s: %v\n%s%s", c.line, r.err, r.stdout, r.stderr)
		}
	}
	if ran < 10 {
		t.Errorf("ran %d README commands; the parser lost some: %q", ran, cmds)
	}
}

// Every job file in examples/ trains, shrunk to a tiny model (those the
// README runs are covered by TestREADMECommands).
func TestExampleJobsTrain(t *testing.T) {
	if testing.Short() {
		t.Skip("trains every example")
	}
	files, err := filepath.Glob("../../examples/*.toml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no examples: %v", err)
	}
	readme := string(readFile(t, "../../README.md"))
	for _, f := range files {
		if strings.Contains(readme, "trellis train --config examples/"+filepath.Base(f)) {
			continue
		}
		dir := t.TempDir()
		args := []string{"train", "--config", abs(t, f)}
		for _, s := range tinySets {
			args = append(args, "--set", s)
		}
		if r := run(t, dir, args...); r.err != nil {
			t.Errorf("%s: %v\n%s", f, r.err, r.stderr)
		}
	}
}
