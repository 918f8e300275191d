package viz

import (
	"strings"
	"testing"
)

// readmeLine is the --metrics example of README "Training".
const readmeLine = `{"step":1,"loss":5.538419246673584,"lr":0.002,"grad_norm":11.62143577060819,"tokens_per_s":3566.9,"mfu":0.2164,"step_s":0.574,"ranks":[{"rank":0,"param":3257856,"grad":3257856,"optim":6515712,"act":19684352,"workspace":2686976,"comm":13029376,"peak":48432128,"comm_busy_s":0.604,"comm_wait_s":0.262}]}`

func TestReadMetrics(t *testing.T) {
	for _, c := range []struct {
		name, in string
		steps    int
		err      string
	}{
		{"one line", readmeLine + "\n", 1, ""},
		{"blank lines", "\n" + readmeLine + "\n  \n" + strings.Replace(readmeLine, `"step":1`, `"step":2`, 1), 2, ""},
		{"bad json", readmeLine + "\n{\"step\":", 0, "line 2"},
		{"step 0", `{"step":0}`, 0, "step=0"},
		{"empty", "", 0, ""},
	} {
		steps, err := ReadMetrics(strings.NewReader(c.in))
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("%s: error %v, want one naming %q", c.name, err, c.err)
			}
			continue
		}
		if err != nil || len(steps) != c.steps {
			t.Errorf("%s: %d steps, %v; want %d", c.name, len(steps), err, c.steps)
		}
	}
	s, _ := ParseStep([]byte(readmeLine))
	r := s.Ranks[0]
	if r.Tag("param") != 3257856 || r.Tag("act") != 19684352 || r.Tag("comm") != 13029376 || r.Peak != 48432128 || r.CommWaitS != 0.262 {
		t.Errorf("rank 0 decoded as %+v", r)
	}
}

func FuzzParseStep(f *testing.F) {
	f.Add([]byte(readmeLine))
	f.Add([]byte(`{"step":3,"ranks":[{"rank":1}],"predicted":{"param":1}}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		s, err := ParseStep(b)
		if err != nil {
			return
		}
		// Whatever decodes must render.
		Panels(&Run{Steps: []Step{s}})
	})
}
