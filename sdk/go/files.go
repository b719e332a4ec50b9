package zeish

import (
	"context"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"net/url"
	"strconv"

	"github.com/zeish/zeish/api"
)

func pathQuery(path string) url.Values { return url.Values{"path": {path}} }

// ReadFile opens a file in the sandbox for reading. The content is streamed
// from the guest as the caller reads; the caller must Close it.
func (sc *SandboxConn) ReadFile(ctx context.Context, path string) (io.ReadCloser, error) {
	return sc.send(ctx, request{method: http.MethodGet, query: pathQuery(path)}, "/files")
}

// WriteFile creates or replaces a file in the sandbox with what r yields,
// streamed: r is read as the upload goes and never held in memory whole.
// perm sets the permission bits (0: the server's default, 0644). WriteFile
// does not close r.
func (sc *SandboxConn) WriteFile(ctx context.Context, path string, r io.Reader, perm fs.FileMode) (FileInfo, error) {
	return sc.WriteFileAs(ctx, path, r, perm, "")
}

// WriteFileAs is WriteFile with the file owned by a guest user (a name,
// uid or user:group; "" is the template's default user, else root).
func (sc *SandboxConn) WriteFileAs(ctx context.Context, path string, r io.Reader, perm fs.FileMode, user string) (FileInfo, error) {
	q := pathQuery(path)
	if user != "" {
		q.Set("user", user)
	}
	if perm != 0 {
		q.Set("mode", fmt.Sprintf("%04o", uint32(perm.Perm())))
	}
	if r == nil {
		r = http.NoBody
	}
	var fi FileInfo
	err := sc.call(ctx, request{method: http.MethodPut, query: q, body: r}, "/files", &fi)
	return fi, err
}

// ListFiles lists a directory in the sandbox.
func (sc *SandboxConn) ListFiles(ctx context.Context, path string) ([]FileInfo, error) {
	var list api.FileList
	if err := sc.call(ctx, request{method: http.MethodGet, query: pathQuery(path)}, "/files/list", &list); err != nil {
		return nil, err
	}
	return list.Files, nil
}

// Stat describes one file in the sandbox; errdefs.ErrFileNotFound if absent.
func (sc *SandboxConn) Stat(ctx context.Context, path string) (FileInfo, error) {
	var fi FileInfo
	err := sc.call(ctx, request{method: http.MethodGet, query: pathQuery(path)}, "/files/stat", &fi)
	return fi, err
}

// Mkdir creates a directory in the sandbox; with parents, missing parents too
// and no error if it exists.
func (sc *SandboxConn) Mkdir(ctx context.Context, path string, parents bool) (FileInfo, error) {
	var fi FileInfo
	req := api.MkdirRequest{Path: path, Parents: parents}
	err := sc.call(ctx, request{method: http.MethodPost, json: req}, "/files/mkdir", &fi)
	return fi, err
}

// Remove deletes a file, or with recursive a directory and all it holds.
func (sc *SandboxConn) Remove(ctx context.Context, path string, recursive bool) error {
	q := pathQuery(path)
	if recursive {
		q.Set("recursive", "true")
	}
	return sc.call(ctx, request{method: http.MethodDelete, query: q}, "/files", nil)
}

// Processes lists the processes running in the sandbox.
func (sc *SandboxConn) Processes(ctx context.Context) ([]Process, error) {
	var list api.ProcessList
	if err := sc.call(ctx, request{method: http.MethodGet}, "/processes", &list); err != nil {
		return nil, err
	}
	return list.Processes, nil
}

// Kill sends signal (a name such as "TERM"; empty: "KILL") to process pid in
// the sandbox.
func (sc *SandboxConn) Kill(ctx context.Context, pid int, signal string) error {
	req := api.KillRequest{Signal: signal}
	return sc.call(ctx, request{method: http.MethodPost, json: req}, "/processes/"+strconv.Itoa(pid)+"/kill", nil)
}
