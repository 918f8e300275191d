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
		if spareKeep(&s.f32, data) {
			s.bytes += n32
		}
	case len(bits) > 0:
		if spareKeep(&s.u16, bits) {
			s.bytes += n16
		}
	}
}

// reuse32 returns n zeroed fp32 elements: a kept slice of that length, or
// fresh memory.
func (d *Device) reuse32(n int) []float32 { return reuse(d, &d.spares.f32, n, 4) }

// reuse16 is reuse32 for 16-bit elements.
func (d *Device) reuse16(n int) []uint16 { return reuse(d, &d.spares.u16, n, 2) }

// reuse returns n zeroed elements of size bytes each from m, or fresh
// memory.
func reuse[T float32 | uint16](d *Device, m *map[int][][]T, n int, size int64) []T {
	if int64(n)*size >= spareMin {
		d.mu.Lock()
		buf := spareTake(*m, n)
		if buf != nil {
			d.spares.bytes -= int64(n) * size
		}
		d.mu.Unlock()
		if buf != nil {
			clear(buf)
			return buf
		}
	}
	return make([]T, n)
}

// spareKeep adds buf to *m (made on first use) unless spareSame slices of
// its length are kept already; it reports whether buf was kept.
func spareKeep[T float32 | uint16](m *map[int][][]T, buf []T) bool {
	if *m == nil {
		*m = map[int][][]T{}
	}
	if len((*m)[len(buf)]) >= spareSame {
		return false
	}
	(*m)[len(buf)] = append((*m)[len(buf)], buf)
	return true
}

// spareTake removes a kept slice of length n from m and returns it (nil:
// none kept).
func spareTake[T float32 | uint16](m map[int][][]T, n int) []T {
	l := m[n]
	k := len(l)
	if k == 0 {
		return nil
	}
	buf := l[k-1]
	l[k-1] = nil
	m[n] = l[:k-1]
	return buf
}
