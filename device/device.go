// Package device models one rank's memory: every buffer the seed's formula
//
//	M_device ≈ M_param + M_grad + M_optim + M_act
//
// counts is allocated through a Device with a Tag, so a run can report live
// and peak bytes per category and the planner's predictions can be held
// against them. A Device may carry a budget; an allocation that would exceed
// it fails with an *OOMError that says which tag asked and what fills memory.
//
// A Device is safe for concurrent use.
package device

import (
	"errors"
	"fmt"
	"strings"
	"sync"

	"trellis/tensor"
)

// Tag is the category an allocation is charged to.
type Tag uint8

// The categories of the seed's memory formula, plus scratch space and
// communication buffers.
const (
	Param Tag = iota
	Grad
	Optim
	Act
	Workspace
	Comm
	NumTags
)

var tagNames = [NumTags]string{"param", "grad", "optim", "act", "workspace", "comm"}

func (t Tag) String() string {
	if t < NumTags {
		return tagNames[t]
	}
	return fmt.Sprintf("tag(%d)", uint8(t))
}

// Tags lists every tag in order.
func Tags() []Tag { return []Tag{Param, Grad, Optim, Act, Workspace, Comm} }

// ErrOutOfMemory is matched (errors.Is) by every *OOMError.
var ErrOutOfMemory = errors.New("out of memory")

// Config configures a Device.
type Config struct {
	ID     int   // the rank it belongs to, for messages
	Budget int64 // bytes; 0 means unlimited
}

// Device accounts one rank's memory.
type Device struct {
	id     int
	budget int64

	mu        sync.Mutex
	live      [NumTags]int64
	peak      [NumTags]int64
	liveTotal int64
	peakTotal int64
	spares    spares // freed storage kept for reuse (recycle.go)
}

// New returns an empty device.
func New(cfg Config) *Device {
	return &Device{id: cfg.ID, budget: cfg.Budget}
}

// ID is the rank the device belongs to.
func (d *Device) ID() int { return d.id }

// Budget is the byte budget (0: unlimited).
func (d *Device) Budget() int64 { return d.budget }

// Buffer is an allocation charged to a tag: fp32 elements in Data (Alloc)
// or 16-bit ones in Bits (AllocOf). Its elements are zeroed on allocation.
type Buffer struct {
	Data  []float32 // fp32 elements
	Bits  []uint16  // bf16 or fp16 elements, as bits
	tag   Tag
	dev   *Device
	dtype tensor.DType
}

// Tag is the category the buffer is charged to.
func (b *Buffer) Tag() Tag { return b.tag }

// Buf is the buffer's elements in their dtype (Data or Bits).
func (b *Buffer) Buf() tensor.Buf {
	if b.dtype == tensor.F32 {
		return tensor.F32s(b.Data)
	}
	return tensor.Halves(b.dtype, b.Bits)
}

// Bytes is the size charged for the buffer (0 once freed).
func (b *Buffer) Bytes() int64 { return int64(b.Len()) * int64(b.dtype.Size()) }

// Free returns the buffer's bytes to its device. Freeing twice, or freeing a
// nil buffer, is a no-op. Data must not be used afterwards.
func (b *Buffer) Free() {
	if b == nil || b.dev == nil {
		return
	}
	b.dev.Release(b.tag, b.Bytes())
	b.dev.keep(b.Data, b.Bits)
	b.dev = nil
	b.Data, b.Bits = nil, nil
}

// Alloc returns a zeroed buffer of n fp32 elements charged to tag, or an
// *OOMError if the budget would be exceeded: AllocOf(tag, tensor.F32, n).
func (d *Device) Alloc(tag Tag, n int) (*Buffer, error) {
	return d.AllocOf(tag, tensor.F32, n)
}

// Reserve charges bytes to tag without allocating, for memory held in other
// element types (bf16 communication buffers, token ids). Pair with Release.
func (d *Device) Reserve(tag Tag, bytes int64) error {
	if tag >= NumTags {
		return fmt.Errorf("device %d: unknown tag %d", d.id, tag)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.budget > 0 && d.liveTotal+bytes > d.budget {
		return &OOMError{Device: d.id, Tag: tag, Request: bytes, Budget: d.budget, Live: d.live}
	}
	d.live[tag] += bytes
	d.liveTotal += bytes
	if d.live[tag] > d.peak[tag] {
		d.peak[tag] = d.live[tag]
	}
	if d.liveTotal > d.peakTotal {
		d.peakTotal = d.liveTotal
	}
	return nil
}

// Release returns bytes charged to tag by Reserve or Alloc.
func (d *Device) Release(tag Tag, bytes int64) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.live[tag] -= bytes
	d.liveTotal -= bytes
	if d.live[tag] < 0 {
		panic(fmt.Sprintf("device %d: released more %s bytes than were reserved", d.id, tag))
	}
}

// Stats is a snapshot of a device's accounting.
type Stats struct {
	Live      [NumTags]int64 // bytes live now, per tag
	Peak      [NumTags]int64 // the most bytes each tag has held at once
	LiveTotal int64
	PeakTotal int64 // the most bytes held at once, all tags together
	Budget    int64
}

// Stats returns the current accounting.
func (d *Device) Stats() Stats {
	d.mu.Lock()
	defer d.mu.Unlock()
	return Stats{Live: d.live, Peak: d.peak, LiveTotal: d.liveTotal, PeakTotal: d.peakTotal, Budget: d.budget}
}

// ResetPeak sets every peak to the current live value.
func (d *Device) ResetPeak() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.peak = d.live
	d.peakTotal = d.liveTotal
}

// OOMError reports an allocation that would exceed the device budget.
type OOMError struct {
	Device  int
	Tag     Tag
	Request int64
	Budget  int64
	Live    [NumTags]int64
}

// Error reads like
//
//	device 0: out of memory: tried to allocate 48.0 MiB (act); 1.20 GiB of 1.25 GiB in use: param 300 MiB, grad 300 MiB, optim 600 MiB, act 50.0 MiB
func (e *OOMError) Error() string {
	var total int64
	var parts []string
	for t := Tag(0); t < NumTags; t++ {
		total += e.Live[t]
		if e.Live[t] > 0 {
			parts = append(parts, t.String()+" "+FormatBytes(e.Live[t]))
		}
	}
	s := fmt.Sprintf("device %d: out of memory: tried to allocate %s (%s); %s of %s in use",
		e.Device, FormatBytes(e.Request), e.Tag, FormatBytes(total), FormatBytes(e.Budget))
	if len(parts) > 0 {
		s += ": " + strings.Join(parts, ", ")
	}
	return s
}

// Is makes errors.Is(err, ErrOutOfMemory) true.
func (e *OOMError) Is(target error) bool { return target == ErrOutOfMemory }

// FormatBytes prints n with a binary unit and three significant digits:
// 512 B, 48.0 MiB, 1.20 GiB, 300 MiB.
func FormatBytes(n int64) string {
	units := []string{"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"}
	v := float64(n)
	neg := v < 0
	if neg {
		v = -v
	}
	i := 0
	for v >= 1024 && i < len(units)-1 {
		v /= 1024
		i++
	}
	// Round first so that 1023.9 MiB prints as 1.00 GiB, not 1024 MiB.
	if i < len(units)-1 && v >= 999.5 {
		v /= 1024
		i++
	}
	var s string
	switch {
	case i == 0:
		s = fmt.Sprintf("%d B", int64(v))
	case v >= 99.95:
		s = fmt.Sprintf("%.0f %s", v, units[i])
	case v >= 9.995:
		s = fmt.Sprintf("%.1f %s", v, units[i])
	default:
		s = fmt.Sprintf("%.2f %s", v, units[i])
	}
	if neg {
		s = "-" + s
	}
	return s
}
