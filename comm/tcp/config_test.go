package tcp

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestConfigValidate(t *testing.T) {
	ok := Config{Rank: 1, Size: 2, MasterAddr: "127.0.0.1:1234"}
	for _, c := range []struct {
		edit func(*Config)
		want string
	}{
		{func(c *Config) { c.Size = 0 }, "Size=0"},
		{func(c *Config) { c.Rank = 2 }, "Rank=2"},
		{func(c *Config) { c.Rank = -1 }, "Rank=-1"},
		{func(c *Config) { c.MasterAddr = "nohostport" }, "MasterAddr"},
		{func(c *Config) { c.Timeout = -time.Second }, "Timeout"},
		{func(c *Config) { c.SocketBuffer = -1 }, "SocketBuffer"},
	} {
		cfg := ok
		c.edit(&cfg)
		if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("got %v, want an error naming %s", err, c.want)
		}
	}
	if err := ok.Validate(); err != nil {
		t.Fatal(err)
	}
	if err := (Config{Size: 1}).Validate(); err != nil {
		t.Fatalf("a world of one needs no master: %v", err)
	}
}

func TestFromLookup(t *testing.T) {
	tokFile := filepath.Join(t.TempDir(), "token")
	os.WriteFile(tokFile, []byte("from-file\n"), 0o600)
	base := map[string]string{"RANK": "1", "WORLD_SIZE": "4", "MASTER_ADDR": "10.0.0.1", "MASTER_PORT": "29500"}
	with := func(kv ...string) func(string) (string, bool) {
		m := map[string]string{}
		for k, v := range base {
			m[k] = v
		}
		for i := 0; i < len(kv); i += 2 {
			m[kv[i]] = kv[i+1]
		}
		return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
	}
	cfg, err := FromLookup(with(EnvToken, "tok", EnvTimeout, "2s", EnvOpTimeout, "1m"))
	if err != nil || cfg.Rank != 1 || cfg.Size != 4 || cfg.MasterAddr != "10.0.0.1:29500" || cfg.Token != "tok" ||
		cfg.Timeout != 2*time.Second || cfg.OpTimeout != time.Minute {
		t.Fatalf("got %+v, %v", cfg, err)
	}
	if cfg, err := FromLookup(with(EnvTokenFile, tokFile)); err != nil || cfg.Token != "from-file" {
		t.Fatalf("token file: got %q, %v", cfg.Token, err)
	}
	for _, c := range []struct {
		look func(string) (string, bool)
		want string
	}{
		{with("RANK", ""), "RANK is not set"},
		{with("WORLD_SIZE", "four"), "WORLD_SIZE"},
		{with("MASTER_PORT", ""), "MASTER_PORT"},
		{with(EnvTimeout, "soon"), EnvTimeout},
		{with(EnvTokenFile, filepath.Join(t.TempDir(), "missing")), EnvTokenFile},
		{with("RANK", "9"), "Rank=9"},
	} {
		if _, err := FromLookup(c.look); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("got %v, want an error mentioning %s", err, c.want)
		}
	}
}
