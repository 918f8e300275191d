package main

import (
	"fmt"
	"io"
	"os"
	"slices"
	"strings"

	"trellis/internal/bounded"
	"trellis/plan"
)

// emitPlan prints p's configuration for a framework (--emit): the text on
// w, what it is and what changed on info (so that `> ds_config.json`
// keeps a valid file).
func emitPlan(w, info io.Writer, job plan.Job, p plan.Plan, name string, asJSON bool) error {
	fw, err := plan.ParseFramework(name)
	if err != nil {
		return fmt.Errorf("--emit: %w", err)
	}
	em, err := job.Emit(fw, p)
	if err != nil {
		return err
	}
	e, err := job.Evaluate(em.Plan)
	if err != nil {
		return err
	}
	if asJSON {
		ej := e.JSON()
		return writeJSON(w, struct {
			Framework string            `json:"framework"`
			Version   string            `json:"version"`
			Asked     string            `json:"asked"`
			Plan      string            `json:"plan"`
			Changes   []string          `json:"changes"`
			Outside   []string          `json:"outside"`
			Estimate  plan.EstimateJSON `json:"estimate"`
			Text      string            `json:"text"`
		}{string(fw), em.Version, p.String(), em.Plan.String(), nonNil(em.Changes), nonNil(em.Outside), ej, em.Text})
	}
	fmt.Fprintf(info, "# %s for %s: %.4g s per step, %s of %s per device\n", em.Version, em.Plan.Short(),
		e.Time.Step, plan.Bytes(e.Memory.Total), plan.Bytes(e.Memory.Budget))
	if len(em.Changes) > 0 {
		a, _ := job.Evaluate(p)
		fmt.Fprintf(info, "# %s cannot run %s (%.4g s): %s\n", fw, p.Short(), a.Time.Step, strings.Join(em.Changes, "; "))
	}
	if len(em.Outside) > 0 {
		fmt.Fprintf(info, "# not in the file (set on the command line or in the model code; pass as --fix when reading it back): %s\n", strings.Join(em.Outside, ","))
	}
	_, err = io.WriteString(w, em.Text)
	return err
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

// runFrom reads a framework configuration (--from), evaluates that plan
// on the cluster and explains it term by term, then shows the best plan
// the framework can run and what to change.
func runFrom(w io.Writer, f planFlags, args []string) error {
	fw, err := plan.ParseFramework(f.from)
	if err != nil {
		return fmt.Errorf("--from: %w", err)
	}
	text := strings.Join(args, " ")
	if fw != plan.Megatron || (len(args) == 1 && isFile(args[0])) {
		data, err := bounded.ReadFile(args[0], bounded.Config, string(fw)+" configuration")
		if err != nil {
			return fmt.Errorf("--from %s: %w", fw, err)
		}
		text = string(data)
	}
	rest, err := plan.ParseFix(f.fix)
	if err != nil {
		return fmt.Errorf("--fix: %w", err)
	}
	// The job's sequence and batch may come from the configuration.
	pre := f
	pre.seq, pre.batch = max(f.seq, 1), max(f.batch, 1)
	var given *plan.Model
	if fw == plan.Megatron && f.model == "" {
		m, err := plan.MegatronModel(text)
		if err != nil {
			return fmt.Errorf("--from megatron without --model: %w", err)
		}
		given = &m
	}
	job, err := planJobModel(pre, given)
	if err != nil {
		return err
	}
	im, err := job.Import(fw, text, rest)
	if err != nil {
		return err
	}
	if job.Seq, err = agree("--seq", f.seq, im.Seq, fw); err != nil {
		return err
	}
	if job.GlobalBatch, err = agree("--global-batch", f.batch, im.GlobalBatch, fw); err != nil {
		return err
	}
	if err := job.Validate(); err != nil {
		return err
	}
	if f.json {
		return fromJSON(w, job, fw, im)
	}
	return explainFrom(w, job, fw, im, text)
}

// fromJSON is --from's --json: the plan read, its notes and prediction,
// and the best plan the framework runs at its precision.
func fromJSON(w io.Writer, job plan.Job, fw plan.Framework, im plan.Imported) error {
	out := struct {
		Framework string             `json:"framework"`
		Plan      string             `json:"plan"`
		Notes     []string           `json:"notes"`
		Valid     bool               `json:"valid"`
		Fits      bool               `json:"fits"`
		Reason    string             `json:"reason,omitempty"`
		Estimate  *plan.EstimateJSON `json:"estimate,omitempty"`
		Best      *plan.EstimateJSON `json:"best,omitempty"`
		BestText  string             `json:"best_text,omitempty"`
	}{Framework: string(fw), Plan: im.Plan.String(), Notes: nonNil(im.Notes)}
	if e, err := job.Evaluate(im.Plan); err != nil {
		out.Reason = err.Error()
	} else {
		ej := e.JSON()
		out.Valid, out.Fits, out.Estimate, out.Reason = true, e.Fits(), &ej, e.Why()
	}
	if best, em, ok := bestFor(job, fw, im.Plan.Precision); ok {
		bj := best.JSON()
		out.Best, out.BestText = &bj, em.Text
	}
	return writeJSON(w, out)
}

// bestFor is the best plan framework fw runs at a precision: the search's
// best, made expressible (Job.Emit).
func bestFor(job plan.Job, fw plan.Framework, prec plan.Precision) (plan.Estimate, plan.Emission, bool) {
	keep, err := plan.ParseFix("precision=" + string(prec))
	if err != nil {
		return plan.Estimate{}, plan.Emission{}, false
	}
	res, err := job.Search(plan.Options{Fix: keep, Top: 1})
	if err != nil || len(res.Plans) == 0 {
		return plan.Estimate{}, plan.Emission{}, false
	}
	em, err := job.Emit(fw, res.Plans[0].Plan)
	if err != nil {
		return plan.Estimate{}, plan.Emission{}, false
	}
	e, err := job.Evaluate(em.Plan)
	return e, em, err == nil
}

// agree takes a job field from the flag or the configuration; both given
// must agree.
func agree(flag string, fromFlag, fromConfig int, fw plan.Framework) (int, error) {
	switch {
	case fromFlag > 0 && fromConfig > 0 && fromFlag != fromConfig:
		return 0, fmt.Errorf("plan: %s=%d, but the %s configuration says %d", flag, fromFlag, fw, fromConfig)
	case fromFlag > 0:
		return fromFlag, nil
	case fromConfig > 0:
		return fromConfig, nil
	}
	return 0, fmt.Errorf("plan: %s is required: the %s configuration does not state it", flag, fw)
}

func isFile(s string) bool {
	st, err := os.Stat(s)
	return err == nil && st.Mode().IsRegular()
}

func explainFrom(w io.Writer, job plan.Job, fw plan.Framework, im plan.Imported, text string) error {
	p := im.Plan
	fmt.Fprintf(w, "read from %s: %s\n", fw, p.Short())
	for _, n := range im.Notes {
		fmt.Fprintf(w, "  note: %s\n", n)
	}
	// The precision is a choice of numerics, not of layout: the best plan
	// keeps the configuration's.
	var best *plan.Estimate
	e, bestEm, ok := bestFor(job, fw, p.Precision)
	if ok {
		best = &e
	}
	if _, err := io.WriteString(w, job.Explain(p, best)); err != nil || best == nil || best.Plan == p {
		return err
	}
	fmt.Fprintf(w, "\nthe best plan %s runs (%s) at precision=%s: %s\n", fw, bestEm.Version, p.Precision, best.Plan.Short())
	if len(bestEm.Changes) > 0 {
		fmt.Fprintf(w, "  (not the best plan found: %s)\n", strings.Join(bestEm.Changes, "; "))
	}
	cur, err := job.Emit(fw, p)
	if err != nil {
		fmt.Fprintf(w, "%s", bestEm.Text)
		return nil
	}
	fmt.Fprintf(w, "what to change in the %s configuration:\n", fw)
	writeLineDiff(w, cur.Text, bestEm.Text, text)
	return nil
}

// writeLineDiff prints the lines only in a ("-", when the user's text has
// the line's flag or key) and only in b ("+").
func writeLineDiff(w io.Writer, a, b, user string) {
	in := func(s string) map[string]bool {
		m := map[string]bool{}
		for _, l := range strings.Split(s, "\n") {
			m[strings.TrimSuffix(strings.TrimSpace(l), " \\")] = true
		}
		return m
	}
	ma, mb := in(a), in(b)
	for _, side := range []struct {
		sign  string
		text  string
		other map[string]bool
	}{{"-", a, mb}, {"+", b, ma}} {
		for _, l := range strings.Split(side.text, "\n") {
			l = strings.TrimSuffix(strings.TrimSpace(l), " \\")
			if l == "" || strings.HasPrefix(l, "#") || side.other[l] {
				continue
			}
			if f := strings.Fields(strings.Trim(l, "{}[],")); side.sign == "-" && (len(f) == 0 || !strings.Contains(user, strings.Trim(f[0], `":=`))) {
				continue
			}
			fmt.Fprintf(w, "  %s %s\n", side.sign, l)
		}
	}
}

// quotedArgs lets `trellis plan --from megatron "--tensor-model-parallel-size 8 ..."`
// pass Megatron's arguments as one quoted word: a word of a plan command
// that starts with "--" and holds a space is not a trellis flag, so it
// moves after the "--" that ends the flags (where the cobra parser would
// otherwise take it for an unknown flag).
func quotedArgs(args []string) []string {
	if len(args) == 0 || args[0] != "plan" || !slices.Contains(args, "--from") {
		return args
	}
	var flags, rest []string
	end := len(args)
	for i, a := range args {
		if a == "--" {
			end = i
			break
		}
	}
	for _, a := range args[:end] {
		if strings.HasPrefix(a, "--") && strings.ContainsAny(a, " \t\n") {
			rest = append(rest, a)
		} else {
			flags = append(flags, a)
		}
	}
	if len(rest) == 0 {
		return args
	}
	if end < len(args) {
		rest = append(rest, args[end+1:]...)
	}
	return append(append(flags, "--"), rest...)
}
