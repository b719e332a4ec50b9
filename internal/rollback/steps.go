package rollback

import (
	"context"
	"errors"
	"fmt"
)

// Step is one named step of an operation: Do does it and adds to undo what
// takes it back. An operation reads as its list of steps.
type Step struct {
	Name string
	Do   func(ctx context.Context, undo *Stack) error
	// AsIs passes the step's error on without its name: a refusal the
	// caller shows a client (a stable code and its own words) must not
	// read "records: …".
	AsIs bool
}

// Run runs steps in order. When one fails, the undo of every step done so
// far runs, newest first, and the error names the step that failed
// ("capture: …", unless the step says AsIs). On success nothing is undone.
func Run(ctx context.Context, steps ...Step) error {
	var undo Stack
	for _, s := range steps {
		if err := s.Do(ctx, &undo); err != nil {
			if !s.AsIs {
				err = fmt.Errorf("%s: %w", s.Name, err)
			}
			if uerr := undo.Run(ctx); uerr != nil {
				err = errors.Join(err, fmt.Errorf("undo: %w", uerr))
			}
			return err
		}
	}
	return nil
}
