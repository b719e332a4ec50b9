// Package blob is the seam between the image store and where its bytes live:
// a flat namespace of immutable objects that can be put whole, read by
// range, listed by prefix and deleted. Two backends implement it: a folder
// (folder/) and any S3-compatible object store (s3/). Every backend checks
// a put against the SHA-256 the caller names, so bytes damaged on the way
// in are refused, not stored.
package blob

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"time"

	"github.com/zeish/zeish/errdefs"
)

// Backend stores objects under keys made of [a-z0-9/._-].
type Backend interface {
	// Put stores body under key, replacing any object there. sum is the
	// SHA-256 of body: the backend refuses (ErrBadDigest) a body that does
	// not match it when the bytes arrive. A reader never sees a part of a
	// put: an object is there whole or not at all.
	Put(ctx context.Context, key string, body []byte, sum [sha256.Size]byte) error
	// Get reads n bytes of key from off (n < 0: to the end). Fewer bytes
	// than asked (the object is shorter) is not an error; the caller,
	// which knows the length it expects, decides.
	Get(ctx context.Context, key string, off, n int64) ([]byte, error)
	// Stat says whether key exists, its size and when it was last put.
	Stat(ctx context.Context, key string) (Info, error)
	// List calls fn for every object whose key starts with prefix, in no
	// particular order; an error from fn stops it.
	List(ctx context.Context, prefix string, fn func(Info) error) error
	// Delete removes key; a missing key is not an error.
	Delete(ctx context.Context, key string) error
	// String names the backend for messages ("s3://bucket/prefix at
	// http://127.0.0.1:9000", "folder /srv/images"), never with secrets.
	String() string
}

// Info describes one stored object.
type Info struct {
	Key     string
	Size    int64
	ModTime time.Time // when it was put, by the backend's clock
}

// What went wrong, in words that hold for every backend. Errors wrap one
// of these and the errdefs class callers map to a status.
var (
	ErrNotFound     = errors.New("no such object")
	ErrAccessDenied = errors.New("the store refused the credentials")
	ErrUnreachable  = errors.New("the store cannot be reached")
	ErrBadDigest    = errors.New("the content does not match its SHA-256")
	ErrFull         = errors.New("no space left")
)

// classOf is the errdefs class each kind travels with.
var classOf = map[error]*errdefs.Error{
	ErrNotFound:     errdefs.ErrNotFound,
	ErrAccessDenied: errdefs.ErrUnavailable,
	ErrUnreachable:  errdefs.ErrUnavailable,
	ErrBadDigest:    errdefs.ErrInternal,
	ErrFull:         errdefs.ErrStorageFull,
}

// Errorf wraps kind (one of the Err values above) with its errdefs class
// and a message saying where and what.
func Errorf(kind error, format string, args ...any) error {
	class := classOf[kind]
	if class == nil {
		class = errdefs.ErrInternal
	}
	return fmt.Errorf("%s: %w (%w)", fmt.Sprintf(format, args...), kind, class)
}
