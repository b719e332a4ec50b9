package guest

import (
	"bufio"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sync"

	"github.com/zeish/zeish/errdefs"
	"github.com/zeish/zeish/guest/desktop"
)

// One yamux stream carries one request. The host writes a JSON header line
// (request), then both sides exchange chunks:
//
//	kind u8 | length u32 | payload
//
// Simple calls answer with one result or error chunk. Streaming calls send
// data chunks and finish with an explicit eof/result/error chunk, so a stream
// that just ends (peer gone, call cancelled) is never mistaken for success.
const (
	chunkData    byte = 'd' // file bytes or stdin
	chunkEOF     byte = 'z' // end of the data chunks
	chunkStdout  byte = 'o'
	chunkStderr  byte = 'e'
	chunkStarted byte = 's' // exec: JSON {"pid":…}
	chunkResult  byte = 'r' // JSON result of the op
	chunkError   byte = 'x' // JSON wireError; ends the call
	chunkResize  byte = 'w' // terminal: JSON TermSize
	chunkSignal  byte = 'k' // terminal: a signal name for its foreground process group

	maxChunk       = 32 << 10
	maxChunkHeader = 5
	maxJSONChunk   = 16 << 20
)

// Operations.
const (
	opInfo      = "info"
	opConfigure = "configure"
	opExec      = "exec"
	opReadFile  = "read"
	opWriteFile = "write"
	opStat      = "stat"
	opList      = "list"
	opMkdir     = "mkdir"
	opRemove    = "remove"
	opProcesses = "ps"
	opKill      = "kill"
	opTerm      = "term"
	opAttach    = "term_attach"
	opTerms     = "term_list"
	opWatch     = "watch"
	opStats     = "stats"
	// The desktop (guest/desktop): an action, a screenshot, the status.
	opDesktop       = "desktop"
	opDesktopShot   = "desktop_shot"
	opDesktopStatus = "desktop_status"
)

// request is the header line of a stream.
type request struct {
	Op        string          `json:"op"`
	Path      string          `json:"path,omitempty"`
	Perm      uint32          `json:"perm,omitempty"`
	Parents   bool            `json:"parents,omitempty"`
	Recursive bool            `json:"recursive,omitempty"`
	PID       int             `json:"pid,omitempty"`
	Signal    string          `json:"signal,omitempty"`
	Group     bool            `json:"group,omitempty"` // kill: the process group of a running exec
	User      string          `json:"user,omitempty"`  // write: the file's owner (default Config.User)
	Exec      *ExecRequest    `json:"exec,omitempty"`
	Config    *Config         `json:"config,omitempty"`
	Term      *TermRequest    `json:"term,omitempty"`
	Size      *TermSize       `json:"size,omitempty"` // term_attach: resize on attach
	Desktop   *desktop.Action `json:"desktop,omitempty"`
	// Meta asks stat, list and write to read the files' user metadata.
	Meta bool `json:"meta,omitempty"`
	// Metadata is set on the file a write makes (FileInfo.Metadata).
	Metadata map[string]string `json:"metadata,omitempty"`
}

type started struct {
	PID int `json:"pid"`
}

// wireError carries an errdefs code across the channel.
type wireError struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

// toWire keeps the class of err (an errdefs sentinel wrapped in it, else
// internal) and its message.
func toWire(err error) wireError {
	return wireError{Code: errdefs.Of(err).Code, Message: err.Error()}
}

// fromWire rebuilds an error that errors.Is the same sentinel on the host.
func fromWire(w wireError) error {
	sentinel := errdefs.ByCode(w.Code)
	if sentinel == nil {
		sentinel = errdefs.ErrInternal
	}
	return &guestError{msg: w.Message, sentinel: sentinel}
}

type guestError struct {
	msg      string
	sentinel *errdefs.Error
}

func (e *guestError) Error() string { return e.msg }
func (e *guestError) Unwrap() error { return e.sentinel }

// chunkWriter writes chunks to a stream; safe for concurrent use so stdout
// and stderr of one exec can share a stream.
type chunkWriter struct {
	mu  sync.Mutex
	w   io.Writer
	buf []byte
}

// chunk sends p as chunks of at most maxChunk bytes, so stdout, stderr and
// file data interleave fairly on the stream.
func (cw *chunkWriter) chunk(kind byte, p []byte) error {
	cw.mu.Lock()
	defer cw.mu.Unlock()
	for first := true; first || len(p) > 0; first = false {
		n := min(len(p), maxChunk)
		if err := cw.write(kind, p[:n]); err != nil {
			return err
		}
		p = p[n:]
	}
	return nil
}

// json sends v as one chunk, never split: readers decode a result or an
// error from a single chunk (a long process list is well over maxChunk).
func (cw *chunkWriter) json(kind byte, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	if len(b) > maxJSONChunk {
		return fmt.Errorf("result of %d bytes: over the %d-byte limit", len(b), maxJSONChunk)
	}
	cw.mu.Lock()
	defer cw.mu.Unlock()
	return cw.write(kind, b)
}

func (cw *chunkWriter) write(kind byte, p []byte) error {
	cw.buf = append(cw.buf[:0], kind, 0, 0, 0, 0)
	binary.BigEndian.PutUint32(cw.buf[1:5], uint32(len(p)))
	cw.buf = append(cw.buf, p...)
	_, err := cw.w.Write(cw.buf)
	return err
}

func (cw *chunkWriter) fail(err error) error { return cw.json(chunkError, toWire(err)) }

// kindWriter is an io.Writer that sends everything as chunks of one kind.
type kindWriter struct {
	cw   *chunkWriter
	kind byte
}

func (k kindWriter) Write(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	if err := k.cw.chunk(k.kind, p); err != nil {
		return 0, err
	}
	return len(p), nil
}

// readChunk reads one chunk; buf is reused for its payload when big enough.
func readChunk(r *bufio.Reader, buf []byte) (byte, []byte, error) {
	kind, n, err := readChunkHeader(r)
	if err != nil {
		return 0, nil, err
	}
	return readChunkBody(r, buf, kind, n)
}

// readChunkHeader reads a chunk's kind and length and checks the length
// against the kind's limit: data and output travel in chunks of at most
// maxChunk, only a JSON result or error may be larger.
func readChunkHeader(r *bufio.Reader) (byte, int, error) {
	var hdr [maxChunkHeader]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return 0, 0, err
	}
	n := int(binary.BigEndian.Uint32(hdr[1:]))
	limit := maxJSONChunk
	switch hdr[0] {
	case chunkData, chunkStdout, chunkStderr, chunkEOF:
		limit = maxChunk
	}
	if n > limit {
		return 0, 0, fmt.Errorf("chunk %q of %d bytes: over its %d-byte limit", hdr[0], n, limit)
	}
	return hdr[0], n, nil
}

func readChunkBody(r *bufio.Reader, buf []byte, kind byte, n int) (byte, []byte, error) {
	if cap(buf) < n {
		buf = make([]byte, n)
	}
	buf = buf[:n]
	if _, err := io.ReadFull(r, buf); err != nil {
		return 0, nil, unexpected(err)
	}
	return kind, buf, nil
}

func unexpected(err error) error {
	if errors.Is(err, io.EOF) {
		return io.ErrUnexpectedEOF
	}
	return err
}
