package qemu

import "errors"

// rollback is an undo stack for multi-step creation: each step pushes its
// undo right before doing the thing it undoes; run undoes in reverse order
// unless release was called after the last step succeeded.
type rollback struct {
	undo []func() error
}

func (r *rollback) push(f func() error) { r.undo = append(r.undo, f) }

func (r *rollback) release() { r.undo = nil }

// run undoes every pushed step, newest first, and reports what failed.
func (r *rollback) run() error {
	var errs []error
	for i := len(r.undo) - 1; i >= 0; i-- {
		if err := r.undo[i](); err != nil {
			errs = append(errs, err)
		}
	}
	r.undo = nil
	return errors.Join(errs...)
}
