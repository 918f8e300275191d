package config

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

type modelCfg struct {
	Layers  int     `toml:"layers"`
	Hidden  int     `toml:"hidden"`
	Dropout float64 `toml:"dropout"`
	Name    string  `toml:"name"`
}

type common struct {
	Seed uint64 `toml:"seed"`
}

type trainCfg struct {
	common
	Steps      int           `toml:"steps"`
	LR         float32       `toml:"lr"`
	Fused      bool          `toml:"fused"`
	Timeout    time.Duration `toml:"timeout"`
	Memory     string        `toml:"memory"`
	Milestones []int         `toml:"milestones"`
	Small      int8          `toml:"small"`
	Hidden     int           `toml:"-"`
}

type job struct {
	Model modelCfg          `toml:"model"`
	Train trainCfg          `toml:"train"`
	Tags  map[string]string `toml:"tags"`
}

func defaults() job {
	return job{Model: modelCfg{Layers: 2, Hidden: 64, Name: "gpt"}, Train: trainCfg{Steps: 10, LR: 1e-3}}
}

func writeFile(t *testing.T, text string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "job.toml")
	if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestLoadFileAndSets(t *testing.T) {
	p := writeFile(t, `
[model]
layers = 4
dropout = 0.1

[train]
steps = 100
timeout = "90s"
milestones = [10, 20]
seed = 7
`)
	got := defaults()
	err := Load(&got, p, []string{"train.steps=200", "model.name=tiny gpt", "train.fused=true",
		"train.lr=3e-4", "train.memory=4GiB", "train.timeout=2m", "train.milestones=[1, 2, 3]",
		"tags.owner=me", "TRAIN.Small=-5", "train.seed=1_000"})
	if err != nil {
		t.Fatal(err)
	}
	want := job{
		Model: modelCfg{Layers: 4, Hidden: 64, Dropout: 0.1, Name: "tiny gpt"},
		Train: trainCfg{common: common{Seed: 1000}, Steps: 200, LR: 3e-4, Fused: true, Timeout: 2 * time.Minute,
			Memory: "4GiB", Milestones: []int{1, 2, 3}, Small: -5},
		Tags: map[string]string{"owner": "me"},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got  %+v\nwant %+v", got, want)
	}
}

func TestLoadNoFile(t *testing.T) {
	got := defaults()
	if err := Load(&got, "", nil); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, defaults()) {
		t.Errorf("defaults changed: %+v", got)
	}
}

func TestLoadFileErrors(t *testing.T) {
	cases := []struct {
		name, text, want string
	}{
		{"unknown key", "[train]\nstepz = 3\n", `job.toml: unknown key "train.stepz"`},
		{"unknown keys", "[train]\nstepz = 3\n[model]\nlayerz = 1\n", `job.toml: unknown keys "train.stepz", "model.layerz"`},
		{"unknown section", "[trian]\nsteps = 3\nlr = 1\n", `job.toml: unknown key "trian"`},
		{"unknown top", "steps = 3\n", `job.toml: unknown key "steps"`},
		{"skipped field", "[train]\nHidden = 3\n", `unknown key "train.Hidden"`},
		{"bad type", "[train]\nsteps = \"abc\"\n", `job.toml:2: train.steps: incompatible types: TOML value has type string; destination has type integer`},
		{"syntax", "[train]\nsteps = = 3\n", "job.toml:2: "},
		{"unclosed table header", "[model]\nlayers = 2\n\n[train\nsteps = 3\n", `job.toml:4: expected '.' or ']' to end table name, but got '\n' instead (table header "[train")`},
		{"unterminated string", "[model]\nlayers = 2\n[train]\nsteps = \"x\n", `job.toml:4: `},
		{"overflow", "[train]\nsmall = 300\n", "job.toml:2: "},
		{"bad duration", "[train]\ntimeout = \"soon\"\n", "job.toml:2: "},
		{"value for a map section", "tags = 4\n", "job.toml: tags is a section, not a value (integer given)"},
		{"value for a section", "model = 4\n", "job.toml:1: "},
		{"section for a value", "[train.steps]\nx = 1\n", "job.toml"},
	}
	for _, c := range cases {
		p := writeFile(t, c.text)
		d := defaults()
		err := Load(&d, p, nil)
		if err == nil || !strings.Contains(err.Error(), c.want) || !strings.HasPrefix(err.Error(), p) {
			t.Errorf("%s: err = %v, want %q after the path", c.name, err, c.want)
		}
	}
	d := defaults()
	missing := filepath.Join(t.TempDir(), "nope.toml")
	if err := Load(&d, missing, nil); err == nil || !strings.Contains(err.Error(), missing) {
		t.Errorf("missing file: err = %v, want it named", err)
	}
}

func TestSetErrors(t *testing.T) {
	cases := []struct{ set, want string }{
		{"model.layerz=4", `--set model.layerz=4: unknown key "model.layerz"`},
		{"modell.layers=4", `--set modell.layers=4: unknown key "modell.layers"`},
		{"model.layers.x=4", `--set model.layers.x=4: unknown key "model.layers.x"`},
		{"model=4", `--set model=4: model is a section; set one of its keys (model.<key>=value)`},
		{"tags=4", `--set tags=4: tags is a section`},
		{"tags.a.b=4", `--set tags.a.b=4: `},
		{"train.Hidden=1", `unknown key "train.Hidden"`},
		{"train.steps=abc", "--set train.steps=abc: train.steps wants an integer"},
		{"train.steps=1.5", "train.steps wants an integer"},
		{"train.small=300", "train.small wants an integer (8-bit)"},
		{"train.seed=-1", "train.seed wants a non-negative integer"},
		{"train.lr=fast", "train.lr wants a number"},
		{"train.fused=maybe", "train.fused wants true or false"},
		{"train.timeout=soon", "train.timeout wants a duration"},
		{"train.milestones=[1,", "--set train.milestones=[1,: train.milestones: "},
		{"train.milestones=[\"a\"]", "--set train.milestones=[\"a\"]: train.milestones: "},
		{"train.steps", "--set train.steps: want section.key=value"},
		{"=3", "want section.key=value"},
	}
	for _, c := range cases {
		d := defaults()
		err := Load(&d, "", []string{c.set})
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("--set %s: err = %v, want %q", c.set, err, c.want)
		}
	}
}

func TestLoadRejectsNonStruct(t *testing.T) {
	var n int
	d := defaults()
	for _, dst := range []any{nil, d, &n, (*job)(nil)} {
		if err := Load(dst, "", nil); err == nil {
			t.Errorf("Load(%T) succeeded", dst)
		}
	}
}

func TestDumpRoundTrip(t *testing.T) {
	in := defaults()
	in.Train.Timeout = 90 * time.Second
	in.Train.Milestones = []int{5, 9}
	in.Train.Seed = 42
	in.Model.Name = "quote \" and \\ back"
	in.Tags = map[string]string{"a": "b"}
	text := Dump(&in)
	if !strings.Contains(text, "[model]") || !strings.Contains(text, "layers = 2") {
		t.Errorf("dump lacks sections:\n%s", text)
	}
	var out job
	if err := Load(&out, writeFile(t, text), nil); err != nil {
		t.Fatalf("reloading the dump: %v\n%s", err, text)
	}
	if !reflect.DeepEqual(in, out) {
		t.Errorf("round trip:\n in %+v\nout %+v\n%s", in, out, text)
	}
	if got := Dump(make(chan int)); !strings.HasPrefix(got, "# config: cannot encode") {
		t.Errorf("Dump(chan) = %q", got)
	}
}

func TestKeys(t *testing.T) {
	got := Keys(&job{})
	want := []string{"model.dropout", "model.hidden", "model.layers", "model.name", "tags",
		"train.fused", "train.lr", "train.memory", "train.milestones", "train.seed", "train.small",
		"train.steps", "train.timeout"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Keys = %v\nwant %v", got, want)
	}
}

// FuzzLoad feeds arbitrary bytes as a job file and as an override: Load
// must return (an error or not), never panic.
func FuzzLoad(f *testing.F) {
	f.Add([]byte("[model]\nlayers = 4\n[train]\nsteps = 3\nmilestones = [1]\n"), "train.lr=0.1")
	f.Add([]byte("[[model]]\nx = 1\n"), "tags.a=b")
	f.Add([]byte("model = { layers = \"x\" }\n"), "train.milestones=[1,2]")
	f.Add([]byte("[tags]\nk = 1\n"), "model=1")
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, text []byte, set string) {
		p := filepath.Join(dir, "fuzz.toml")
		if err := os.WriteFile(p, text, 0o644); err != nil {
			t.Fatal(err)
		}
		d := defaults()
		_ = Load(&d, p, []string{set})
		_ = Dump(&d)
	})
}

func TestInlineTables(t *testing.T) {
	p := writeFile(t, "model = { layers = 3 }\ntags = { a = \"b\" }\n")
	d := defaults()
	if err := Load(&d, p, nil); err != nil {
		t.Fatal(err)
	}
	if d.Model.Layers != 3 || d.Model.Hidden != 64 || d.Tags["a"] != "b" {
		t.Errorf("got %+v", d)
	}
}
