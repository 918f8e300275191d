package plan

import (
	"errors"
	"strings"
	"testing"
)

func TestParseCanonicalExample(t *testing.T) {
	p, err := Parse("dp=8,tp=8,pp=4,vpp=2,zero=1,sp=on,mbs=1,schedule=interleaved,recompute=selective,precision=bf16,flash=on")
	if err != nil {
		t.Fatal(err)
	}
	want := Plan{DP: 8, TP: 8, PP: 4, CP: 1, VPP: 2, ZeRO: 1, SP: true, MBS: 1, Schedule: Interleaved,
		Recompute: RecomputeSelective, Precision: BF16, Flash: true, Order: DefaultOrder}
	if p != want {
		t.Fatalf("got %+v\nwant %+v", p, want)
	}
	if err := p.Validate(); err != nil {
		t.Fatal(err)
	}
	if p.Devices() != 256 {
		t.Fatalf("Devices = %d, want 256", p.Devices())
	}
	const canon = "dp=8,tp=8,pp=4,cp=1,vpp=2,zero=1,sp=on,mbs=1,schedule=interleaved,recompute=selective,precision=bf16,flash=on,order=tp-cp-dp-pp"
	if p.String() != canon {
		t.Fatalf("String = %s\nwant     %s", p, canon)
	}
}

func TestParseDefaults(t *testing.T) {
	for _, s := range []string{"", "  ", "dp=1"} {
		p, err := Parse(s)
		if err != nil {
			t.Fatal(err)
		}
		if p != Default() {
			t.Errorf("Parse(%q) = %+v, want the default", s, p)
		}
	}
	d := Default()
	if d.DP != 1 || d.TP != 1 || d.PP != 1 || d.CP != 1 || d.VPP != 1 || d.ZeRO != 0 || d.SP || d.MBS != 1 ||
		d.Schedule != OneFOneB || d.Recompute != RecomputeNone || d.Precision != BF16 || !d.Flash || d.Order != "tp-cp-dp-pp" {
		t.Fatalf("Default = %+v does not match the documented defaults", d)
	}
}

func TestParseAnyOrderAndSpaces(t *testing.T) {
	a, err := Parse(" zero=3 , dp=4,flash=off,order=dp-tp-cp-pp,sp=false")
	if err != nil {
		t.Fatal(err)
	}
	if a.ZeRO != 3 || a.DP != 4 || a.Flash || a.Order != "dp-tp-cp-pp" || a.SP {
		t.Fatalf("got %+v", a)
	}
}

func TestParseErrorsNameTheKey(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"dpp=2", `unknown key "dpp"`},
		{"dp=two", `dp="two" is not an integer`},
		{"dp=2,dp=4", `key "dp" given twice`},
		{"sp=maybe", `sp="maybe": want on or off`},
		{"flash=1", `flash="1": want on or off`},
		{"schedule=zb", `schedule="zb": want one of gpipe, 1f1b, interleaved`},
		{"recompute=some", `recompute="some"`},
		{"precision=fp4", `precision="fp4"`},
		{"order=tp-dp-pp", `order="tp-dp-pp"`},
		{"order=tp-tp-dp-pp", `order="tp-tp-dp-pp"`},
		{"tp", `"tp" is not key=value`},
		{"dp=2,", `"" is not key=value`},
	} {
		_, err := Parse(c.in)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Parse(%q) error = %v, want it to contain %q", c.in, err, c.want)
		}
	}
}

func TestValidateRules(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"dp=0", "dp=0: must be at least 1"},
		{"mbs=-1", "mbs=-1: must be at least 1"},
		{"zero=4", "zero=4: must be 0, 1, 2 or 3"},
		{"sp=on", "sp=on needs tp>1"},
		{"schedule=interleaved,vpp=2", "schedule=interleaved needs pp>1"},
		{"pp=4,schedule=interleaved", "needs vpp>=2"},
		{"pp=4,vpp=2", "vpp=2 needs schedule=interleaved"},
	} {
		p, err := Parse(c.in)
		if err != nil {
			t.Fatalf("Parse(%q): %v", c.in, err)
		}
		err = p.Validate()
		if err == nil || !strings.Contains(err.Error(), c.want) || !errors.Is(err, ErrInvalid) {
			t.Errorf("Validate(%q) = %v, want %q (and ErrInvalid)", c.in, err, c.want)
		}
	}
	var zero Plan
	if err := zero.Validate(); err == nil {
		t.Error("the zero Plan must not validate (use Default)")
	}
	ok, _ := Parse("tp=8,sp=on,pp=4,vpp=3,schedule=interleaved,zero=2,cp=2,precision=fp8,recompute=full")
	if err := ok.Validate(); err != nil {
		t.Errorf("valid plan rejected: %v", err)
	}
}

func TestShortRoundTrips(t *testing.T) {
	p, _ := Parse("dp=2,tp=4,zero=1,sp=on,recompute=full")
	q, err := Parse(p.Short())
	if err != nil || q != p {
		t.Fatalf("Parse(Short()) = %+v, %v; want %+v", q, err, p)
	}
	if strings.Contains(p.Short(), "order=") || strings.Contains(p.Short(), "precision=") {
		t.Errorf("Short %q should omit default keys", p.Short())
	}
}

func TestTextMarshal(t *testing.T) {
	p, _ := Parse("dp=4,zero=3")
	b, err := p.MarshalText()
	if err != nil {
		t.Fatal(err)
	}
	var q Plan
	if err := q.UnmarshalText(b); err != nil || q != p {
		t.Fatalf("UnmarshalText(MarshalText) = %+v, %v", q, err)
	}
	if err := q.UnmarshalText([]byte("dp=x")); err == nil {
		t.Fatal("UnmarshalText accepted a bad value")
	}
}

// FuzzParse holds the text form: whatever Parse accepts, String writes back
// to a text that parses to the same plan, and String is a fixed point.
func FuzzParse(f *testing.F) {
	for _, s := range []string{"", "dp=8,tp=8,pp=4,vpp=2,zero=1,sp=on,mbs=1,schedule=interleaved,recompute=selective,precision=bf16,flash=on",
		"order=pp-dp-cp-tp", "cp=4, sp=off", "dp=-3", "zero=9,flash=true", "=,=", "dp=1,,"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		p, err := Parse(s)
		if err != nil {
			return
		}
		q, err := Parse(p.String())
		if err != nil {
			t.Fatalf("Parse(%q).String() = %q does not parse: %v", s, p.String(), err)
		}
		if q != p {
			t.Fatalf("round trip changed the plan: %+v -> %+v", p, q)
		}
		if q.String() != p.String() {
			t.Fatalf("String is not canonical: %q vs %q", q.String(), p.String())
		}
		_ = p.Validate() // must not panic
	})
}

// Validate's allocation-free order check agrees with Parse's.
func TestOrderOKMatchesCheckOrder(t *testing.T) {
	for _, o := range allOrders() {
		if !orderOK(o) || checkOrder(o) != nil {
			t.Errorf("%q rejected", o)
		}
	}
	for _, o := range []string{"", "tp-cp-dp", "tp-tp-dp-pp", "tp-cp-dp-pq", "tp_cp-dp-pp", "tp-cp-dp-pp-", "TP-cp-dp-pp"} {
		if orderOK(o) || checkOrder(o) == nil {
			t.Errorf("%q accepted", o)
		}
	}
	bad := Default()
	bad.Order = "tp-dp"
	if err := bad.Validate(); err == nil || !strings.Contains(err.Error(), "order") {
		t.Errorf("Validate(order=tp-dp) = %v", err)
	}
}
