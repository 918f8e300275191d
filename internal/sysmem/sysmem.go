// Package sysmem reads how much memory this machine has, so that a job
// whose estimated state cannot fit is refused before it allocates (and
// before the kernel's out-of-memory killer ends it without a message).
package sysmem

import (
	"bufio"
	"bytes"
	"os"
	"strconv"
	"strings"
)

// Physical returns the machine's memory in bytes: MemTotal of
// /proc/meminfo, lowered to the cgroup v2 limit (memory.max) of this
// process when one is set. ok is false where neither can be read (not
// Linux); callers then skip the check rather than guess.
func Physical() (bytes int64, ok bool) {
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return 0, false
	}
	total, ok := ParseMeminfo(b, "MemTotal")
	if !ok {
		return 0, false
	}
	if lim, err := os.ReadFile("/sys/fs/cgroup/memory.max"); err == nil {
		if v, err := strconv.ParseInt(strings.TrimSpace(string(lim)), 10, 64); err == nil && v > 0 && v < total {
			total = v
		}
	}
	return total, true
}

// ParseMeminfo returns the value of key ("MemTotal") in /proc/meminfo
// text, in bytes (the file states kB, meaning KiB).
func ParseMeminfo(b []byte, key string) (int64, bool) {
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		k, rest, found := strings.Cut(sc.Text(), ":")
		if !found || k != key {
			continue
		}
		f := strings.Fields(rest)
		if len(f) == 0 {
			return 0, false
		}
		v, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil || v < 0 || v > 1<<53 {
			return 0, false
		}
		if len(f) > 1 && f[1] == "kB" {
			v *= 1024
		}
		return v, true
	}
	return 0, false
}
