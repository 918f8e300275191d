package train

import (
	"fmt"

	"trellis/data"
)

// checkVocab holds the vocabulary rule for every data source: the data's
// tokens must be embeddable (for text and the embedded corpus, the
// tokenizer's whole vocabulary must fit model.vocab; token files are
// checked token by token when loaded), and the printed samples' prompt must
// encode to tokens below model.vocab. Samples draw from the ids both the
// model and the tokenizer know (see Generate), so synthetic data may use a
// vocabulary of any size.
func (j Job) checkVocab() error {
	if j.Data.Source != data.SourceSynthetic {
		if err := j.Data.CheckVocab(j.Model.Vocab); err != nil {
			return err
		}
	}
	if j.Train.SampleEvery < 0 || j.Train.SampleLen == 0 {
		return nil
	}
	tok, err := data.NewTokenizer(j.Data.Tokenizer)
	if err != nil {
		return err
	}
	return checkPrompt(tok, j.Train.Prompt, j.Model.Vocab, "train.prompt")
}

// checkPrompt requires every token of prompt to be below vocab.
func checkPrompt(tok data.Tokenizer, prompt string, vocab int, field string) error {
	for _, id := range tok.Encode(prompt) {
		if int(id) >= vocab {
			return fmt.Errorf("%s=%q encodes (tokenizer %s) to token %d, outside model.vocab=%d: choose another prompt or a larger vocabulary",
				field, prompt, tok.Name(), id, vocab)
		}
	}
	return nil
}

// Normalized is the job as it runs: a plan that names mbs sets
// train.micro_batch (the plan is the more specific statement of the two).
func (j Job) Normalized() (Job, error) {
	p, err := j.EnginePlan()
	if err != nil {
		return j, err
	}
	j.Train.MicroBatch = p.MBS
	return j, nil
}
