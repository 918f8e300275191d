package plan

import (
	"strings"
	"testing"
)

// Ties go to the simpler plan and identical costs are one row: for
// llama3-8b on 8 H100s dp=4·cp=2·mbs=2, dp=2·cp=4·mbs=4 and
// dp=1·cp=8·mbs=8 cost the same (the same ring blocks, each hidden but
// the backward's last dK, dV sum) and are one row, the cp=8 one (one
// axis: the simplest), its variants the other two; dp=8, which used to tie
// with them too when the whole ring was hidden, is #1 now, cheaper by the
// sums that come home exposed.
func TestTiesPreferSimplerPlan(t *testing.T) {
	j := job(t, "llama3-8b", "dgx-h100", 8, 8192, 64)
	res, err := j.Search(Options{Top: 5})
	if err != nil || len(res.Plans) == 0 {
		t.Fatal(err)
	}
	if p := res.Plans[0].Plan; p.CP != 1 || p.DP != 8 {
		t.Errorf("#1 is %s, want dp=8 (cp=1): the simpler of the tied shapes", p.Short())
	}
	for i, a := range res.Plans {
		for _, b := range res.Plans[i+1:] {
			if sameStep(a.Time.Step, b.Time.Step) && a.Memory.Total == b.Memory.Total {
				t.Errorf("%s and %s cost the same and are two rows", a.Plan.Short(), b.Plan.Short())
			}
		}
		for _, v := range a.Variants {
			if simpler(v, a.Plan) < 0 {
				t.Errorf("row %s lists the simpler %s as its variant", a.Plan.Short(), v.Short())
			}
		}
	}
	tied := false
	for _, e := range res.Plans {
		if e.Plan.CP > 1 {
			n := e.VariantNote()
			tied = strings.Contains(n, "cp=4") && strings.Contains(n, "cp=2")
			if !tied {
				t.Errorf("the first cp row %s lists variants %q, want the cp=2 and cp=4 shapes it ties with", e.Plan.Short(), n)
			}
			break
		}
	}
	if !tied {
		t.Errorf("no cp row in the top %d", len(res.Plans))
	}
	for _, c := range []struct {
		a, b string
		want int
	}{{"dp=8", "dp=1,cp=8", -1}, {"dp=4,tp=2", "dp=8", 1}, {"dp=2,tp=4", "dp=2,pp=4", 1}, {"dp=2,pp=2,vpp=2", "dp=2,pp=2", 1}, {"dp=8,zero=1", "dp=8,zero=3", 0}} {
		if got := simpler(mustParse(t, c.a), mustParse(t, c.b)); (got < 0) != (c.want < 0) || (got > 0) != (c.want > 0) {
			t.Errorf("simpler(%s, %s) = %d, want sign %d", c.a, c.b, got, c.want)
		}
	}
}

// The search defaults to bf16 where the device has fp8 (fp8 changes the
// numerics: the user asks for it), and fp8 rows say their recipe.
func TestSearchDefaultsToBF16(t *testing.T) {
	j := job(t, "llama3-8b", "dgx-h100", 8, 8192, 64)
	res, err := j.Search(Options{Top: 5})
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range res.Plans {
		if e.Plan.Precision == FP8 {
			t.Errorf("unpinned search ranked %s", e.Plan.Short())
		}
	}
	f, err := ParseFix("precision=fp8")
	if err != nil {
		t.Fatal(err)
	}
	res, err = j.Search(Options{Fix: f, Top: 3})
	if err != nil || len(res.Plans) == 0 {
		t.Fatal(err)
	}
	rep, tab := j.Report(res), j.Table(res)
	for i, e := range res.Plans {
		if e.Plan.Precision != FP8 {
			t.Fatalf("pinned fp8, got %s", e.Plan.Short())
		}
		if !strings.Contains(rep.Plans[i].FP8Recipe, "delayed scaling") {
			t.Errorf("JSON plan %d: fp8_recipe %q", i+1, rep.Plans[i].FP8Recipe)
		}
	}
	if strings.Count(tab, "fp8 recipe assumed: per-tensor delayed scaling") != len(res.Plans) {
		t.Errorf("the table does not give each fp8 row its recipe:\n%s", tab)
	}
	if ex := j.Explain(res.Plans[0].Plan, &res.Plans[0]); !strings.Contains(ex, "fp8 recipe assumed:") {
		t.Errorf("--explain of an fp8 plan lacks its recipe:\n%s", ex)
	}
}
