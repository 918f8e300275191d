package plan

import (
	"math"
	"strings"
	"testing"
)

// ring_attn_efficiency: read into Accel.RingAttnEff, absent (or 0) where
// not given (attnEff then falls back to attn_efficiency), refused out of
// range naming the key and the rule; a preset base keeps it 0.
func TestRingAttnEfficiencyKey(t *testing.T) {
	base := "name = \"h\"\ndevices_per_node = 2\n[device]\nmemory_gib = 1\nmem_bw_gbps = 10\npeak_tflops = { fp32 = 0.2 }\nattn_efficiency = 0.5\n%s\n[intra]\nbw_gbps = 1\n[inter]\nbw_gbps = 1\n"
	for _, c := range []struct {
		in   string
		want float64
	}{{"", 0}, {"ring_attn_efficiency = 0.15", 0.15}, {"ring_attn_efficiency = 0", 0}, {"ring_attn_efficiency = 1", 1}} {
		cl, err := ParseClusterFile([]byte(strings.Replace(base, "%s", c.in, 1)))
		if err != nil || cl.Accel.RingAttnEff != c.want || cl.Accel.AttnEff != 0.5 {
			t.Errorf("%q: ring %g attn %g err %v, want ring %g attn 0.5", c.in, cl.Accel.RingAttnEff, cl.Accel.AttnEff, err, c.want)
		}
	}
	if cl, err := ParseClusterFile([]byte(`{"base":"dgx-h100","device":{"ring_attn_efficiency":0.4}}`)); err != nil || cl.Accel.RingAttnEff != 0.4 {
		t.Errorf("JSON: ring %g err %v, want 0.4", cl.Accel.RingAttnEff, err)
	}
	for _, bad := range []string{"ring_attn_efficiency = 1.5", "ring_attn_efficiency = -0.1", "ring_attn_efficiency = 1e-5", "ring_attn_efficiency = nan"} {
		_, err := ParseClusterFile([]byte(strings.Replace(base, "%s", bad, 1)))
		if err == nil || !strings.Contains(err.Error(), "device.ring_attn_efficiency=") || !strings.Contains(err.Error(), "0 (absent: attn_efficiency) or between 0.0001 and 1") {
			t.Errorf("%q: got %v, want an error naming device.ring_attn_efficiency and its rule", bad, err)
		}
	}
	for _, name := range ClusterPresetNames() {
		if c, _ := ClusterPreset(name); c.Accel.RingAttnEff != 0 {
			t.Errorf("preset %s: ring_attn_efficiency %g, want 0 (its ring runs flash kernels)", name, c.Accel.RingAttnEff)
		}
	}
}

// attentionCore prices cp attention at ring_attn_efficiency and
// everything else at attn_efficiency: under cp=2 the core's time scales
// by attn/ring (the kernel gap aside), without cp it does not move; on
// engine ranks cp with flash off is the ring too (the engine runs it
// blockwise whatever flash says), on GPU ranks it stays materialised;
// without the key cp is priced as before.
func TestAttentionCoreRingEfficiency(t *testing.T) {
	j := hostJob(t, 2, 0, 0)
	j.Cluster.Accel.KernelGap = 0
	core := func(j Job, plan string) passTime {
		p := mustParse(t, plan)
		return j.attentionCore(p, j.kernelsFor(p.Precision))
	}
	ring := j
	ring.Cluster.Accel.RingAttnEff = j.Cluster.Accel.AttnEff / 4
	for _, c := range []struct {
		plan  string
		ratio float64 // ring's time over j's
	}{{"cp=2,flash=on", 4}, {"cp=2,flash=off", 4}, {"dp=2,flash=on", 1}, {"dp=1,flash=on", 1}, {"dp=2,flash=off", 1}, {"cp=2,tp=2,flash=on", 4}} {
		a, b := core(j, c.plan), core(ring, c.plan)
		if !near(b.fwd/a.fwd, c.ratio) || !near(b.bwd/a.bwd, c.ratio) {
			t.Errorf("%s: ring_attn_efficiency at attn/4 gives fwd ×%g, bwd ×%g; want ×%g", c.plan, b.fwd/a.fwd, b.bwd/a.bwd, c.ratio)
		}
	}
	// Engine ranks: cp without flash is priced as the blockwise ring, not
	// as the materialised s×s scores.
	if on, off := core(j, "cp=2,flash=on"), core(j, "cp=2,flash=off"); on != off {
		t.Errorf("engine cp=2: flash=off %+v, want flash=on's %+v (the ring)", off, on)
	}
	gpu := ring
	gpu.Cluster.EngineStash = false
	if on, off := core(gpu, "cp=2,flash=on"), core(gpu, "cp=2,flash=off"); on == off {
		t.Errorf("GPU cp=2: flash=off priced as the ring (%+v)", off)
	}
}

// ring_tile_us: read in µs into Accel.RingTileGap (seconds), refused out
// of range by name; attentionCore adds heads·(2·cp+1) tiles of it under
// cp, split 2:5 between forward and backward, and nothing without cp.
func TestRingTileCost(t *testing.T) {
	base := "name = \"h\"\ndevices_per_node = 2\n[device]\nmemory_gib = 1\nmem_bw_gbps = 10\npeak_tflops = { fp32 = 0.2 }\n%s\n[intra]\nbw_gbps = 1\n[inter]\nbw_gbps = 1\n"
	cl, err := ParseClusterFile([]byte(strings.Replace(base, "%s", "ring_tile_us = 5.5", 1)))
	if err != nil || !near(cl.Accel.RingTileGap, 5.5*us) {
		t.Fatalf("ring_tile_us = 5.5: %g s, err %v", cl.Accel.RingTileGap, err)
	}
	for _, bad := range []string{"ring_tile_us = -1", "ring_tile_us = 2e6", "ring_tile_us = nan"} {
		_, err := ParseClusterFile([]byte(strings.Replace(base, "%s", bad, 1)))
		if err == nil || !strings.Contains(err.Error(), "device.ring_tile_us=") || !strings.Contains(err.Error(), "between 0 and 1e6") {
			t.Errorf("%q: got %v, want an error naming device.ring_tile_us and its rule", bad, err)
		}
	}
	j := hostJob(t, 4, 0, 0)
	g := j
	g.Cluster.Accel.RingTileGap = 7e-6
	core := func(j Job, plan string) passTime {
		p := mustParse(t, plan)
		return j.attentionCore(p, j.kernelsFor(p.Precision))
	}
	for _, c := range []struct {
		plan  string
		tiles float64 // heads·(2·cp+1); heads = mbs·a/t
	}{{"cp=2,mbs=2,flash=on", 2 * 4 * 5}, {"cp=4,mbs=1,flash=on", 4 * 9}, {"cp=2,tp=2,mbs=1,flash=on", 2 * 5}, {"dp=2,mbs=2,flash=on", 0}} {
		a, b := core(j, c.plan), core(g, c.plan)
		if df, db := b.fwd-a.fwd, b.bwd-a.bwd; math.Abs(df-c.tiles*2e-6) > 1e-12 || math.Abs(db-c.tiles*5e-6) > 1e-12 {
			t.Errorf("%s: ring_tile_us=7 adds fwd %g, bwd %g s; want %g tiles: %g, %g", c.plan, df, db, c.tiles, c.tiles*2e-6, c.tiles*5e-6)
		}
	}
}
