package train

import (
	"trellis/comm"
	"trellis/trace"
)

// newTracer is the rank's tracer under --trace, nil otherwise (tracing
// off: every span call is a nil check).
func newTracer(o Options, world comm.Group) *trace.Tracer {
	if o.Trace == "" {
		return nil
	}
	return trace.New(world.Rank())
}

// writeTrace writes the rank's spans to its own file in the trace
// directory; a resumed run appends them to the earlier run's (its steps
// continue that timeline instead of overwriting it).
func writeTrace(o Options, world comm.Group, tr *trace.Tracer) error {
	if tr == nil {
		return nil
	}
	if o.Resume != "" {
		return trace.Append(trace.RankFile(o.Trace, world.Rank()), tr)
	}
	return trace.Write(trace.RankFile(o.Trace, world.Rank()), tr)
}

// mergeTrace joins the goroutine ranks' files into trace.json.
func mergeTrace(o Options) error {
	if o.Trace == "" {
		return nil
	}
	_, _, err := trace.Merge(o.Trace)
	return err
}
