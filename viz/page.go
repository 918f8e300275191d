package viz

import (
	_ "embed"
	"html/template"
	"io"
)

//go:embed page.html
var pageHTML string

// pageTmpl is parsed once per call: no package-level mutable state.
func pageTmpl() (*template.Template, error) { return template.New("page").Parse(pageHTML) }

// Page is a whole HTML document: a header, panels and, for live pages, a
// script (inline; nothing is fetched).
type Page struct {
	Title  string
	Status string        // one line under the title (id "status")
	Header template.HTML // e.g. the plan explorer's form
	Panels []Panel
	Script template.JS // "" for a static report
	Since  string      // a live page: the id of the frame it shows (body's data-since)
}

// WriteHTML writes the page as one self-contained document.
func WriteHTML(w io.Writer, p Page) error {
	t, err := pageTmpl()
	if err != nil {
		return err
	}
	return t.Execute(w, p)
}
