package data

import (
	"fmt"
	"log/slog"
	"math"
)

// LoaderConfig configures a Loader: the [data] section plus what the model
// and the run fix.
type LoaderConfig struct {
	Data   Config
	SeqLen int          // T, tokens per sequence
	Vocab  int          // V, the model's vocabulary; every token must be < V
	Seed   uint64       // fixes the sample order (and synthetic tokens)
	Log    *slog.Logger // cache messages; nil discards them
}

// Validate checks the data section, the sizes and the vocabulary.
func (c LoaderConfig) Validate() error {
	if err := c.Data.Validate(); err != nil {
		return err
	}
	if c.SeqLen < 1 {
		return fmt.Errorf("data: seq_len=%d must be >= 1", c.SeqLen)
	}
	return c.Data.CheckVocab(c.Vocab)
}

// span is the token range [off, off+n) of a store.
type span struct {
	s      store
	off, n int64
}

func (sp span) read(dst []int32, at int64) { sp.s.Read(dst, sp.off+at) }

// Loader serves (inputs, targets) sequences of T tokens, targets being the
// inputs shifted by one token, from a training and a validation split.
//
// Training order. The training split of n tokens is cut into
// N = max(1, ⌊(n−T)/T⌋) non-overlapping windows of T+1 tokens (T inputs,
// the last T of them also targets). Training samples are numbered
// g = 0, 1, 2, … over the whole run; sample g belongs to epoch e = ⌊g/N⌋ and
// reads window π_e(g mod N), where π_e is a pseudo-random permutation of
// [0, N) keyed by (seed, e), starting at token shift_e + T·π_e(g mod N),
// with shift_e in [0, min(T−1, n−1−N·T)] also keyed by (seed, e), so each
// epoch sees the text cut at other places. Everything is a pure function of
// (seed, g): any sample is computed on its own, in any order, by any rank,
// and the position in the run is one integer (Position).
//
// Validation order: the validation split is cut into ⌊(n_val−1)/T⌋
// consecutive windows from its start, read in order, unshuffled.
//
// A Loader is read-only after NewLoader and safe for concurrent use.
type Loader struct {
	tok          Tokenizer
	seqLen       int64
	seed         uint64
	train, val   span
	trainWindows int64 // N
	maxShift     int64
	valWindows   int64
}

// NewLoader opens the source, tokenises it if needed, checks every token
// against the model vocabulary and splits it.
func NewLoader(cfg LoaderConfig) (*Loader, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	log := cfg.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	tok, err := NewTokenizer(cfg.Data.Tokenizer)
	if err != nil {
		return nil, err
	}
	st, err := openSource(cfg, tok, log)
	if err != nil {
		return nil, err
	}
	if err := checkTokens(st, cfg); err != nil {
		return nil, err
	}
	return newLoader(st, tok, cfg)
}

// openSource returns the token store of the configured source.
func openSource(cfg LoaderConfig, tok Tokenizer, log *slog.Logger) (store, error) {
	d := cfg.Data
	switch d.kind() {
	case SourceEmbedded:
		return loadEmbedded(tok)
	case SourceSynthetic:
		n := d.SyntheticTokens
		if n == 0 {
			n = defaultSyntheticTokens
		}
		return syntheticStore{n: n, vocab: uint64(cfg.Vocab), seed: cfg.Seed}, nil
	case "tokens":
		toks, err := ReadTokenFile(d.Source)
		if err != nil {
			return nil, err
		}
		return u16Store(toks), nil
	}
	return loadText(d.Source, tok, newTextCache(d.CacheDir, log))
}

// checkTokens verifies that every token of a materialised store is below
// the model vocabulary.
func checkTokens(st store, cfg LoaderConfig) error {
	s, ok := st.(u16Store)
	if !ok {
		return nil // synthetic: drawn from [0, Vocab)
	}
	for i, t := range s {
		if int(t) >= cfg.Vocab {
			return fmt.Errorf("data: %s: token %d at index %d is outside the model vocab=%d", cfg.Data.Source, t, i, cfg.Vocab)
		}
	}
	return nil
}

// newLoader splits the store and sizes the epochs.
func newLoader(st store, tok Tokenizer, cfg LoaderConfig) (*Loader, error) {
	n, T := st.Len(), int64(cfg.SeqLen)
	nVal := int64(math.Round(cfg.Data.ValFraction * float64(n)))
	nTrain := n - nVal
	if nTrain < T+1 {
		return nil, fmt.Errorf("data: %s: training split has %d tokens, need at least seq_len+1=%d", cfg.Data.Source, nTrain, T+1)
	}
	if nVal > 0 && nVal < T+1 {
		return nil, fmt.Errorf("data: %s: validation split (val_fraction=%g) has %d tokens, need at least seq_len+1=%d; raise val_fraction or set it to 0",
			cfg.Data.Source, cfg.Data.ValFraction, nVal, T+1)
	}
	l := &Loader{
		tok: tok, seqLen: T, seed: cfg.Seed,
		train: span{st, 0, nTrain}, val: span{st, nTrain, nVal},
	}
	l.trainWindows = max(1, (nTrain-T)/T)
	l.maxShift = min(T-1, nTrain-1-l.trainWindows*T)
	if nVal > 0 {
		l.valWindows = (nVal - 1) / T
	}
	return l, nil
}

// Tokenizer decodes the tokens the loader serves.
func (l *Loader) Tokenizer() Tokenizer { return l.tok }

// SeqLen is T.
func (l *Loader) SeqLen() int { return int(l.seqLen) }

// TrainTokens and ValTokens are the sizes of the two splits in tokens.
func (l *Loader) TrainTokens() int64 { return l.train.n }
func (l *Loader) ValTokens() int64   { return l.val.n }

// TrainSamples is N, the training sequences per epoch; ValSamples the
// validation sequences (0 without a validation split).
func (l *Loader) TrainSamples() int64 { return l.trainWindows }
func (l *Loader) ValSamples() int64   { return l.valWindows }

// Epoch is the epoch that training sample g belongs to.
func (l *Loader) Epoch(g int64) int64 { return g / l.trainWindows }

// checkBatch validates a batch request of the token ranges rs of each
// sample (nil: all T).
func (l *Loader) checkBatch(first int64, n int, rs [][2]int, inputs, targets []int32) error {
	per := l.seqLen
	if rs != nil {
		per = 0
		for _, r := range rs {
			if r[0] < 0 || r[1] < r[0] || int64(r[1]) > l.seqLen {
				return fmt.Errorf("data: token range [%d, %d) outside a sample of %d tokens", r[0], r[1], l.seqLen)
			}
			per += int64(r[1] - r[0])
		}
	}
	need := int64(n) * per
	switch {
	case first < 0 || n < 0:
		return fmt.Errorf("data: batch of %d samples from %d: both must be >= 0", n, first)
	case int64(len(inputs)) < need || int64(len(targets)) < need:
		return fmt.Errorf("data: batch of %d×%d tokens: inputs have %d, targets %d", n, per, len(inputs), len(targets))
	}
	return nil
}

// readRanges reads sample i of a batch, which starts at token start of
// sp, into row i of inputs and targets: its tokens rs [lo, hi)
// back to back (nil: all T).
func (l *Loader) readRanges(sp span, i int, start int64, rs [][2]int, inputs, targets []int32) {
	T := int(l.seqLen)
	if rs == nil {
		sp.read(inputs[i*T:(i+1)*T], start)
		sp.read(targets[i*T:(i+1)*T], start+1)
		return
	}
	per := 0
	for _, r := range rs {
		per += r[1] - r[0]
	}
	at := i * per
	for _, r := range rs {
		n := r[1] - r[0]
		sp.read(inputs[at:at+n], start+int64(r[0]))
		sp.read(targets[at:at+n], start+int64(r[0])+1)
		at += n
	}
}

// Batch writes training samples first … first+n−1 as an (n, T) batch:
// inputs[i·T+t] is token t of sample first+i and targets[i·T+t] the token
// after it.
func (l *Loader) Batch(first int64, n int, inputs, targets []int32) error {
	return l.BatchRanges(first, n, nil, inputs, targets)
}

// BatchRanges is Batch reading only the token ranges rs [lo, hi) of each
// sample (nil: all of it), back to back in rs's order: an (n, Σ(hi−lo))
// batch — a context-parallel rank's share of the samples — whose tokens
// are those of Batch's rows at the same positions.
func (l *Loader) BatchRanges(first int64, n int, rs [][2]int, inputs, targets []int32) error {
	if err := l.checkBatch(first, n, rs, inputs, targets); err != nil {
		return err
	}
	T := l.seqLen
	epoch := int64(-1)
	var perm permutation
	var shift int64
	for i := int64(0); i < int64(n); i++ {
		g := first + i
		if e := g / l.trainWindows; e != epoch {
			epoch = e
			perm = newPermutation(uint64(l.trainWindows), l.seed, uint64(e))
			shift = int64(hash(l.seed, tagShift, uint64(e)) % uint64(l.maxShift+1))
		}
		start := shift + T*int64(perm.at(uint64(g%l.trainWindows)))
		l.readRanges(l.train, int(i), start, rs, inputs, targets)
	}
	return nil
}

// ValBatch writes validation samples first … first+n−1 (modulo
// ValSamples) as an (n, T) batch, like Batch.
func (l *Loader) ValBatch(first int64, n int, inputs, targets []int32) error {
	return l.ValBatchRanges(first, n, nil, inputs, targets)
}

// ValBatchRanges is ValBatch reading only the token ranges rs of each
// sample (BatchRanges).
func (l *Loader) ValBatchRanges(first int64, n int, rs [][2]int, inputs, targets []int32) error {
	if l.valWindows == 0 {
		return fmt.Errorf("data: no validation split (val_fraction=0)")
	}
	if err := l.checkBatch(first, n, rs, inputs, targets); err != nil {
		return err
	}
	T := l.seqLen
	for i := int64(0); i < int64(n); i++ {
		start := T * ((first + i) % l.valWindows)
		l.readRanges(l.val, int(i), start, rs, inputs, targets)
	}
	return nil
}
