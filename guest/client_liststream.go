package guest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"github.com/zeish/zeish/errdefs"
)

// A list or ps reply is one JSON array in one result chunk (up to
// maxJSONChunk). List and Processes read it whole and decode it whole; a
// server answering a client does not need either: ListEach and
// ProcessesEach decode the array entry by entry straight off the stream and
// hand each one on, so the host holds one entry (and a read buffer) per
// call, whatever the reply's size or shape ("{}" × millions included). The
// guest is unchanged: the wire format is the same.

// maxStreamedEntry bounds one entry of a streamed reply: a file name is at
// most 255 bytes and a path 4096; a command line (argv) at most ARG_MAX,
// 2 MiB by default. The decoder reads at most streamRead at a time, so it
// holds at most about twice an entry; a call whose entries grow past
// bigReply holds entryBudget of replyBudget until it ends, so the budget
// bounds many such calls as it bounds whole replies.
const (
	maxStreamedEntry = 4 << 20
	streamRead       = 64 << 10
	entryBudget      = 2 * (maxStreamedEntry + streamRead)
)

var errEntryTooLarge = errors.New("one entry of the reply is over its size limit")

// ListEach calls fn with each entry of directory path as it arrives. An
// error of fn ends the call and is returned.
func (c *Client) ListEach(ctx context.Context, path string, fn func(FileInfo) error) error {
	return streamArray(ctx, c, request{Op: opList, Path: path}, fn)
}

// ProcessesEach calls fn with each of the guest's processes as it arrives.
func (c *Client) ProcessesEach(ctx context.Context, fn func(Process) error) error {
	return streamArray(ctx, c, request{Op: opProcesses}, fn)
}

// streamArray makes the call req, whose result is a JSON array (or null),
// and decodes it one element at a time into fn.
func streamArray[T any](ctx context.Context, c *Client, req request, fn func(T) error) error {
	cl, err := c.start(ctx, req)
	if err != nil {
		return err
	}
	defer cl.close()
	kind, n, err := readChunkHeader(cl.r)
	if err != nil {
		return c.transportErr(ctx, req.Op, err)
	}
	if kind != chunkResult {
		if _, _, err := cl.body(kind, n); err != nil {
			return err // the guest's error
		}
		return fmt.Errorf("guest %s: unexpected chunk %q: %w", req.Op, kind, errdefs.ErrInternal)
	}
	body := &entryLimiter{r: io.LimitReader(cl.r, int64(n)), big: func() error {
		if err := replyBudget.Acquire(ctx, entryBudget); err != nil {
			return err
		}
		cl.held = entryBudget // given back at close
		return nil
	}}
	err = decodeArray(json.NewDecoder(body), body, fn)
	var stopped stopErr
	switch {
	case err == nil:
		return nil // the array and nothing but blanks after it: the chunk is read
	case errors.As(err, &stopped):
		return stopped.err
	case errors.Is(err, errEntryTooLarge):
		return fmt.Errorf("guest %s: %v (%d bytes): %w", req.Op, err, maxStreamedEntry, errdefs.ErrLimitReached)
	case body.err != nil:
		return c.transportErr(ctx, req.Op, body.err)
	}
	return fmt.Errorf("guest %s: decode result: %v: %w", req.Op, err, errdefs.ErrInternal)
}

// stopErr carries an error of the caller's fn, returned as it is.
type stopErr struct{ err error }

func (e stopErr) Error() string { return e.err.Error() }

// decodeArray decodes a JSON array (or null) from dec element by element.
func decodeArray[T any](dec *json.Decoder, body *entryLimiter, fn func(T) error) error {
	tok, err := dec.Token()
	if err != nil {
		return err
	}
	if tok == nil {
		return trailing(dec) // null: no entries
	}
	if d, ok := tok.(json.Delim); !ok || d != '[' {
		return fmt.Errorf("want an array, got %v", tok)
	}
	for dec.More() {
		body.reset()
		var v T
		if err := dec.Decode(&v); err != nil {
			return err
		}
		if err := fn(v); err != nil {
			return stopErr{err}
		}
	}
	if _, err := dec.Token(); err != nil { // ']'
		return err
	}
	return trailing(dec)
}

// trailing checks nothing but blanks follows the array.
func trailing(dec *json.Decoder) error {
	if _, err := dec.Token(); err != io.EOF {
		if err == nil {
			err = errors.New("data after the array")
		}
		return err
	}
	return nil
}

// entryLimiter reads a chunk's body for a json.Decoder, streamRead at a
// time, failing once more than maxStreamedEntry (plus one read ahead) was
// read since the last entry began; big is called once, when an entry first
// passes bigReply. It keeps a read error of the stream itself.
type entryLimiter struct {
	r     io.Reader
	big   func() error
	since int
	err   error
}

func (l *entryLimiter) reset() { l.since = 0 }

func (l *entryLimiter) Read(p []byte) (int, error) {
	if l.since > maxStreamedEntry+streamRead {
		return 0, errEntryTooLarge
	}
	if l.since > bigReply && l.big != nil {
		big := l.big
		l.big = nil
		if err := big(); err != nil {
			l.err = err
			return 0, err
		}
	}
	n, err := l.r.Read(p[:min(len(p), streamRead)])
	l.since += n
	if err != nil && err != io.EOF {
		l.err = err
	}
	return n, err
}
