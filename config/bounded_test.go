package config

import (
	"strings"
	"testing"
)

// TestLoadIsBounded: --config /dev/zero (or any endless stream) is refused
// after MaxFileBytes, not read forever.
func TestLoadIsBounded(t *testing.T) {
	j := defaults()
	err := Load(&j, "/dev/zero", nil)
	if err == nil || !strings.Contains(err.Error(), "/dev/zero: a job file may have at most 1048576 bytes") {
		t.Errorf("Load(/dev/zero) = %v", err)
	}
}

// TestDecodeMatchesLoad: Decode of a file's text is Load of the file.
func TestDecodeMatchesLoad(t *testing.T) {
	text := "[model]\nlayers = 6\n[train]\nsteps = 3\n"
	a, b := defaults(), defaults()
	if err := Load(&a, writeFile(t, text), []string{"model.hidden=32"}); err != nil {
		t.Fatal(err)
	}
	if err := Decode(&b, "job.toml", []byte(text), []string{"model.hidden=32"}); err != nil {
		t.Fatal(err)
	}
	if a.Model != b.Model || a.Train.Steps != b.Train.Steps || b.Model.Layers != 6 || b.Model.Hidden != 32 {
		t.Errorf("Load %+v, Decode %+v", a, b)
	}
	if err := Decode(&b, "job.toml", []byte("[model]\nlayrs = 1\n"), nil); err == nil || !strings.Contains(err.Error(), `job.toml: unknown key "model.layrs"`) {
		t.Errorf("Decode of an unknown key: %v", err)
	}
}
