package main

import (
	"path/filepath"
	"testing"

	"trellis/config"
	"trellis/train"
)

// Every job file in examples/ loads and passes the checks a run makes
// before it starts.
func TestExampleJobs(t *testing.T) {
	files, err := filepath.Glob("../../examples/*.toml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no examples: %v", err)
	}
	for _, f := range files {
		job := train.DefaultJob()
		if err := config.Load(&job, f, nil); err != nil {
			t.Errorf("%s: %v", f, err)
			continue
		}
		if err := job.Check(); err != nil {
			t.Errorf("%s: %v", f, err)
		}
	}
}
