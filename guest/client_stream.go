package guest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"time"

	"github.com/zeish/zeish/errdefs"
)

// Exec runs argv in the guest. stdin may be nil; stdout and stderr (nil:
// discarded) receive output as it is produced, kept apart. Cancelling ctx
// kills the guest process group. If the channel breaks, the process keeps
// running in the guest and its output is lost.
func (c *Client) Exec(ctx context.Context, req ExecRequest, stdin io.Reader, stdout, stderr io.Writer) (ExecResult, error) {
	cl, err := c.start(ctx, request{Op: opExec, Exec: &req})
	if err != nil {
		return ExecResult{}, err
	}
	defer cl.close()
	// stdin is pumped concurrently; the pump is not waited for, since a
	// caller's reader (a terminal, say) may block long after the process ended.
	go func() {
		if stdin != nil {
			if _, err := io.Copy(kindWriter{cl.w, chunkData}, onlyReader{stdin}); err != nil {
				c.log.Debug("exec stdin", "err", err)
			}
		}
		cl.w.chunk(chunkEOF, nil)
	}()
	pid := 0
	for {
		kind, p, err := cl.next()
		if err != nil {
			if ctx.Err() != nil && pid > 0 {
				// The guest also kills when it sees the stream end, but it
				// cannot see that while it is blocked feeding stdin to a
				// process that does not read it; a separate request can.
				go c.killExec(pid)
			}
			return ExecResult{}, err
		}
		switch kind {
		case chunkStarted:
			var s started
			if json.Unmarshal(p, &s) == nil {
				pid = s.PID
			}
		case chunkStdout:
			if stdout != nil {
				stdout.Write(p)
			}
		case chunkStderr:
			if stderr != nil {
				stderr.Write(p)
			}
		case chunkResult:
			var res ExecResult
			if err := json.Unmarshal(p, &res); err != nil {
				return res, fmt.Errorf("exec: decode result: %v: %w", err, errdefs.ErrInternal)
			}
			return res, nil
		default:
			return ExecResult{}, fmt.Errorf("exec: unexpected chunk %q: %w", kind, errdefs.ErrInternal)
		}
	}
}

// killExec kills the process group of a cancelled exec. The guest only
// signals a group it is still waiting for, so a recycled pid is safe.
func (c *Client) killExec(pid int) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err := c.roundTrip(ctx, request{Op: opKill, PID: pid, Signal: "KILL", Group: true}, nil)
	if err != nil && !errors.Is(err, errdefs.ErrNotFound) {
		c.log.Debug("kill cancelled exec", "pid", pid, "err", err)
	}
}

// onlyReader hides WriterTo/ReaderFrom so io.Copy reads in small pieces and
// the chunks go out as the data becomes available.
type onlyReader struct{ r io.Reader }

func (o onlyReader) Read(p []byte) (int, error) { return o.r.Read(p) }

// ReadFile streams a guest file. ctx bounds the whole read, not just the
// opening; the caller must Close the reader.
func (c *Client) ReadFile(ctx context.Context, path string) (io.ReadCloser, FileInfo, error) {
	cl, err := c.start(ctx, request{Op: opReadFile, Path: path})
	if err != nil {
		return nil, FileInfo{}, err
	}
	var fi FileInfo
	if err := cl.result(&fi); err != nil {
		cl.close()
		return nil, FileInfo{}, err
	}
	return &fileReader{cl: cl}, fi, nil
}

type fileReader struct {
	cl      *call
	pending []byte
	err     error
}

func (f *fileReader) Read(p []byte) (int, error) {
	for len(f.pending) == 0 {
		if f.err != nil {
			return 0, f.err
		}
		kind, data, err := f.cl.next()
		switch {
		case err != nil:
			f.err = err
		case kind == chunkData:
			f.pending = data
		case kind == chunkEOF:
			f.err = io.EOF
		default:
			f.err = fmt.Errorf("read file: unexpected chunk %q: %w", kind, errdefs.ErrInternal)
		}
	}
	n := copy(p, f.pending)
	f.pending = f.pending[n:]
	return n, nil
}

func (f *fileReader) Close() error {
	f.cl.close()
	return nil
}

// WriteFile streams r into path (perm 0: 0644), creating parent directories.
// The file appears atomically (temp file + rename) only if all of r arrived.
func (c *Client) WriteFile(ctx context.Context, path string, perm os.FileMode, r io.Reader) (FileInfo, error) {
	return c.WriteFileAs(ctx, path, perm, "", r)
}

// WriteFileAs is WriteFile with the file owned by a guest user ("" is the
// template's default user).
func (c *Client) WriteFileAs(ctx context.Context, path string, perm os.FileMode, user string, r io.Reader) (FileInfo, error) {
	return c.WriteFileWith(ctx, path, WriteOptions{Perm: perm, User: user}, r)
}

// WriteOptions are WriteFileWith's.
type WriteOptions struct {
	Perm os.FileMode // 0: 0644
	User string      // the owner; "" is the template's default user
	// Metadata is the new file's user metadata (CheckMetadata's rules); the
	// answer's FileInfo.Metadata reads back what the file system kept. An
	// agent older than metadata keeps none.
	Metadata map[string]string
}

// WriteFileWith is WriteFile with the options of opts.
func (c *Client) WriteFileWith(ctx context.Context, path string, opts WriteOptions, r io.Reader) (FileInfo, error) {
	if err := CheckMetadata(opts.Metadata); err != nil {
		return FileInfo{}, err
	}
	cl, err := c.start(ctx, request{Op: opWriteFile, Path: path, Perm: fileModePerm(opts.Perm), User: opts.User,
		Metadata: opts.Metadata, Meta: len(opts.Metadata) > 0})
	if err != nil {
		return FileInfo{}, err
	}
	defer cl.close()
	src := &trackedReader{r: r}
	go func() {
		if _, err := io.Copy(kindWriter{cl.w, chunkData}, src); err != nil {
			// Without an EOF chunk the guest discards the temp file.
			cl.st.Close()
			return
		}
		cl.w.chunk(chunkEOF, nil)
	}()
	var fi FileInfo
	if err := cl.result(&fi); err != nil {
		if srcErr := src.error(); srcErr != nil {
			return FileInfo{}, fmt.Errorf("write %s: reading source: %w", path, srcErr)
		}
		return FileInfo{}, err
	}
	return fi, nil
}

// trackedReader remembers the source's own error, to tell it apart from a
// failure of the channel.
type trackedReader struct {
	r   io.Reader
	mu  sync.Mutex
	err error
}

func (t *trackedReader) Read(p []byte) (int, error) {
	n, err := t.r.Read(p)
	if err != nil && err != io.EOF {
		t.mu.Lock()
		t.err = err
		t.mu.Unlock()
	}
	return n, err
}

func (t *trackedReader) error() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.err
}
