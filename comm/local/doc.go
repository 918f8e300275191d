// Package local is the in-process comm backend: the ranks of a world are
// goroutines of one process that share memory, and a collective reads its
// peers' buffers directly.
//
//	groups, err := local.New(local.Config{Size: 4})
//	for r, g := range groups { go rank(r, g) } // rank r uses only groups[r]
//
// # Algorithms
//
// Every collective is a rendezvous of the group's members, who publish their
// buffers, followed by phases in which each rank does its own share of the
// work, separated by barriers. With p ranks and n elements, chunk r is
// elements [⌊r·n/p⌋, ⌊(r+1)·n/p⌋) (boundaries aligned down to 16 elements):
//
//	AllReduce      rank r owns chunk r of every rank's buffer: it folds that
//	               chunk of all the buffers, in rank order, block by block
//	               (comm.ReduceTo; bf16 in fp32, one rounding), and writes
//	               the result back into every buffer; barrier. Each element
//	               of each buffer is read and written once.
//	ReduceScatter  rank r folds chunk r of every src into its dst; barrier.
//	AllGather      rank r copies every rank's src into its dst; barrier.
//	Broadcast      scatter: rank r copies chunk r from the root; barrier;
//	               all-gather as above (the root copies nothing). Payloads
//	               under 32 KiB are copied from the root in one phase.
//	AllToAll       rank r copies chunk r of every rank's src into its dst.
//	Send/Recv      outside the queue, matched when issued: if the matching
//	               Recv is already posted, Send copies straight into its
//	               buffer (the Recv's Stats count the wait before that
//	               as Skew); otherwise Send copies
//	               the payload into the receiver's mailbox (at most
//	               Config.MaxBuffered bytes per receiver and group) and
//	               completes (it never waits for the receiver). Messages
//	               with the same (sender, tag) are received in the order
//	               sent.
//
// In an all-reduce each rank reads n elements and writes n, whatever p (of
// which (p−1)/p·n from and to its peers), and folds n/p of them p ways: the
// p buffers are each written once in total, the least any in-place
// all-reduce can do, where a rank folding every buffer itself would read
// p·n. Results are the same on every rank, bit for bit, and do not depend
// on scheduling.
//
// # Deadlines and failure
//
// A rank waits at most Config.Timeout at each barrier (and for a message in
// Recv). Past it, the group breaks: every member's pending operation returns
// a *comm.PeerError naming the lowest world rank that had not arrived (the
// message lists all of them), and later operations fail at once. Closing a
// rank's group breaks the group for its peers the same way, naming the
// closing rank; closing a group also closes the groups made from it with
// NewGroup, so closing a rank's world group takes the rank out of everything.
//
// # Link emulation
//
// With Config.Link set, every phase of an algorithm also takes the time the
// modelled network would. Each rank has one full-duplex port per link class —
// intra-node (ranks r and q with ⌊r/RanksPerNode⌋ = ⌊q/RanksPerNode⌋) and
// inter-node — with the class's bandwidth B and latency L. For one phase, let
// S_c and R_c be the bytes this rank sends to and receives from peers over
// class c (following the transfers the algorithm above makes: every byte a
// rank reads from a peer's buffer is a transfer from that peer). The phase
// takes
//
//	T = max over classes c used in the phase of ( L_c + max(S_c, R_c) / B_c )
//
// and the rank sleeps until T has passed since the phase began, so the real
// copy is hidden inside the modelled time when the link is the slower. An
// operation's first phase begins when its last member posted it (called
// AllReduce, …), or when the rank's link is free of its group's operation
// before, whichever is later: the network moves the bytes while the ranks
// compute, as a NIC's engines do, even where the goroutine that runs the
// operation gets a core only later (ranks outnumbering the cores).
// Transfers over different classes proceed in parallel; transfers over one
// class share its bandwidth. Point-to-point messages are not phases: a Send
// copies its payload at once and never blocks its sender; the message leaves
// when the earlier messages to the same peer have (they share the link's
// bandwidth), occupies the link for bytes/B and arrives L later, so the
// latencies of messages in flight overlap; the Send and its Recv complete
// when it arrives. "The same peer" is the peer in the sending group: each
// group has its own links, unless LinkModel.SharedPorts makes the
// messages of every group from one world rank to another share one link
// (two groups' transfers between the same ranks then queue behind each
// other, as on one port of a real network). Waits shorter than a Go timer's millisecond resolution
// sleep in nanosleep. Barrier costs one latency of the slowest class in the
// group. Zero bandwidth means unlimited, zero latency none. The model charges
// what this package's algorithms move (one phase talks to every peer at
// once), not what a ring or tree on a real network would.
package local
