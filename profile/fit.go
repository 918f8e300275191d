// Package profile measures this machine in the planner's terms — the FMA
// peak, GEMM efficiency by shape, attention and memory-bound kernel rates,
// memory bandwidth, and the α–β cost of collectives on each backend — and
// writes a cluster file that plan.ParseClusterFile reads (`trellis profile
// -o host.toml`). Every constant of the file is measured here; the fits that
// turn timings into the planner's parameters are in this file and are
// tested on synthetic data with known answers.
package profile

import (
	"fmt"
	"math"
)

// GEMMSample is one timed matrix product C(M,N) = A(M,K)·B(K,N).
type GEMMSample struct {
	M, N, K int
	Seconds float64 // median of the timed repetitions
}

// FLOPs is 2·M·N·K.
func (s GEMMSample) FLOPs() float64 { return 2 * float64(s.M) * float64(s.N) * float64(s.K) }

// Efficiency is the fraction of peak (FLOP/s) the product reached.
func (s GEMMSample) Efficiency(peak float64) float64 { return s.FLOPs() / s.Seconds / peak }

// gemmShape is the planner's shape factor for knee κ:
//
//	f(m,n,k) = m/(m+κ) · n/(n+κ) · k/(k+κ)
func gemmShape(s GEMMSample, knee float64) float64 {
	m, n, k := float64(s.M), float64(s.N), float64(s.K)
	return m / (m + knee) * n / (n + knee) * k / (k + knee)
}

// FitGEMM fits the planner's GEMM model η(m,n,k) = η_max · f(m,n,k; κ)
// (plan/compute.go) to measured efficiencies y_i: for each κ on a fine
// logarithmic grid over [1, 4096], η_max is the least-squares optimum of the
// relative error Σ((y_i − η·f_i)/y_i)², i.e. η = Σ(f_i/y_i) / Σ(f_i/y_i)²,
// held to η ≤ 1 (a fraction of the peak: the error is convex in η, so the
// constrained optimum is min(η, 1)); the κ with the smallest error wins.
// Without the bound a machine whose large GEMMs reach the FMA loop's peak
// (AVX2 on Zen 3: 100% at 256×384×128) fits η > 1 with a large κ. It returns η_max, κ and the RMS
// relative error of the fit.
func FitGEMM(samples []GEMMSample, peak float64) (eff, knee, rms float64, err error) {
	if len(samples) < 2 || !(peak > 0) {
		return 0, 0, 0, fmt.Errorf("profile: GEMM fit needs at least 2 samples and a positive peak (have %d, peak %g)", len(samples), peak)
	}
	best := math.Inf(1)
	for lk := 0.0; lk <= math.Log(4096); lk += 0.005 {
		q := math.Exp(lk)
		var num, den float64
		for _, s := range samples {
			r := gemmShape(s, q) / s.Efficiency(peak)
			num += r
			den += r * r
		}
		e := min(num/den, 1)
		var sse float64
		for _, s := range samples {
			d := 1 - e*gemmShape(s, q)/s.Efficiency(peak)
			sse += d * d
		}
		if sse < best {
			best, eff, knee = sse, e, q
		}
	}
	return eff, knee, math.Sqrt(best / float64(len(samples))), nil
}

// CommSample is one timed collective on a group of Ranks.
type CommSample struct {
	Op      string // "allreduce", "reducescatter" or "allgather"
	Ranks   int
	Bytes   int64 // the full buffer S (not one rank's part)
	Seconds float64
}

// terms are the planner's coefficients of α and of 1/β for the sample:
// a ring reduce-scatter or all-gather costs (n−1)·α + (n−1)/n·S/β
// (plan/comm.go), an all-reduce twice that.
func (s CommSample) terms() (a, b float64, ok bool) {
	n := float64(s.Ranks)
	k := 0.0
	switch s.Op {
	case "allreduce":
		k = 2
	case "reducescatter", "allgather":
		k = 1
	default:
		return 0, 0, false
	}
	return k * (n - 1), k * (n - 1) / n * float64(s.Bytes), true
}

// FitLink fits the planner's link (latency α in seconds, bandwidth β in
// bytes/s) to timed collectives by weighted least squares on
// t_i = a_i·α + b_i·(1/β) with weights 1/t_i² (relative error, so small
// messages fix α and large ones fix β). A negative α (measurement noise
// on a fast link) is clamped to 0 and 1/β refitted. It returns the RMS
// relative error of the fit.
func FitLink(samples []CommSample) (latency, bw, rms float64, err error) {
	var saa, sab, sbb, sat, sbt float64
	n := 0
	for _, s := range samples {
		a, b, ok := s.terms()
		if !ok || s.Ranks < 2 || !(s.Seconds > 0) {
			continue
		}
		w := 1 / (s.Seconds * s.Seconds)
		saa += w * a * a
		sab += w * a * b
		sbb += w * b * b
		sat += w * a * s.Seconds
		sbt += w * b * s.Seconds
		n++
	}
	if n < 2 {
		return 0, 0, 0, fmt.Errorf("profile: link fit needs at least 2 collective timings on 2+ ranks, have %d", n)
	}
	det := saa*sbb - sab*sab
	alpha, inv := 0.0, sbt/sbb
	if det > 0 {
		alpha = (sat*sbb - sab*sbt) / det
		inv = (saa*sbt - sab*sat) / det
	}
	if alpha < 0 || inv <= 0 {
		alpha, inv = 0, sbt/sbb
	}
	if !(inv > 0) {
		return 0, 0, 0, fmt.Errorf("profile: link fit found no positive bandwidth")
	}
	var sse float64
	for _, s := range samples {
		a, b, ok := s.terms()
		if !ok || s.Ranks < 2 || !(s.Seconds > 0) {
			continue
		}
		d := 1 - (a*alpha+b*inv)/s.Seconds
		sse += d * d
	}
	return alpha, 1 / inv, math.Sqrt(sse / float64(n)), nil
}
