package main

import (
	"bytes"
	"testing"
)

// TestVDPBF16PS holds the encoder to GNU as 2.40 (`vdpbf16ps %zmmS2,
// %zmmS1, %zmmD` then objdump -d), over registers that set every
// extension bit: R̄, R̄', X̄, B̄ and V̄'.
func TestVDPBF16PS(t *testing.T) {
	for _, c := range []struct {
		dst, src1, src2 int
		want            []byte
	}{
		{0, 1, 2, []byte{0x62, 0xf2, 0x76, 0x48, 0x52, 0xc2}},
		{9, 17, 31, []byte{0x62, 0x12, 0x76, 0x40, 0x52, 0xcf}},
		{23, 26, 10, []byte{0x62, 0xc2, 0x2e, 0x40, 0x52, 0xfa}},
		{31, 31, 31, []byte{0x62, 0x02, 0x06, 0x40, 0x52, 0xff}},
		{0, 24, 25, []byte{0x62, 0x92, 0x3e, 0x40, 0x52, 0xc1}},
	} {
		if got := vdpbf16ps(c.dst, c.src1, c.src2); !bytes.Equal(got, c.want) {
			t.Errorf("vdpbf16ps(zmm%d, zmm%d, zmm%d) = % x, want % x", c.dst, c.src1, c.src2, got, c.want)
		}
	}
}
