package checkpoint

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// CheckWritable names the reason a root cannot take checkpoints, and
// creates nothing.
func TestCheckWritable(t *testing.T) {
	tmp := t.TempDir()
	file := filepath.Join(tmp, "file")
	os.WriteFile(file, nil, 0o644)
	ro := filepath.Join(tmp, "ro")
	os.Mkdir(ro, 0o555)
	cases := []struct {
		root, want string // want "": writable
	}{
		{tmp, ""},
		{filepath.Join(tmp, "new", "deeper"), ""},
		{file, "is a file"},
		{filepath.Join(file, "ck"), "cannot be created: " + file + " is a file"},
		{ro, "is not writable"},
		{filepath.Join(ro, "ck"), "cannot be created in " + ro},
	}
	for _, c := range cases {
		if strings.HasPrefix(c.root, ro) && os.Geteuid() == 0 {
			continue // root writes anywhere
		}
		err := CheckWritable(c.root)
		if (c.want == "") != (err == nil) || err != nil && !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want %q", c.root, err, c.want)
		}
	}
	if _, err := os.Stat(filepath.Join(tmp, "new")); err == nil {
		t.Errorf("CheckWritable created a directory")
	}
	left, _ := os.ReadDir(tmp)
	if len(left) != 2 {
		t.Errorf("left %d entries, want the 2 the test made", len(left))
	}
}

// Steps lists complete steps only; a run file round-trips.
func TestStepsAndRunFile(t *testing.T) {
	root := t.TempDir()
	for _, d := range []string{"step-00000002", "step-00000010", "step-00000012.partial", "step-00000011"} {
		os.Mkdir(filepath.Join(root, d), 0o755)
		if d != "step-00000011" {
			os.WriteFile(filepath.Join(root, d, IndexName), []byte("{}"), 0o644)
		}
	}
	steps, err := Steps(root)
	if err != nil || len(steps) != 2 || steps[0] != 2 || steps[1] != 10 {
		t.Errorf("Steps = %v, %v; want [2 10]", steps, err)
	}
	if _, ok, err := ReadRun(root); ok || err != nil {
		t.Errorf("ReadRun of a root without a run file: %v %v", ok, err)
	}
	if err := WriteRun(root, Run{ID: "abc", PID: 7}); err != nil {
		t.Fatal(err)
	}
	r, ok, err := ReadRun(root)
	if !ok || err != nil || r.ID != "abc" || r.PID != 7 {
		t.Errorf("ReadRun = %+v %v %v", r, ok, err)
	}
	os.WriteFile(filepath.Join(root, RunFile), []byte("{}"), 0o644)
	if _, _, err := ReadRun(root); err == nil {
		t.Errorf("a run file without an id was accepted")
	}
}
