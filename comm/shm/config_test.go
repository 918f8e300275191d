package shm

import (
	"math"
	"strings"
	"testing"
)

func TestConfigValidate(t *testing.T) {
	ok := Config{Rank: 0, Size: 2, Name: "job-1"}
	for _, c := range []struct {
		edit func(*Config)
		want string
	}{
		{func(c *Config) { c.Size = 0 }, "Size=0"},
		{func(c *Config) { c.Rank = 2 }, "Rank=2"},
		{func(c *Config) { c.Name = "" }, "Name"},
		{func(c *Config) { c.Name = "a/b" }, `Name="a/b"`},
		{func(c *Config) { c.Name = strings.Repeat("x", 101) }, "Name"},
		{func(c *Config) { c.WorldRanks = []int{3} }, "WorldRanks"},
		{func(c *Config) { c.SliceBytes = 1000 }, "SliceBytes=1000"},
		{func(c *Config) { c.Depth = 9 }, "Depth=9"},
		{func(c *Config) { c.RingBytes = 5000 }, "RingBytes=5000"},
		{func(c *Config) { c.MaxBuffered = -1 }, "MaxBuffered"},
	} {
		cfg := ok
		c.edit(&cfg)
		if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("got %v, want an error naming %s", err, c.want)
		}
	}
	if err := ok.Validate(); err != nil {
		t.Errorf("a good config: %v", err)
	}
}

// A directory that cannot hold segments is one line naming it; New fails
// the same way.
func TestUnusableDir(t *testing.T) {
	for _, c := range []struct {
		dir   string
		bytes int64
		want  string
	}{
		{"/nonexistent-trellis-dir", 1, "/nonexistent-trellis-dir"},
		{testDir(t), math.MaxInt64 / 2, "free, "},
	} {
		err := Usable(c.dir, c.bytes)
		if err == nil || !strings.Contains(err.Error(), c.want) || strings.Contains(err.Error(), "\n") {
			t.Errorf("Usable(%s, %d): %v, want one line containing %q", c.dir, c.bytes, err, c.want)
		}
	}
	_, err := New(Config{Rank: 0, Size: 2, Name: "x", Dir: "/nonexistent-trellis-dir"})
	if err == nil || !strings.Contains(err.Error(), "/nonexistent-trellis-dir") || strings.Contains(err.Error(), "\n") {
		t.Errorf("New in a missing directory: %v", err)
	}
}
