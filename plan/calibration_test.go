package plan

import (
	"math"
	"strings"
	"testing"
)

// a100CalibrationSubset is the runs the A100's one fitted constant, η_max,
// is chosen on: Narayanan et al. 2021 Table 1's four rows without pipeline
// parallelism (1.7B–18.4B), where η_max is the only free term (no bubble,
// no interleaving to choose). Everything else in docs/PLANNER.md's tables
// on A100 checks it.
func a100CalibrationSubset() []published {
	var sub []published
	for _, v := range validationSet() {
		if strings.HasPrefix(v.source, "Narayanan") && strings.Contains(v.fix, "pp=1,") {
			sub = append(sub, v)
		}
	}
	return sub
}

// meanSignedError is the mean relative error of the subset's predictions
// with the device's η_max set to eta.
func meanSignedError(t *testing.T, sub []published, eta float64) float64 {
	t.Helper()
	sum := 0.0
	for _, v := range sub {
		j := heldOut{model: v.model, cluster: v.clusterName(), devices: v.devices, seq: v.seq, batch: v.batch}.job(t)
		j.Cluster.Accel.GEMMEff = eta
		f, err := ParseFix(v.fix)
		if err != nil {
			t.Fatal(err)
		}
		res, err := j.Search(Options{Fix: f, Top: 1})
		if err != nil || len(res.Plans) == 0 {
			t.Fatalf("%s: no plan (%v)", v.model, err)
		}
		sum += res.Plans[0].HWTFLOPsPerDevice/v.value - 1
	}
	return sum / float64(len(sub))
}

// TestA100EtaMaxIsFittedOnItsSubset: the dgx-a100 preset's η_max is the
// value on a 0.01 grid that centres its declared calibration subset (mean
// signed error nearest zero), so it was not chosen on the runs it is
// checked on (Korthikanti Table 5, the pipelined Table 1 rows, the
// held-out A100 runs).
func TestA100EtaMaxIsFittedOnItsSubset(t *testing.T) {
	sub := a100CalibrationSubset()
	if len(sub) != 4 {
		t.Fatalf("%d calibration rows, want Table 1's four without pipelines", len(sub))
	}
	c, err := ClusterPreset("dgx-a100")
	if err != nil {
		t.Fatal(err)
	}
	eta := c.Accel.GEMMEff
	at := meanSignedError(t, sub, eta)
	for _, other := range []float64{eta - 0.01, eta + 0.01} {
		if e := meanSignedError(t, sub, other); math.Abs(e) < math.Abs(at) {
			t.Errorf("η_max %.2f centres the calibration subset better (%+.2f%%) than the preset's %.2f (%+.2f%%)",
				other, 100*e, eta, 100*at)
		}
	}
	t.Logf("η_max %.2f: calibration subset mean error %+.2f%%", eta, 100*at)
}
