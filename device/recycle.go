package device

// Recycling. A buffer's storage outlives its Free: the device keeps the
// freed slices of large buffers and hands one of the same length to the
// next allocation, zeroed, instead of asking the Go heap for fresh memory.
// ZeRO-3 allocates and frees a layer's gathered parameters and staged
// gradients several times per micro-batch; fresh heap memory is zeroed by
// the runtime and, once the scavenger has returned it to the OS, faulted in
// page by page (with the collector off, the agreement job's dp=2 ZeRO-3
// step took 110 ms instead of 25). A recycled slice is already mapped and
// often still in cache.
//
// The accounting does not change: a kept slice is charged to no tag (like
// a caching allocator's reserved but unallocated memory), and at most
// spareMax bytes (the budget, if smaller), spareSame slices of one
// length, are kept per device.

const (
	spareMin  = 64 << 10  // bytes: smaller buffers come from the heap's size classes cheaply
	spareSame = 4         // slices kept per length and element width
	spareMax  = 128 << 20 // bytes kept per device
)

// spares are a device's kept slices by length, and their bytes (guarded by
// Device.mu).
type spares struct {
	f32   map[int][][]float32
	u16   map[int][][]uint16
	bytes int64
}

// keep takes the storage of a freed buffer for reuse, if it is large enough
// and there is room.
func (d *Device) keep(data []float32, bits []uint16) {
	n32, n16 := int64(len(data))*4, int64(len(bits))*2
	if n32+n16 < spareMin {
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	s := &d.spares
	limit := int64(spareMax)
	if d.budget > 0 {
		limit = min(limit, d.budget)
	}
	if s.bytes+n32+n16 > limit {
		return
	}
	switch {
	case len(data) > 0:
		if s.f32 == nil {
			s.f32 = map[int][][]float32{}
		}
		if len(s.f32[len(data)]) < spareSame {
			s.f32[len(data)] = append(s.f32[len(data)], data)
			s.bytes += n32
		}
	case len(bits) > 0:
		if s.u16 == nil {
			s.u16 = map[int][][]uint16{}
		}
		if len(s.u16[len(bits)]) < spareSame {
			s.u16[len(bits)] = append(s.u16[len(bits)], bits)
			s.bytes += n16
		}
	}
}

// reuse32 returns n zeroed fp32 elements: a kept slice of that length, or
// fresh memory.
func (d *Device) reuse32(n int) []float32 {
	if int64(n)*4 >= spareMin {
		d.mu.Lock()
		l := d.spares.f32[n]
		if k := len(l); k > 0 {
			buf := l[k-1]
			l[k-1] = nil
			d.spares.f32[n] = l[:k-1]
			d.spares.bytes -= int64(n) * 4
			d.mu.Unlock()
			clear(buf)
			return buf
		}
		d.mu.Unlock()
	}
	return make([]float32, n)
}

// reuse16 is reuse32 for 16-bit elements.
func (d *Device) reuse16(n int) []uint16 {
	if int64(n)*2 >= spareMin {
		d.mu.Lock()
		l := d.spares.u16[n]
		if k := len(l); k > 0 {
			buf := l[k-1]
			l[k-1] = nil
			d.spares.u16[n] = l[:k-1]
			d.spares.bytes -= int64(n) * 2
			d.mu.Unlock()
			clear(buf)
			return buf
		}
		d.mu.Unlock()
	}
	return make([]uint16, n)
}
