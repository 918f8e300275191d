package main

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
)

// TestBenchMatmulJSON runs the command on a small matmul and checks the
// JSON fields the issue fixes.
func TestBenchMatmulJSON(t *testing.T) {
	for _, layout := range []string{"nn", "nt", "tn"} {
		cmd := newBenchMatmulCmd()
		var out bytes.Buffer
		cmd.SetOut(&out)
		cmd.SetArgs([]string{"--m", "37", "--k", "20", "--n", "50", "--layout", layout, "--threads", "1", "--isa", "generic", "--time", "1ms", "--json"})
		if err := cmd.Execute(); err != nil {
			t.Fatal(err)
		}
		var res map[string]any
		if err := json.Unmarshal(out.Bytes(), &res); err != nil {
			t.Fatalf("%s: output %q: %v", layout, out.String(), err)
		}
		for _, key := range []string{"gflops", "peak_gflops"} {
			if v, ok := res[key].(float64); !ok || !(v > 0) {
				t.Errorf("%s: %s = %v, want a positive number", layout, key, res[key])
			}
		}
		if res["layout"] != layout || res["isa"] != "generic" || res["m"] != 37.0 {
			t.Errorf("%s: echoed fields wrong: %v", layout, res)
		}
	}
}

func TestBenchMatmulRejectsBadFlags(t *testing.T) {
	cases := map[string][]string{
		"layout":  {"--layout", "tt"},
		"m":       {"--m", "0"},
		"threads": {"--threads", "-2"},
		"isa":     {"--isa", "sse9"},
		"time":    {"--time", "0s"},
	}
	for want, args := range cases {
		cmd := newBenchMatmulCmd()
		cmd.SetOut(new(bytes.Buffer))
		cmd.SetArgs(append(args, "--m", "4", "--k", "4", "--n", "4")[:len(args)])
		err := cmd.Execute()
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%v: error %v, want one naming %q", args, err, want)
		}
	}
}
