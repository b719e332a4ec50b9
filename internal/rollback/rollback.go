// Package rollback runs the undo steps of a multi-step operation that failed
// half-way, so nothing half-made survives: each step registers its undo as it
// succeeds, and the whole stack is released once the operation is complete.
package rollback

import (
	"context"
	"errors"
)

// Stack holds undo steps in the order they were added.
type Stack struct {
	undo []func(context.Context) error
}

// Add registers the undo of a step that just succeeded.
func (s *Stack) Add(undo func(context.Context) error) { s.undo = append(s.undo, undo) }

// Release forgets every undo: the operation succeeded.
func (s *Stack) Release() { s.undo = nil }

// Run undoes every registered step, newest first, under a context that
// outlives the caller's (a cancelled request must still clean up), and returns
// the undo errors joined.
func (s *Stack) Run(ctx context.Context) error {
	ctx = context.WithoutCancel(ctx)
	var errs []error
	for i := len(s.undo) - 1; i >= 0; i-- {
		if err := s.undo[i](ctx); err != nil {
			errs = append(errs, err)
		}
	}
	s.undo = nil
	return errors.Join(errs...)
}

// OnError is for defer: it runs the stack if *errp is non-nil.
func (s *Stack) OnError(ctx context.Context, errp *error) {
	if *errp != nil {
		if uerr := s.Run(ctx); uerr != nil {
			*errp = errors.Join(*errp, uerr)
		}
	}
}
