package model

import "trellis/tensor"

// EPComm is where an expert-parallel rank meets the other ranks of its
// group: an MoE layer's dispatch of tokens to the ranks holding their
// experts and the combine of the experts' outputs back (GShard's two
// all-to-alls, and their counts). train implements it over a comm.Group;
// every rank of the group makes the same calls in the same order. Under
// ep_overlap=on two runners of a rank, each with its own EPComm over its
// own group, run a forward and a backward in turn, and these calls are
// where one hands the compute to the other (train's tokenEP): a pass
// runs nothing else between its own calls while the other computes.
type EPComm interface {
	// ExchangeCounts is an all-to-all of equal chunks: with p ranks and
	// len(src) = len(dst) = p·m, dst[i·m:(i+1)·m] = src[me·m:(me+1)·m] of
	// rank i (the rows each rank sends to each of this rank's experts).
	ExchangeCounts(dst, src []float32) error
	// AllToAllV sends src's p segments, segment j of sendCounts[j]
	// elements to rank j, and receives dst's, segment i of recvCounts[i]
	// elements from rank i (comm.AllToAllV).
	AllToAllV(dst, src tensor.Buf, sendCounts, recvCounts []int) error
}
