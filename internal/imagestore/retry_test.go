package imagestore

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/zeish/zeish/errdefs"
	"github.com/zeish/zeish/internal/imagestore/blob"
)

// TestTransient: only a store that was away or full is worth retrying.
func TestTransient(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
		want bool
	}{
		{"none", nil, false},
		{"unreachable", blob.Errorf(blob.ErrUnreachable, "s3://b at x: put k"), true},
		{"credentials refused", blob.Errorf(blob.ErrAccessDenied, "s3://b at x: put k"), true},
		{"store full", blob.Errorf(blob.ErrFull, "s3://b at x: put k"), true},
		{"wrapped", fmt.Errorf("image i: %w", blob.Errorf(blob.ErrUnreachable, "x")), true},
		{"bad digest", blob.Errorf(blob.ErrBadDigest, "x"), false},
		{"a file gone", fmt.Errorf("read mem: %w: %w", errors.New("no such file"), errdefs.ErrNotFound), false},
		{"cancelled", context.Canceled, false},
	} {
		if got := Transient(tc.err); got != tc.want {
			t.Errorf("%s: Transient(%v) = %v, want %v", tc.name, tc.err, got, tc.want)
		}
	}
}

// TestRetryAfter: the wait doubles from a second and stops growing at its
// bound.
func TestRetryAfter(t *testing.T) {
	for attempt, want := range map[int]time.Duration{0: time.Second, 1: time.Second, 2: 2 * time.Second, 3: 4 * time.Second,
		4: 8 * time.Second, 5: 15 * time.Second, 100: 15 * time.Second} {
		if got := RetryAfter(attempt); got != want {
			t.Errorf("RetryAfter(%d) = %v, want %v", attempt, got, want)
		}
	}
}
