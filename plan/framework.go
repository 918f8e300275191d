package plan

import (
	"fmt"
	"sort"
	"strings"
)

// Framework is a training framework whose configurations the planner
// writes (Emit) and reads (Import): Megatron-LM's command-line arguments,
// a torchtitan job TOML, a DeepSpeed JSON. Each has one mapping table in
// its file (megatron.go, torchtitan.go, deepspeed.go), citing the
// framework's own argument definitions and the version it matches.
type Framework string

// The frameworks.
const (
	Megatron   Framework = "megatron"
	Torchtitan Framework = "torchtitan"
	DeepSpeed  Framework = "deepspeed"
)

// Frameworks lists them.
func Frameworks() []Framework { return []Framework{Megatron, Torchtitan, DeepSpeed} }

// ParseFramework reads a framework's name.
func ParseFramework(s string) (Framework, error) {
	for _, f := range Frameworks() {
		if string(f) == s {
			return f, nil
		}
	}
	return "", fmt.Errorf("plan: framework %q: want megatron, torchtitan or deepspeed", s)
}

// fwArg is one row of a framework's mapping table: a flag, TOML key or
// JSON path, and what it carries (a plan key, a job field such as
// "global_batch", or a model field such as "model.hidden").
type fwArg struct {
	Name    string
	Carries string
}

// Emission is a plan written for a framework.
type Emission struct {
	Framework Framework
	Version   string // the framework version the mapping matches
	// Plan is the plan written: the one asked for when the framework can
	// express it, else the nearest it can (fastest of the candidates that
	// fit), with Changes saying what differs and why.
	Plan    Plan
	Changes []string
	// Outside lists plan keys the configuration does not carry (set on the
	// framework's command line or in the model code), with their values.
	Outside []string
	Text    string // the configuration
}

// Imported is a framework configuration read back.
type Imported struct {
	Plan Plan
	// Seq and GlobalBatch as the configuration states them (0: not stated).
	Seq, GlobalBatch int
	// Notes: what was read approximately or not at all.
	Notes []string
}

// Emit writes p for a framework. When the framework cannot express p it
// writes the nearest plan it can (Emission.Changes says what changed).
func (j Job) Emit(fw Framework, p Plan) (Emission, error) {
	if err := j.Check(p); err != nil {
		return Emission{}, err
	}
	var x []fwRule
	switch fw {
	case Megatron:
		x = megatronRules()
	case Torchtitan:
		x = torchtitanRules()
	case DeepSpeed:
		x = deepspeedRules()
	default:
		return Emission{}, fmt.Errorf("plan: framework %q: want megatron, torchtitan or deepspeed", fw)
	}
	q, changes, err := j.nearest(p, x)
	if err != nil {
		return Emission{}, fmt.Errorf("plan: %s cannot express %s nor a plan near it: %w", fw, p.Short(), err)
	}
	e := Emission{Framework: fw, Plan: q, Changes: changes}
	switch fw {
	case Megatron:
		e.Version, e.Text = j.megatronVersionFor(), j.megatronArgs(q)
	case Torchtitan:
		e.Version, e.Text = torchtitanVersion, j.torchtitanTOML(q)
	case DeepSpeed:
		e.Version, e.Text = deepspeedVersion, j.deepspeedJSON(q)
		e.Outside = deepspeedOutside(q)
		if j.Model.moe() { // DeepSpeed-MoE's layer takes them in the model code (deepspeed.moe.layer.MoE)
			e.Outside = append(e.Outside, "ep="+q.Get("ep"), "etp="+q.Get("etp"))
		}
	}
	return e, nil
}

// Import reads a framework configuration into a plan for the job. rest
// gives the plan keys the configuration does not carry (DeepSpeed's tp,
// pp, cp, ...); a key both pinned in rest and stated by the configuration
// with another value is an error.
func (j Job) Import(fw Framework, text string, rest Fix) (Imported, error) {
	var im Imported
	var err error
	switch fw {
	case Megatron:
		im, err = j.importMegatron(text)
	case Torchtitan:
		im, err = j.importTorchtitan(text)
	case DeepSpeed:
		im, err = j.importDeepSpeed(text, rest)
	default:
		return Imported{}, fmt.Errorf("plan: framework %q: want megatron, torchtitan or deepspeed", fw)
	}
	if err != nil {
		return Imported{}, err
	}
	if fw != DeepSpeed {
		for _, k := range Keys() {
			if rest.Pinned(k) && rest.plan.Get(k) != im.Plan.Get(k) {
				return Imported{}, fmt.Errorf("plan: --fix %s=%s: the %s configuration says %s=%s", k, rest.plan.Get(k), fw, k, im.Plan.Get(k))
			}
		}
	}
	return im, nil
}

// fwRule is one thing a framework cannot express: for a plan that breaks
// it, the nearest plans that do not (several when it is not clear which is
// best) and why; nil when p is fine.
type fwRule func(j Job, p Plan) (alts []Plan, why string)

// nearest returns p when no rule objects; otherwise it applies the rules
// one after another to every candidate so far and keeps the valid
// candidate that fits and is fastest (or, when none fits, the one that
// needs the least memory). The changes say what changed and why.
func (j Job) nearest(p Plan, rules []fwRule) (Plan, []string, error) {
	set := []Plan{p}
	var whys []string
	for _, r := range rules {
		var next []Plan
		for _, q := range set {
			alts, why := r(j, q)
			if alts == nil {
				next = appendNew(next, q)
				continue
			}
			for _, a := range alts {
				next = appendNew(next, a)
			}
			if why != "" && !contains(whys, why) {
				whys = append(whys, why)
			}
		}
		set = next
	}
	if len(whys) == 0 {
		return p, nil, nil
	}
	var best *Estimate
	var firstErr error
	for _, q := range set {
		e, err := j.Evaluate(q)
		if err != nil {
			if firstErr == nil {
				firstErr = err
			}
			continue
		}
		if best == nil || nearer(e, *best) {
			best = &e
		}
	}
	if best == nil {
		if firstErr == nil {
			firstErr = fmt.Errorf("no candidate")
		}
		return Plan{}, nil, firstErr
	}
	if !best.Fits() {
		if e, ok := j.refit(set); ok {
			best = &e
			whys = append(whys, "and none of those fit, so the micro-batch or recomputation changed too")
		}
	}
	changes := append(whys, "so "+describeChange(p, best.Plan))
	return best.Plan, changes, nil
}

// refit searches, for each candidate, the micro-batch sizes and
// recomputation policies (every other key pinned) and returns the fastest
// plan that fits.
func (j Job) refit(cands []Plan) (Estimate, bool) {
	var best Estimate
	found := false
	for _, c := range cands {
		f := FixPlan(c)
		delete(f.keys, "mbs")
		delete(f.keys, "recompute")
		res, err := j.Search(Options{Fix: f, Top: 1})
		if err == nil && len(res.Plans) > 0 && (!found || better(res.Plans[0], best)) {
			best, found = res.Plans[0], true
		}
	}
	best.Variants = nil
	return best, found
}

// nearer prefers a plan that fits, then the faster, then the smaller.
func nearer(a, b Estimate) bool {
	if a.Fits() != b.Fits() {
		return a.Fits()
	}
	if !a.Fits() {
		return a.Memory.Total < b.Memory.Total
	}
	return better(a, b)
}

func appendNew(ps []Plan, p Plan) []Plan {
	for _, q := range ps {
		if q == p {
			return ps
		}
	}
	return append(ps, p)
}

func contains(ss []string, s string) bool {
	for _, x := range ss {
		if x == s {
			return true
		}
	}
	return false
}

// describeChange names the keys whose values differ between p and q.
func describeChange(p, q Plan) string {
	var diff []string
	for _, k := range Keys() {
		if p.Get(k) != q.Get(k) {
			diff = append(diff, fmt.Sprintf("%s=%s → %s", k, p.Get(k), q.Get(k)))
		}
	}
	return strings.Join(diff, ", ")
}

// splitArgs splits a command line into arguments, honouring single and
// double quotes, backslash-newline continuations and shell comments.
func splitArgs(s string) ([]string, error) {
	var out []string
	var cur strings.Builder
	quote, started := byte(0), false
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case quote != 0 && c == quote:
			quote = 0
		case quote != 0:
			cur.WriteByte(c)
		case c == '\'' || c == '"':
			quote, started = c, true
		case c == '\\' && i+1 < len(s) && s[i+1] == '\n':
			i++
		case c == '#' && !started:
			for i+1 < len(s) && s[i+1] != '\n' {
				i++
			} // a shell comment, as in a pasted script
		case c == ' ' || c == '\t' || c == '\n' || c == '\r':
			if started {
				out = append(out, cur.String())
				cur.Reset()
				started = false
			}
		default:
			cur.WriteByte(c)
			started = true
		}
	}
	if quote != 0 {
		return nil, fmt.Errorf("plan: unclosed %c quote in the arguments", quote)
	}
	if started {
		out = append(out, cur.String())
	}
	return out, nil
}

// sortedNotes sorts and de-duplicates notes.
func sortedNotes(ns []string) []string {
	sort.Strings(ns)
	out := ns[:0]
	for i, n := range ns {
		if i == 0 || n != ns[i-1] {
			out = append(out, n)
		}
	}
	return out
}
