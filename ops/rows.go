package ops

import (
	"math"

	"trellis/tensor"
)

// Embedding rows, for a vocabulary-parallel rank: it holds the rows
// [lo, lo+n) of wte and looks up only those ids; the model sums the
// group's partial lookups (every other rank contributes zeros).

// EncoderForward is out[b,t,:] = wte[inp[b,t],:] + wpe[t,:] with the
// tables in their dtype: fp32, or bf16/fp16 rows widened exactly (the sum
// of the two roundings).
//
//	out (B,T,C)   inp (B,T)   wte (V,C)   wpe (T,C)
func (k *Kernels) EncoderForward(out []float32, inp []int32, wte, wpe tensor.Buf, B, T, C int) {
	if wte.DType() == tensor.F32 {
		EncoderForward(k, out, inp, wte.F32(), wpe.F32(), B, T, C)
		return
	}
	we, pe := wte.Bits(), wpe.Bits()
	f16 := wte.DType() == tensor.F16
	k.Parallel(B*T, func(lo, hi int) {
		for bt := lo; bt < hi; bt++ {
			ix, t := int(inp[bt]), bt%T
			o, a, b := out[bt*C:bt*C+C], we[ix*C:ix*C+C], pe[t*C:t*C+C]
			if f16 {
				for i := range o {
					o[i] = tensor.F16Bits(a[i]).Float32() + tensor.F16Bits(b[i]).Float32()
				}
				continue
			}
			for i := range o {
				o[i] = math.Float32frombits(uint32(a[i])<<16) + math.Float32frombits(uint32(b[i])<<16)
			}
		}
	})
}

// LookupRows sets out[i,:] = wte[ids[i]−lo,:] for the ids in [lo, lo+n)
// and 0 for the others (rows other ranks hold), wte in its dtype.
//
//	out (len(ids),C)   wte (≥n,C)
func (k *Kernels) LookupRows(out []float32, ids []int32, wte tensor.Buf, lo, n, C int) {
	k.Parallel(len(ids), func(a, b int) {
		for i := a; i < b; i++ {
			o := out[i*C : (i+1)*C]
			j := int(ids[i]) - lo
			switch {
			case j < 0 || j >= n:
				clear(o)
			case wte.DType() == tensor.F32:
				copy(o, wte.F32()[j*C:(j+1)*C])
			default:
				k.Single().Decode(o, wte.Slice(j*C, (j+1)*C))
			}
		}
	})
}

// AddPositions sets out[i,:] = h[i,:] + wpe[(first+i) mod T,:] for the n
// tokens i of a pass whose first flattened token is first, wpe in its
// dtype (a 16-bit row widened exactly).
//
//	out, h (n,C)   wpe (T,C)
func (k *Kernels) AddPositions(out, h []float32, wpe tensor.Buf, first, T, n, C int) {
	k.Parallel(n, func(a, b int) {
		row := make([]float32, C)
		for i := a; i < b; i++ {
			pos := (first + i) % T
			p := row
			if wpe.DType() == tensor.F32 {
				p = wpe.F32()[pos*C : (pos+1)*C]
			} else {
				k.Single().Decode(row, wpe.Slice(pos*C, (pos+1)*C))
			}
			o, e := out[i*C:(i+1)*C], h[i*C:(i+1)*C]
			for j := range o {
				o[j] = e[j] + p[j]
			}
		}
	})
}

// RowsBackward ACCUMULATES a vocabulary-parallel lookup's gradients from
// the full gradient dh of the embedding's output:
//
//	dwpe[i mod T,:] += dh[i,:]      dwte[ids[i]−lo,:] += dh[i,:] for ids in [lo, lo+n)
//
// Threads split the channels and add tokens in order, so the result does
// not depend on the thread count. A nil dwpe is an embedding without
// positions (a Llama's): only dwte is accumulated.
//
//	dwte (≥n,C)   dwpe (T,C) or nil   dh (len(ids),C)
func (k *Kernels) RowsBackward(dwte, dwpe, dh []float32, ids []int32, lo, n, T, C int) {
	chunks := colChunks(k.Threads(), C)
	k.Parallel(chunks, func(a, b int) {
		for w := a; w < b; w++ {
			c0, c1 := colChunk(w, chunks, C)
			for i, id := range ids {
				d := dh[i*C+c0 : i*C+c1]
				if dwpe != nil {
					pos := i % T
					gp := dwpe[pos*C+c0 : pos*C+c1][:len(d)]
					for x, v := range d {
						gp[x] += v
					}
				}
				if j := int(id) - lo; j >= 0 && j < n {
					gw := dwte[j*C+c0 : j*C+c1][:len(d)]
					for x, v := range d {
						gw[x] += v
					}
				}
			}
		}
	})
}
