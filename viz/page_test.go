package viz

import (
	"strings"
	"testing"
)

// TestReportIsSelfContained: a static page has every panel inline and
// nothing that could fetch: no script, no src or href, no URL.
func TestReportIsSelfContained(t *testing.T) {
	s, err := ParseStep([]byte(readmeLine))
	if err != nil {
		t.Fatal(err)
	}
	run := &Run{Steps: []Step{s}, Samples: []Sample{{Step: 1, Text: "<b>Mr. Darcy</b>"}}, Info: Info{Plan: "dp=1", Budget: 48 << 20,
		Groups: map[string][][]int{"dp": {{0, 1}}, "tp": {{0}, {1}}, "pp": {{0, 1}}}}}
	var b strings.Builder
	if err := WriteHTML(&b, Page{Title: "t", Panels: Panels(run)}); err != nil {
		t.Fatal(err)
	}
	page := b.String()
	for _, bad := range []string{"<script", "src=", "href=\"http", "http:", "https:", "<b>Mr", `data-axis="tp"`} {
		if strings.Contains(page, bad) {
			t.Errorf("report contains %q", bad)
		}
	}
	for _, id := range []string{`id="loss"`, `id="lr"`, `id="throughput"`, `id="mfu"`, `id="memory"`, `id="steptime"`, `id="plan"`, `id="samples"`, `data-axis="dp"`, `data-axis="pp"`} {
		if !strings.Contains(page, id) {
			t.Errorf("report lacks %s", id)
		}
	}
}
