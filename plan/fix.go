package plan

import "strings"

// Fix pins a subset of a plan's keys for the search (`--fix tp=8,zero=1`).
// The zero Fix pins nothing.
type Fix struct {
	keys map[string]bool
	plan Plan
}

// ParseFix reads key=value pairs in the plan text form; the keys given are
// pinned to their values. Each value's syntax is checked, as in Parse.
func ParseFix(s string) (Fix, error) {
	f := Fix{plan: Default()}
	keys, err := parseInto(&f.plan, s)
	if err != nil {
		return Fix{}, err
	}
	f.keys = keys
	return f, nil
}

// FixPlan pins every key to p's value (the search then evaluates p alone).
func FixPlan(p Plan) Fix {
	f := Fix{keys: map[string]bool{}, plan: p}
	for _, k := range Keys() {
		f.keys[k] = true
	}
	return f
}

// Pinned reports whether key is pinned.
func (f Fix) Pinned(key string) bool { return f.keys[key] }

// Value is the plan holding the pinned values (Default elsewhere).
func (f Fix) Value() Plan { return f.plan }

// String lists the pinned keys in canonical order ("" when none).
func (f Fix) String() string {
	var parts []string
	for _, k := range Keys() {
		if f.keys[k] {
			parts = append(parts, k+"="+f.plan.Get(k))
		}
	}
	return strings.Join(parts, ",")
}

// allowsInt filters candidate values of an integer key.
func (f Fix) allowsInt(key string, v int) bool {
	if !f.keys[key] {
		return true
	}
	return *f.plan.intField(key) == v
}

func (f Fix) allows(key, v string) bool { return !f.keys[key] || f.plan.Get(key) == v }

// Allows reports whether p agrees with every pinned key.
func (f Fix) Allows(p Plan) bool {
	for k := range f.keys {
		if p.Get(k) != f.plan.Get(k) {
			return false
		}
	}
	return true
}
