package tcp

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestConfigValidate(t *testing.T) {
	ok := Config{Rank: 1, Size: 2, MasterAddr: "127.0.0.1:1234", Token: testToken}
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
		{func(c *Config) { c.MaxBuffered = -1 }, "MaxBuffered"},
		{func(c *Config) { c.Token = "" }, "Token (TRELLIS_JOB_TOKEN) is not set"},
		{func(c *Config) { c.Token = "0123456789abcde" }, "Token (TRELLIS_JOB_TOKEN) is 15 bytes: a job token must be at least 16 bytes"},
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
	os.WriteFile(tokFile, []byte("from-file-0123456789\n"), 0o600)
	shortFile := filepath.Join(t.TempDir(), "short")
	os.WriteFile(shortFile, []byte("short\n"), 0o600)
	base := map[string]string{"RANK": "1", "WORLD_SIZE": "4", "MASTER_ADDR": "10.0.0.1", "MASTER_PORT": "29500", EnvToken: testToken}
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
	cfg, err := FromLookup(with(EnvTimeout, "2s", EnvOpTimeout, "1m", EnvMaxBuffered, "1000"))
	if err != nil || cfg.Rank != 1 || cfg.Size != 4 || cfg.MasterAddr != "10.0.0.1:29500" || cfg.Token != testToken ||
		cfg.Timeout != 2*time.Second || cfg.OpTimeout != time.Minute || cfg.MaxBuffered != 1000 || cfg.FrameAuth {
		t.Fatalf("got %+v, %v", cfg, err)
	}
	if cfg, err := FromLookup(with(EnvFrameAuth, "on")); err != nil || !cfg.FrameAuth {
		t.Fatalf("%s=on: got %+v, %v", EnvFrameAuth, cfg, err)
	}
	if cfg, err := FromLookup(with(EnvToken, "", EnvTokenFile, tokFile)); err != nil || cfg.Token != "from-file-0123456789" {
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
		{with(EnvToken, "", EnvTokenFile, filepath.Join(t.TempDir(), "missing")), EnvTokenFile},
		{with(EnvToken, ""), "TRELLIS_JOB_TOKEN (or TRELLIS_JOB_TOKEN_FILE) is not set"},
		{with(EnvToken, "x"), "TRELLIS_JOB_TOKEN is 1 bytes: a job token must be at least 16 bytes"},
		{with(EnvToken, "", EnvTokenFile, shortFile), "the token in TRELLIS_JOB_TOKEN_FILE=" + shortFile + " is 5 bytes"},
		{with(EnvMaxBuffered, "-5"), EnvMaxBuffered},
		{with(EnvFrameAuth, "maybe"), EnvFrameAuth},
		{with("RANK", "9"), "Rank=9"},
	} {
		if _, err := FromLookup(c.look); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("got %v, want an error mentioning %s", err, c.want)
		}
	}
}
