package zeish

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/zeish/zeish/api"
	"github.com/zeish/zeish/errdefs"
	"github.com/zeish/zeish/guest"
)

func ndjson(t *testing.T, events ...api.ExecEvent) string {
	t.Helper()
	var b strings.Builder
	for _, ev := range events {
		b.WriteString(mustJSON(t, ev) + "\n")
	}
	return b.String()
}

func TestExecStreamParsing(t *testing.T) {
	long := strings.Repeat("x", 1<<20) // longer than bufio.Scanner's default line limit
	tests := []struct {
		name             string
		stream           string
		wantOut, wantErr string
		wantResult       ExecResult
		wantErrIs        error
		wantErrContains  string
	}{
		{
			name: "interleaved output then exit",
			stream: ndjson(t,
				api.ExecEvent{Type: api.EventStdout, Data: []byte("hello ")},
				api.ExecEvent{Type: api.EventStderr, Data: []byte("warn\n")},
				api.ExecEvent{Type: api.EventStdout, Data: []byte("world\n")},
				api.ExecEvent{Type: api.EventExit, Result: &guest.ExecResult{ExitCode: 3, PID: 7}}),
			wantOut: "hello world\n", wantErr: "warn\n",
			wantResult: ExecResult{ExitCode: 3, PID: 7},
		},
		{
			name: "long chunk and unknown event type",
			stream: ndjson(t,
				api.ExecEvent{Type: "progress"},
				api.ExecEvent{Type: api.EventStdout, Data: []byte(long)},
				api.ExecEvent{Type: api.EventExit, Result: &guest.ExecResult{ExitCode: -1, Signal: "KILL", TimedOut: true}}),
			wantOut:    long,
			wantResult: ExecResult{ExitCode: -1, Signal: "KILL", TimedOut: true},
		},
		{
			name: "error event",
			stream: ndjson(t,
				api.ExecEvent{Type: api.EventError, Error: &api.ErrorDetail{Code: "file_not_found", Message: "no such command"}}),
			wantErrIs: errdefs.ErrFileNotFound, wantErrContains: "no such command",
		},
		{
			name:      "stream cut before exit",
			stream:    ndjson(t, api.ExecEvent{Type: api.EventStdout, Data: []byte("partial")}),
			wantOut:   "partial",
			wantErrIs: io.ErrUnexpectedEOF,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			res, err := readExecStream(strings.NewReader(tt.stream), &stdout, &stderr)
			if tt.wantErrIs != nil {
				if !errors.Is(err, tt.wantErrIs) || !strings.Contains(errString(err), tt.wantErrContains) {
					t.Fatalf("err %v, want %v containing %q", err, tt.wantErrIs, tt.wantErrContains)
				}
			} else if err != nil {
				t.Fatal(err)
			}
			if res != tt.wantResult {
				t.Errorf("result %+v, want %+v", res, tt.wantResult)
			}
			if stdout.String() != tt.wantOut || stderr.String() != tt.wantErr {
				t.Errorf("stdout %d bytes, stderr %q", stdout.Len(), stderr.String())
			}
		})
	}
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// signalWriter reports each write on a channel, so a test can see that output
// reached the caller before the process ended.
type signalWriter struct{ writes chan string }

func (w signalWriter) Write(p []byte) (int, error) { w.writes <- string(p); return len(p), nil }

func TestExecStreamsAsProduced(t *testing.T) {
	seen := make(chan struct{})
	var f *fakeServer
	f = newFake(t, map[string]http.HandlerFunc{
		"POST /api/v1/public/sandboxes/{id}/access": accessRoute(15 * time.Minute),
		"POST /data/v1/sandboxes/{id}/exec": func(w http.ResponseWriter, r *http.Request) {
			var req ExecRequest
			if err := json.NewDecoder(r.Body).Decode(&req); err != nil || req.Argv[0] != "sh" || string(req.Stdin) != "in" {
				http.Error(w, "bad request", 400)
				return
			}
			w.Header().Set("Content-Type", "application/x-ndjson")
			enc := json.NewEncoder(w)
			_ = enc.Encode(api.ExecEvent{Type: api.EventStdout, Data: []byte("first")})
			w.(http.Flusher).Flush()
			// The process "ends" only once the client has shown the first line.
			select {
			case <-seen:
			case <-time.After(5 * time.Second):
			}
			_ = enc.Encode(api.ExecEvent{Type: api.EventExit, Result: &guest.ExecResult{ExitCode: 0}})
		},
	})
	ctx := context.Background()
	conn, err := f.client().Connect(ctx, "sbx_1")
	if err != nil {
		t.Fatal(err)
	}
	out := signalWriter{writes: make(chan string, 4)}
	done := make(chan error, 1)
	go func() {
		_, err := conn.Exec(ctx, ExecRequest{Argv: []string{"sh", "-c", "x"}, Stdin: []byte("in")}, out, nil)
		done <- err
	}()
	select {
	case got := <-out.writes:
		if got != "first" {
			t.Errorf("first write %q", got)
		}
	case <-time.After(3 * time.Second):
		t.Fatal("stdout was not delivered before the process ended")
	}
	close(seen)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if rec := f.last(); rec.Auth != "Bearer tok-1" || rec.Path != "/data/v1/sandboxes/sbx_1/exec" {
		t.Errorf("exec request %+v", rec)
	}
}

func TestWriteFileStreams(t *testing.T) {
	firstChunk := make(chan struct{})
	var gotBody []byte
	f := newFake(t, map[string]http.HandlerFunc{
		"POST /api/v1/public/sandboxes/{id}/access": accessRoute(15 * time.Minute),
		"PUT /data/v1/sandboxes/{id}/files": func(w http.ResponseWriter, r *http.Request) {
			buf := make([]byte, 5)
			if _, err := io.ReadFull(r.Body, buf); err != nil {
				http.Error(w, err.Error(), 400)
				return
			}
			close(firstChunk) // the rest of the body does not exist yet
			rest, _ := io.ReadAll(r.Body)
			gotBody = append(buf, rest...)
			writeJSON(w, 200, FileInfo{Path: r.URL.Query().Get("path"), Size: int64(len(gotBody)), Perm: 0o755})
		},
	})
	ctx := context.Background()
	conn, err := f.client().Connect(ctx, "sbx_1")
	if err != nil {
		t.Fatal(err)
	}
	pr, pw := io.Pipe()
	go func() {
		_, _ = pw.Write([]byte("hello"))
		// A client that buffered the whole body would never send "hello",
		// the server would never get here, and the test would time out.
		select {
		case <-firstChunk:
			_, _ = pw.Write([]byte(" world"))
			_ = pw.Close()
		case <-time.After(5 * time.Second):
			pw.CloseWithError(errors.New("upload was buffered, not streamed"))
		}
	}()
	fi, err := conn.WriteFile(ctx, "/tmp/a b.txt", pr, 0o755)
	if err != nil {
		t.Fatal(err)
	}
	if string(gotBody) != "hello world" || fi.Size != 11 {
		t.Errorf("server got %q, info %+v", gotBody, fi)
	}
	if q := f.last().RawQuery; q != "mode=0755&path=%2Ftmp%2Fa+b.txt" {
		t.Errorf("query %q", q)
	}
}

func TestDataPlaneRequests(t *testing.T) {
	fi := FileInfo{Name: "a", Path: "/a", Size: 1}
	tests := []struct {
		name                string
		route               string
		status              int
		resp                any
		call                func(context.Context, *SandboxConn) error
		wantQuery, wantBody string
	}{
		{"stat", "GET /data/v1/sandboxes/{id}/files/stat", 200, fi,
			func(ctx context.Context, c *SandboxConn) error { _, err := c.Stat(ctx, "/a"); return err },
			"path=%2Fa", ""},
		{"list", "GET /data/v1/sandboxes/{id}/files/list", 200, api.FileList{Files: []FileInfo{fi}},
			func(ctx context.Context, c *SandboxConn) error {
				l, err := c.ListFiles(ctx, "/")
				if err == nil && len(l) != 1 {
					err = errors.New("want one file")
				}
				return err
			}, "path=%2F", ""},
		{"mkdir", "POST /data/v1/sandboxes/{id}/files/mkdir", 200, fi,
			func(ctx context.Context, c *SandboxConn) error { _, err := c.Mkdir(ctx, "/a/b", true); return err },
			"", `{"path":"/a/b","parents":true}`},
		{"remove recursive", "DELETE /data/v1/sandboxes/{id}/files", 204, nil,
			func(ctx context.Context, c *SandboxConn) error { return c.Remove(ctx, "/a", true) },
			"path=%2Fa&recursive=true", ""},
		{"processes", "GET /data/v1/sandboxes/{id}/processes", 200, api.ProcessList{Processes: []Process{{PID: 1}}},
			func(ctx context.Context, c *SandboxConn) error { _, err := c.Processes(ctx); return err }, "", ""},
		{"kill", "POST /data/v1/sandboxes/{id}/processes/{pid}/kill", 204, nil,
			func(ctx context.Context, c *SandboxConn) error { return c.Kill(ctx, 42, "TERM") },
			"", `{"signal":"TERM"}`},
		{"read", "GET /data/v1/sandboxes/{id}/files", 200, "content",
			func(ctx context.Context, c *SandboxConn) error {
				rc, err := c.ReadFile(ctx, "/a")
				if err != nil {
					return err
				}
				defer rc.Close()
				b, _ := io.ReadAll(rc)
				if string(b) != `"content"`+"\n" {
					return errors.New("read " + string(b))
				}
				return nil
			}, "path=%2Fa", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := reply(tt.status, tt.resp)
			if tt.status == 204 {
				h = func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(204) }
			}
			f := newFake(t, map[string]http.HandlerFunc{
				"POST /api/v1/public/sandboxes/{id}/access": accessRoute(15 * time.Minute),
				tt.route: h,
			})
			ctx := context.Background()
			conn, err := f.client().Connect(ctx, "sbx_1")
			if err != nil {
				t.Fatal(err)
			}
			if err := tt.call(ctx, conn); err != nil {
				t.Fatal(err)
			}
			rec := f.last()
			if rec.RawQuery != tt.wantQuery || !jsonEqual(t, rec.Body, tt.wantBody) || rec.Auth != "Bearer tok-1" {
				t.Errorf("request %+v", rec)
			}
		})
	}
}

func TestTokenRefresh(t *testing.T) {
	base := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	clock := base
	now = func() time.Time { return clock }
	t.Cleanup(func() { now = time.Now })

	expiredOnce := false
	f := newFake(t, map[string]http.HandlerFunc{
		"POST /api/v1/public/sandboxes/{id}/access": accessRoute(10 * time.Minute),
		"GET /data/v1/sandboxes/{id}/processes": func(w http.ResponseWriter, r *http.Request) {
			// tok-3 is rejected once, as a server with a faster clock would.
			if r.Header.Get("Authorization") == "Bearer tok-3" && !expiredOnce {
				expiredOnce = true
				writeJSON(w, 401, api.ErrorBody{Error: api.ErrorDetail{Code: "token_expired", Message: "expired"}})
				return
			}
			writeJSON(w, 200, api.ProcessList{})
		},
	})
	ctx := context.Background()
	conn, err := f.client().Connect(ctx, "sbx_1")
	if err != nil {
		t.Fatal(err)
	}
	steps := []struct {
		advance  time.Duration
		wantAuth string
	}{
		{0, "Bearer tok-1"},
		{8 * time.Minute, "Bearer tok-1"},  // 2 minutes left: still good
		{90 * time.Second, "Bearer tok-2"}, // 30 s left: renewed first
		{8 * time.Minute, "Bearer tok-2"},
		{2 * time.Minute, "Bearer tok-4"}, // tok-3 bounced as expired, renewed, retried
	}
	for i, s := range steps {
		clock = clock.Add(s.advance)
		if _, err := conn.Processes(ctx); err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
		if got := f.last().Auth; got != s.wantAuth {
			t.Errorf("step %d: used %q, want %q", i, got, s.wantAuth)
		}
	}
}
