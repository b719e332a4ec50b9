package imagestore

import (
	"time"

	"github.com/zeish/zeish/errdefs"
)

// An upload that failed because the store was away (unreachable, refusing
// the keys, or out of room) may succeed as it is once the store is back;
// one that failed for any other reason (its files gone, a damaged read)
// never will. The nodes retry the first kind in the background, so a
// capture made while the store was down becomes durable once it is back
// (docs/images.md, "When the store is away").

// retryFirst and retryMax bound the wait before a retry: it doubles from
// the first to the last.
const (
	retryFirst = time.Second
	retryMax   = 15 * time.Second
)

// Transient reports whether a failed upload may succeed when retried as it
// is: the store was unavailable or full.
func Transient(err error) bool {
	return err != nil && (errdefs.Is(err, errdefs.ClassUnavailable) || errdefs.Of(err) == errdefs.ErrStorageFull)
}

// RetryAfter is how long to wait before retry number attempt (from 1) of
// an upload that failed transiently.
func RetryAfter(attempt int) time.Duration {
	d := retryFirst
	for i := 1; i < attempt && d < retryMax; i++ {
		d *= 2
	}
	return min(d, retryMax)
}
