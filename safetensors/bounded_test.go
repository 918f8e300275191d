package safetensors

import (
	"strings"
	"testing"
)

// Issue 29: every file read from outside has a bound; a weights file that
// is /dev/zero (a [model] init or an HF model linked to it) read forever.
func TestReadFileRefusesDevices(t *testing.T) {
	if _, err := ReadFile("/dev/zero"); err == nil || !strings.Contains(err.Error(), "must be a regular file, not a character device") {
		t.Errorf("ReadFile(/dev/zero): %v", err)
	}
}
