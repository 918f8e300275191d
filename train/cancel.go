package train

import (
	"context"
	"fmt"

	"trellis/model"
	"trellis/tensor"
)

// ctxParams is the strategy as the model sees it, checking the run's
// context before every unit's weights or gradients: a cancelled run
// (SIGINT, SIGTERM) stops between layers, not at the end of the step,
// whose length has no bound (long sequences, slow links, many
// micro-batches).
type ctxParams struct {
	model.Params
	ctx context.Context
}

func (c ctxParams) Weights(u int) (tensor.Buf, error) {
	if err := interrupted(c.ctx); err != nil {
		return tensor.Buf{}, err
	}
	return c.Params.Weights(u)
}

func (c ctxParams) Grads(u int) ([]float32, error) {
	if err := interrupted(c.ctx); err != nil {
		return nil, err
	}
	return c.Params.Grads(u)
}

// interrupted is nil while ctx is live, else an error that says the run
// was interrupted and matches context.Canceled (or DeadlineExceeded).
func interrupted(ctx context.Context) error {
	if ctx == nil || ctx.Err() == nil {
		return nil
	}
	return fmt.Errorf("train: interrupted: %w", context.Cause(ctx))
}

// units is the rank's strategy behind the cancellation check.
func (r *rank) units() model.Params {
	if r.ctx == nil {
		return r.st
	}
	return ctxParams{Params: r.st, ctx: r.ctx}
}
