package fp8

// History is delayed scaling's state for one tensor (Micikevicius et al.
// 2022, Transformer Engine's DelayedScaling with amax_compute_algo "max"):
// the amaxes of the last H steps and the scale every quantisation of the
// tensor in the current step uses,
//
//	s_step = Scale(f, max(amax_{step−H}, …, amax_{step−1}), margin)
//
// undefined before the first step has been recorded (Recorded false:
// the caller scales that step by each tensor's current amax). Observe takes the current
// step's amaxes (their maximum over micro-batches and, once the caller has
// reduced Current over its ranks, over ranks); Roll appends it and makes
// the next step's scale. Its values live in a caller's buffer (charged to
// a device) of Len(H) fp32s.
type History struct {
	f      Format
	margin int
	buf    []float32 // [0, H) the ring of amaxes, H the current step's, H+1 the scale
	next   int       // the ring's next slot
	steps  int       // steps rolled
}

// Recorded says whether a step has been rolled into the history.
func (h *History) Recorded() bool { return h.steps > 0 }

// Len is the fp32s a History of h steps keeps.
func Len(h int) int { return h + 2 }

// NewHistory keeps the history of format f's tensor in buf (Len(h)
// fp32s, h ≥ 1); its scale starts at 1.
func NewHistory(f Format, margin int, buf []float32) *History {
	clear(buf)
	h := &History{f: f, margin: margin, buf: buf}
	buf[len(buf)-1] = 1
	return h
}

// Format is the tensor's fp8 format.
func (h *History) Format() Format { return h.f }

// Scale is the current step's scale.
func (h *History) Scale() float32 { return h.buf[len(h.buf)-1] }

// Observe folds an amax of the current step in.
func (h *History) Observe(amax float32) {
	c := &h.buf[len(h.buf)-2]
	*c = max(*c, amax)
}

// Current is the current step's amax so far (a pointer, for a reduction
// over ranks before Roll).
func (h *History) Current() *float32 { return &h.buf[len(h.buf)-2] }

// Roll ends the step: its amax joins the history and the next step's
// scale is made from the history's maximum.
func (h *History) Roll() {
	H := len(h.buf) - 2
	h.buf[h.next] = h.buf[H]
	h.buf[H] = 0
	h.next = (h.next + 1) % H
	h.steps++
	h.Remake()
}

// Steps is the number of steps rolled into the history.
func (h *History) Steps() int { return h.steps }

// Save writes the history in a form free of its ring's rotation, for a
// checkpoint: amax (H fp32s) gets the amaxes of the last H steps oldest
// first (zeros for steps before the first), and it returns the next
// step's scale. Between steps (after Roll, the current amax zero) that,
// with Steps, is the whole state: the ring's cursor is the rotation Save
// undoes.
func (h *History) Save(amax []float32) float32 {
	H := len(h.buf) - 2
	for i := range H {
		amax[i] = h.buf[(h.next+i)%H]
	}
	return h.Scale()
}

// Load restores a history saved by Save after steps rolled: amax its
// len(amax) = H' amaxes oldest first, scale its scale. With H' = H the
// history continues as the saved one did, bit for bit (the oldest amax
// in the ring's next slot, the next to be replaced); with another H' it
// keeps the newest min(H, H') amaxes and remakes the scale from them by
// Roll's rule (Remake).
func (h *History) Load(amax []float32, scale float32, steps int) {
	H := len(h.buf) - 2
	clear(h.buf)
	n := min(H, len(amax))
	copy(h.buf[H-n:H], amax[len(amax)-n:])
	h.next, h.steps = 0, steps
	h.buf[H+1] = 1
	switch {
	case len(amax) == H && steps > 0:
		h.buf[H+1] = scale
	case steps > 0:
		h.Remake()
	}
}

// Remake sets the next step's scale from the history's amaxes by Roll's
// rule, Scale(f, max over the history, margin): what Roll made, unless
// the history or the margin differ from those it was made with.
func (h *History) Remake() {
	H := len(h.buf) - 2
	a := float32(0)
	for _, v := range h.buf[:H] {
		a = max(a, v)
	}
	h.buf[H+1] = Scale(h.f, a, h.margin)
}
