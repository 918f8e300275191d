package plan

import (
	"encoding/json"
	"sort"
	"testing"

	"github.com/BurntSushi/toml"
)

// TestFrameworkTablesMatchEmission holds the torchtitan and DeepSpeed
// mapping tables to what the planner writes: every key an emission of a
// framework case contains is a row of its framework's table, and every row
// is written by some case (a row nothing writes documents nothing). Keys
// are dotted paths: a TOML table's or JSON object's keys under it
// (activation_checkpointing, an object the table names as a whole, counts
// as written when present).
func TestFrameworkTablesMatchEmission(t *testing.T) {
	for _, c := range []struct {
		fw    Framework
		table []fwArg
		keys  func(string) (map[string]bool, error)
	}{
		{Torchtitan, torchtitanTable(), tomlKeys},
		{DeepSpeed, deepspeedTable(), jsonKeys},
	} {
		rows := map[string]bool{}
		for _, r := range c.table {
			rows[r.Name] = true
		}
		written := map[string]bool{}
		for _, fc := range frameworkCases(t) {
			em, err := fc.job.Emit(c.fw, fc.plan)
			if err != nil {
				t.Fatalf("%s, %s: %v", c.fw, fc.name, err)
			}
			keys, err := c.keys(em.Text)
			if err != nil {
				t.Fatalf("%s, %s: the emission does not parse: %v\n%s", c.fw, fc.name, err, em.Text)
			}
			for k := range keys {
				if !rows[k] {
					t.Errorf("%s, %s: writes %s, which its table does not list", c.fw, fc.name, k)
				}
				written[k] = true
			}
		}
		var unused []string
		for k := range rows {
			if !written[k] {
				unused = append(unused, k)
			}
		}
		sort.Strings(unused)
		if len(unused) > 0 {
			t.Errorf("%s: table rows no case writes: %v", c.fw, unused)
		}
	}
}

// tomlKeys is the dotted paths of a TOML document's values, arrays of
// tables excluded.
func tomlKeys(text string) (map[string]bool, error) {
	var doc map[string]any
	if _, err := toml.Decode(text, &doc); err != nil {
		return nil, err
	}
	out := map[string]bool{}
	flatten("", doc, out, nil)
	return out, nil
}

// jsonKeys is the dotted paths of a JSON document's values; an object
// named in whole (whole) counts as one key.
func jsonKeys(text string) (map[string]bool, error) {
	var doc map[string]any
	if err := json.Unmarshal([]byte(text), &doc); err != nil {
		return nil, err
	}
	out := map[string]bool{}
	flatten("", doc, out, map[string]bool{"activation_checkpointing": true})
	return out, nil
}

func flatten(prefix string, m map[string]any, out, whole map[string]bool) {
	for k, v := range m {
		name := k
		if prefix != "" {
			name = prefix + "." + k
		}
		if sub, ok := v.(map[string]any); ok && !whole[name] {
			flatten(name, sub, out, whole)
			continue
		}
		out[name] = true
	}
}
