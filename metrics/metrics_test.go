package metrics

import (
	"encoding/json"
	"reflect"
	"testing"
)

// A line survives the round trip through JSON with every field, and each
// tag's name reaches its own field.
func TestLineRoundTrip(t *testing.T) {
	val, compute, misc := 1.25, 0.5, 0.01
	in := Line{Step: 7, Loss: 1.5, ValLoss: &val, LR: 3e-4, GradNorm: 0.9, TokensPerS: 1234, MFU: 0.01, StepS: 0.2,
		Budget: 48 << 20, PredStepS: 0.19, Skipped: true, LossScale: 1024,
		Ranks: []Rank{{Rank: 1, Tags: Tags{Param: 1, Grad: 2, Optim: 3, Act: 4, Workspace: 5, Comm: 6, Peak: 21}, CommBusyS: 0.1, CommWaitS: 0.05,
			ComputeS: &compute, BubbleS: 0.02, MiscS: &misc, CommBytes: CommBytes{TP: 1, DP: 2, PP: 3},
			Predicted: &Tags{Param: 1, Grad: 2, Optim: 3, Act: 4, Workspace: 5, Comm: 6, Peak: 20}}}}
	b, err := json.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	var out Line
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(in, out) {
		t.Fatalf("round trip:\n got %+v\nwant %+v", out, in)
	}
	r := out.Ranks[0]
	for i, name := range TagNames() {
		if got := r.Tag(name); got != int64(i+1) {
			t.Errorf("rank Tag(%q) = %d, want %d", name, got, i+1)
		}
		if got := r.Predicted.Tag(name); got != int64(i+1) {
			t.Errorf("predicted Tag(%q) = %d, want %d", name, got, i+1)
		}
	}
	if r.Tag("peak") != 21 || r.Predicted.Tag("peak") != 20 || r.Tag("nope") != 0 {
		t.Errorf("peak/unknown tags: %d %d %d", r.Tag("peak"), r.Predicted.Tag("peak"), r.Tag("nope"))
	}
}

// A line from before the step-time split has no compute_s or misc_s: the
// reader sees nil, not a zero it could mistake for a measurement.
func TestOlderLine(t *testing.T) {
	var l Line
	if err := json.Unmarshal([]byte(`{"step":1,"loss":2,"ranks":[{"rank":0,"comm_wait_s":0.5}]}`), &l); err != nil {
		t.Fatal(err)
	}
	if r := l.Ranks[0]; r.ComputeS != nil || r.MiscS != nil || r.Predicted != nil || r.CommWaitS != 0.5 {
		t.Fatalf("older line read as %+v", r)
	}
}
