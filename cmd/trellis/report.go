package main

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"

	"trellis/internal/bounded"
	"trellis/internal/outfile"
	"trellis/viz"
)

type reportFlags struct {
	trace, out, title string
	vs                []string
}

// newReportCmd is `trellis report`: one self-contained HTML file (inline
// SVG, no script, nothing fetched) from a finished run's --metrics file.
func newReportCmd() *cobra.Command {
	var f reportFlags
	c := &cobra.Command{
		Use:   "report RUN.jsonl [--trace DIR] -o report.html",
		Short: "Write an HTML report of a finished run from its --metrics file",
		Long: `Write one self-contained HTML file with the plots of a finished run: loss and
validation loss, learning rate, tokens/s and MFU per step, each rank's memory by
tag against the device budget and its step time split. With --trace DIR, the
Chrome trace DIR/trace.json adds a timeline per rank (skipped when absent).`,
		Example: `  trellis train --set train.steps=200 --metrics run.jsonl
  trellis report run.jsonl -o report.html
  trellis report moe.jsonl --vs dense.jsonl -o moe-vs-dense.html`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error { return runReport(args[0], f) },
	}
	fl := c.Flags()
	fl.StringVar(&f.trace, "trace", "", "directory holding trace.json (Chrome trace events)")
	fl.StringVarP(&f.out, "out", "o", "report.html", "the HTML file to write")
	fl.StringVar(&f.title, "title", "", "page title (default: the metrics file's name)")
	fl.StringArrayVar(&f.vs, "vs", nil, "another run's --metrics file whose losses the loss panel draws beside this run's (repeatable)")
	return c
}

func runReport(metrics string, f reportFlags) error {
	traceFile := ""
	if f.trace != "" {
		traceFile = filepath.Join(f.trace, "trace.json")
	}
	// Before reading anything: the report must not replace what it is
	// made from, nor a device or FIFO.
	if err := outfile.Check("-o", f.out, append([]string{metrics, traceFile}, f.vs...)...); err != nil {
		return err
	}
	steps, err := readSteps(metrics)
	if err != nil {
		return err
	}
	run := &viz.Run{Steps: steps, Status: fmt.Sprintf("%d steps, %d..%d", len(steps), steps[0].Step, steps[len(steps)-1].Step)}
	run.Info.Ranks = len(steps[len(steps)-1].Ranks)
	headerInfo(run)
	for _, v := range f.vs {
		vs, err := readSteps(v)
		if err != nil {
			return fmt.Errorf("--vs: %w", err)
		}
		run.Versus = append(run.Versus, viz.Versus{Name: strings.TrimSuffix(filepath.Base(v), ".jsonl"), Steps: vs})
	}
	if f.trace != "" {
		if run.Trace, err = readTrace(f.trace); err != nil {
			return err
		}
	}
	title := f.title
	if title == "" {
		title = "trellis report: " + filepath.Base(metrics)
	}
	page := viz.Page{Title: title, Status: run.Status, Panels: viz.Panels(run)}
	return outfile.Write("-o", f.out, func(w io.Writer) error { return viz.WriteHTML(w, page) }, append([]string{metrics, traceFile}, f.vs...)...)
}

// readSteps reads a --metrics file that must hold at least one step.
func readSteps(path string) ([]viz.Step, error) {
	in, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer in.Close()
	steps, err := viz.ReadMetrics(in)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if len(steps) == 0 {
		return nil, fmt.Errorf("%s: no steps (want the file trellis train --metrics writes)", path)
	}
	return steps, nil
}

// readTrace reads DIR/trace.json; a missing file is no trace (nil, nil).
func readTrace(dir string) (*viz.Trace, error) {
	p := filepath.Join(dir, "trace.json")
	b, err := bounded.ReadRegular(p, bounded.Trace, "trace file")
	if errors.Is(err, fs.ErrNotExist) {
		fmt.Fprintf(os.Stderr, "trellis report: no %s: the report has no timeline\n", p)
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	t, err := viz.ParseTrace(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", p, err)
	}
	return t, nil
}

// headerInfo fills the report's description from the metrics file's
// header records (the latest run's: a resumed file has one per run) and
// its samples from the lines that carry one.
func headerInfo(run *viz.Run) {
	for _, s := range run.Steps {
		if h := s.Run; h != nil {
			run.Info.Plan, run.Info.Model, run.Info.Params, run.Info.Ranks = h.Plan, h.Model, h.Params, h.Ranks
			run.Info.TokensPerStep, run.Info.ToStep = h.TokensPerStep, h.ToStep
			run.Info.Budget = s.Budget
			if run.Info.FromStep == 0 {
				run.Info.FromStep = h.FromStep
			}
		}
		if s.Sample != nil {
			run.Samples = append(run.Samples, viz.Sample{Step: s.Step, Text: *s.Sample})
		}
	}
}
