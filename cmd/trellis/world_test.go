package main

import (
	"strings"
	"testing"

	"trellis/comm/world"
	"trellis/train"
)

// parallel.backend accepts exactly the backends comm/world opens: train's
// validation lists the names itself (train does not import the registry),
// so this holds the two together.
func TestBackendsInStep(t *testing.T) {
	for _, b := range world.Backends() {
		j := train.DefaultJob()
		j.Parallel.Backend = b
		if err := j.Check(); err != nil {
			t.Errorf("parallel.backend=%s: comm/world opens it but the job is refused: %v", b, err)
		}
	}
	j := train.DefaultJob()
	j.Parallel.Backend = "nccl"
	if err := j.Check(); err == nil || !strings.Contains(err.Error(), "parallel.backend") {
		t.Errorf("parallel.backend=nccl: got %v, want an error naming parallel.backend", err)
	}
	if _, err := world.Open("nccl", world.Config{}); err == nil {
		t.Error("world.Open(nccl) succeeded")
	}
}
