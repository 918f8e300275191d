package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"trellis/launch"
)

// The defaults that depend on the context: the demonstration's budget
// belongs to the default model only; the plan follows the launcher's world
// or --devices unless pinned; the prompt comes from the user's text.
func TestAssembleJobDefaults(t *testing.T) {
	dir := t.TempDir()
	text := filepath.Join(dir, "mine.txt")
	os.WriteFile(text, []byte("\nCall me Ishmael. Some years ago, never mind how long precisely\nhaving little"), 0o644)
	job := filepath.Join(dir, "job.toml")
	os.WriteFile(job, []byte("[parallel]\nplan = \"dp=2\"\n"), 0o644)
	world2 := &launch.Env{WorldSize: 2, LocalWorldSize: 2, Source: "torchrun"}
	cases := []struct {
		name         string
		config       string
		sets         []string
		env          *launch.Env
		plan, memory string
		prompt       string // "" : the default's
	}{
		{"default job", "", nil, nil, "auto", "48MiB", ""},
		{"only steps changed", "", []string{"train.steps=20"}, nil, "auto", "48MiB", ""},
		{"another model", "", []string{"model.layers=6"}, nil, "auto", "", ""},
		{"another micro-batch", "", []string{"train.micro_batch=1"}, nil, "auto", "", ""},
		{"budget set", "", []string{"model.layers=6", "parallel.device_memory=1GiB"}, nil, "auto", "1GiB", ""},
		{"under a launcher", "", nil, world2, "dp=2,zero=3", "", ""},
		{"launcher, plan pinned", "", []string{"parallel.plan=dp=4"}, world2, "dp=4", "48MiB", ""},
		{"launcher, plan from a file", job, nil, world2, "dp=2", "48MiB", ""},
		{"devices", "", []string{"parallel.devices=2"}, nil, "dp=2,zero=3", "", ""},
		{"plan chosen", "", []string{"parallel.plan=dp=1"}, nil, "dp=1", "48MiB", ""},
		{"user text", "", []string{"data.source=" + text}, nil, "auto", "48MiB", "Call me Ishmael. Some years ago, never"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			spec, err := assembleJob(trainFlags{config: c.config}, c.sets, c.env)
			if err != nil {
				t.Fatal(err)
			}
			p := spec.job.Parallel
			if p.Plan != c.plan || p.DeviceMemory != c.memory {
				t.Errorf("plan %q, device_memory %q; want %q, %q", p.Plan, p.DeviceMemory, c.plan, c.memory)
			}
			// The demonstration's model and micro-batch keep its 4
			// devices; another job's device count is the planner's.
			if want := map[bool]int{true: 4}[c.plan == "auto" && c.memory == "48MiB"]; c.plan == "auto" && p.Devices != want {
				t.Errorf("devices %d, want %d", p.Devices, want)
			}
			if c.prompt != "" && spec.job.Train.Prompt != c.prompt {
				t.Errorf("prompt %q, want %q", spec.job.Train.Prompt, c.prompt)
			}
			if err := checkLauncher(spec.job, c.env); c.env != nil && c.plan == "dp=4" && (err == nil || !strings.Contains(err.Error(), "started 2 processes")) {
				t.Errorf("a dp=4 plan under 2 processes: %v", err)
			}
		})
	}
}
