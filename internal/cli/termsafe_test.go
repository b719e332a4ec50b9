package cli

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/zeish/zeish/api"
	"github.com/zeish/zeish/guest"
	"github.com/zeish/zeish/sandbox"
)

// evil holds what a terminal acts on: OSC (retitle), CSI (clear, move),
// a C1 CSI, BEL, a bidi override and a line break that would forge a row.
const evil = "x\x1b]0;pwned\x07\x1b[2J\u009b31m\u202e\ny"

// Tables and messages never pass terminal escapes through: sandbox names
// and reasons, file names, process command lines, API error messages. The
// bytes of an exec's output are the command's and pass as they are.
func TestCLIOutputEscapesTerminalControls(t *testing.T) {
	send := func(w http.ResponseWriter, status int, v any) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		json.NewEncoder(w).Encode(v)
	}
	hostile := sandbox.Sandbox{ID: "sbx_1", Name: evil, State: sandbox.StateError, StateReason: evil, Template: evil,
		CreatedAt: time.Now()}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /api/v1/public/sandboxes", func(w http.ResponseWriter, _ *http.Request) {
		send(w, 200, api.SandboxList{Sandboxes: []sandbox.Sandbox{hostile}})
	})
	mux.HandleFunc("GET /api/v1/public/sandboxes/{id}", func(w http.ResponseWriter, r *http.Request) {
		if r.PathValue("id") != "sbx_1" {
			send(w, 404, api.ErrorBody{Error: api.ErrorDetail{Code: "not_found", Message: "no sandbox " + evil}})
			return
		}
		send(w, 200, hostile)
	})
	mux.HandleFunc("POST /api/v1/public/sandboxes/{id}/access", func(w http.ResponseWriter, r *http.Request) {
		send(w, 200, api.Access{URL: "/data/v1/sandboxes/" + r.PathValue("id"), Token: "t", ExpiresAt: time.Now().Add(time.Hour)})
	})
	mux.HandleFunc("GET /data/v1/sandboxes/{id}/files/list", func(w http.ResponseWriter, _ *http.Request) {
		send(w, 200, api.FileList{Files: []guest.FileInfo{{Name: evil, Path: "/" + evil, Mode: "-rw-r--r--", Symlink: evil}}})
	})
	mux.HandleFunc("GET /data/v1/sandboxes/{id}/processes", func(w http.ResponseWriter, _ *http.Request) {
		send(w, 200, api.ProcessList{Processes: []guest.Process{{PID: 7, Command: evil}}})
	})
	mux.HandleFunc("POST /data/v1/sandboxes/{id}/exec", func(w http.ResponseWriter, _ *http.Request) {
		enc := json.NewEncoder(w)
		enc.Encode(api.ExecEvent{Type: api.EventStdout, Data: []byte(evil)})
		enc.Encode(api.ExecEvent{Type: api.EventExit, Result: &guest.ExecResult{PID: 9}})
	})
	srv := httptest.NewServer(mux)
	defer srv.Close()

	for _, tc := range []struct {
		args  []string
		table bool // a line break in a cell would forge a row (a message may have several lines)
	}{
		{[]string{"sandboxes", "list"}, true},
		{[]string{"sandboxes", "get", "sbx_1"}, true},
		{[]string{"sandboxes", "get", "sbx_9"}, false},
		{[]string{"files", "ls", "sbx_1", "/"}, true},
		{[]string{"processes", "list", "sbx_1"}, true},
	} {
		args := tc.args
		r := zeishctl(t, srv.URL, nil, args...)
		out := r.stdout + r.stderr
		if strings.ContainsAny(out, "\x1b\x07\u009b\u202e") {
			t.Errorf("%v printed terminal controls: %q", args, out)
		}
		if !strings.Contains(out, `x\x1b]0;pwned\x07`) {
			t.Errorf("%v: the escaped text is not shown: %q", args, out)
		}
		if tc.table && strings.Contains(out, "\ny") {
			t.Errorf("%v: a name's line break reached the output: %q", args, out)
		}
	}
	if r := zeishctl(t, srv.URL, nil, "exec", "sbx_1", "--", "x"); r.stdout != evil {
		t.Errorf("exec output: %q, want the command's bytes as they are", r.stdout)
	}
}

func TestTermSafe(t *testing.T) {
	cases := []struct{ in, want string }{
		{"plain name-1", "plain name-1"},
		{"café → ├─ 日本", "café → ├─ 日本"},
		{"a\x1b[31mb", `a\x1b[31mb`},
		{"tab\tnew\nline\r", `tab\tnew\nline\r`},
		{"del\x7f c1\u0085", `del\x7f c1\x85`},
		{"bad\xffutf8", `bad\xffutf8`},
		{"rlo\u202eevil", `rlo\u202eevil`},
	}
	for _, c := range cases {
		if got := termSafe(c.in); got != c.want {
			t.Errorf("termSafe(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}
