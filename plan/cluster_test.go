package plan

import (
	"os"
	"strings"
	"testing"
)

func TestClusterPresets(t *testing.T) {
	for _, c := range []struct {
		name      string
		memGiB    float64
		bf16, fp8 float64 // TFLOP/s
	}{
		{"dgx-a100", 80, 312, 0},
		{"dgx-h100", 79.6, 989.4, 1978.9},
		{"dgx-h200", 140.4, 989.4, 1978.9},
	} {
		cl, err := ClusterPreset(c.name)
		if err != nil {
			t.Fatal(err)
		}
		if err := cl.Validate(); err != nil {
			t.Errorf("%s: %v", c.name, err)
		}
		a := cl.Accel
		if g := float64(a.Memory) / gib; g < c.memGiB-0.05 || g > c.memGiB+0.05 {
			t.Errorf("%s: memory %.2f GiB, want %.1f", c.name, g, c.memGiB)
		}
		if a.Peak[BF16] != c.bf16*tera || a.Peak[FP8] != c.fp8*tera {
			t.Errorf("%s: peaks %v", c.name, a.Peak)
		}
		if cl.DevicesPerNode != 8 || cl.Intra.BW <= cl.Inter.BW {
			t.Errorf("%s: want 8 per node and NVLink faster than the network", c.name)
		}
	}
}

// cpuHostCluster is testdata/cpu-host.toml, parsed.
func cpuHostCluster(t *testing.T) Cluster {
	t.Helper()
	data, err := os.ReadFile("testdata/cpu-host.toml")
	if err != nil {
		t.Fatal(err)
	}
	c, err := ParseClusterFile(data)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestClusterFileTOML(t *testing.T) {
	c := cpuHostCluster(t)
	if c.Name != "cpu-host" || c.DevicesPerNode != 2 || c.Accel.Memory != 11*gib || c.Accel.Reserved != gib/2 ||
		!near(c.Accel.Peak[FP32], 0.211*tera) || !near(c.Intra.BW, 10*giga) || !near(c.Inter.Latency, 50*us) || !near(c.Accel.KernelGap, us) {
		t.Fatalf("parsed %+v", c)
	}
	if c.Accel.Peak[FP8] != 0 {
		t.Error("fp8 was not given and must be unsupported")
	}
}

func TestClusterFileJSONWithBase(t *testing.T) {
	data, err := os.ReadFile("testdata/h100-nvl.json")
	if err != nil {
		t.Fatal(err)
	}
	c, err := ParseClusterFile(data)
	if err != nil {
		t.Fatal(err)
	}
	base, _ := ClusterPreset("dgx-h100")
	if c.DevicesPerNode != 4 || !near(c.Inter.BW, 22.5*giga) || c.Accel.Memory != base.Accel.Memory || c.Intra != base.Intra {
		t.Fatalf("parsed %+v", c)
	}
	c.Accel.Peak[BF16] = 1
	if base2, _ := ClusterPreset("dgx-h100"); base2.Accel.Peak[BF16] == 1 {
		t.Fatal("a file's changes leaked into the preset")
	}
}

func TestClusterFileErrors(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{`name = "x"`, "devices_per_node is required"},
		{"devices_per_node = 8\nfoo = 1\n", "unknown keys foo"},
		{`{"base":"dgx-h100","bogus":1}`, `unknown field "bogus"`},
		{`base = "dgx-z"`, `no cluster preset "dgx-z"`},
		{"base = \"dgx-h100\"\n[device]\npeak_tflops = { fp9 = 1 }\n", `precision="fp9"`},
		{"base = \"dgx-h100\"\n[device]\ngemm_efficiency = 1.5\n", "gemm_efficiency=1.5: a fraction of peak is at most 1"},
		{"base = \"dgx-h100\"\n[device]\nmemory_gib = -1\n", "device.memory"},
		{"base = \"dgx-h100\"\n[inter]\nlatency_us = -3\n", "inter.latency"},
		{"base = \"dgx-h100\"\n[device]\nreserved_gib = 100\n", "reserved"},
		{"base = \"dgx-h100\"\n[device]\npeak_tflops = { bf16 = 0 }\n", "no precision has a positive peak"},
		{"devices_per_node = 2\n[device]\nmemory_gib = 1\nmem_bw_gbps = 1\npeak_tflops = {fp32 = 1}\n", "[intra] is required"},
		{"= broken", "cluster file"},
		{"base = \"dgx-h100\"\nmoe_ep_overlap_eff = 1.2\n", "moe_ep_overlap_eff=1.2: must be in (0, 1]"},
	} {
		_, err := ParseClusterFile([]byte(c.in))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("ParseClusterFile(%q) = %v, want %q", c.in, err, c.want)
		}
	}
}

// FuzzParseClusterFile: no input panics, and an accepted cluster validates.
func FuzzParseClusterFile(f *testing.F) {
	if data, err := os.ReadFile("testdata/cpu-host.toml"); err == nil {
		f.Add(data)
	}
	f.Add([]byte(`{"base":"dgx-a100","devices_per_node":4}`))
	f.Add([]byte("base = \"dgx-h100\"\n[device]\nmemory_gib = 1e300\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := ParseClusterFile(data)
		if err != nil {
			return
		}
		if err := c.Validate(); err != nil {
			t.Fatalf("accepted cluster does not validate: %v", err)
		}
	})
}

// near compares within 1e-12 relative.
func near(a, b float64) bool {
	d := a - b
	if d < 0 {
		d = -d
	}
	return d <= 1e-12*max(abs(a), abs(b))
}

func abs(x float64) float64 {
	if x < 0 {
		return -x
	}
	return x
}
