package server

import (
	"bytes"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"
	"unicode"
	"unicode/utf8"

	"github.com/zeish/zeish/api"
	"github.com/zeish/zeish/errdefs"
	"github.com/zeish/zeish/internal/control"
	"github.com/zeish/zeish/sandbox"
)

// decoders are every request body the API takes, with the checks a handler
// runs on it before anything else: what a fuzzed body may reach.
var decoders = []func(r *httptestRequest) error{
	func(r *httptestRequest) error {
		var v api.CreateSandboxRequest
		if err := decode(r.req(), &v); err != nil {
			return err
		}
		if err := control.CheckEnv(v.Env); err != nil {
			return err
		}
		if v.Name != "" {
			return sandbox.CheckName(v.Name)
		}
		return nil
	},
	func(r *httptestRequest) error {
		var v api.CloneRequest
		if err := decode(r.req(), &v); err != nil {
			return err
		}
		kids, err := sandbox.ChildNames(v.Name, v.Count)
		if err == nil && (len(kids) < 1 || len(kids) > api.MaxCloneCount) {
			panic("ChildNames accepted a count outside its range")
		}
		return err
	},
	func(r *httptestRequest) error {
		var v api.CreateSnapshotRequest
		if err := decode(r.req(), &v); err != nil {
			return err
		}
		if v.Name != "" {
			return sandbox.CheckSnapshotName(v.Name)
		}
		return nil
	},
	func(r *httptestRequest) error {
		var v api.ExecRequest
		if err := decode(r.req(), &v); err != nil {
			return err
		}
		return control.CheckEnv(v.Env)
	},
	func(r *httptestRequest) error { var v api.AccessRequest; return decode(r.req(), &v) },
	func(r *httptestRequest) error { var v api.MkdirRequest; return decode(r.req(), &v) },
	func(r *httptestRequest) error { var v api.KillRequest; return decode(r.req(), &v) },
	func(r *httptestRequest) error { var v api.WaitRequest; return decode(r.req(), &v) },
	func(r *httptestRequest) error { var v api.CreateAccountRequest; return decode(r.req(), &v) },
}

type httptestRequest struct{ body []byte }

func (h *httptestRequest) req() *http.Request {
	return httptest.NewRequest("POST", "/", bytes.NewReader(h.body))
}

// FuzzRequestDecoders: any body, for any request type, either decodes and
// passes its checks or is refused as invalid_argument: never a panic, never
// another class (which would be a 5xx).
func FuzzRequestDecoders(f *testing.F) {
	for _, seed := range []string{
		``, `{}`, `null`, `[]`, `{"name":"a"}`, `{"count":50,"name":"kid"}`, `{"count":-1}`,
		`{"argv":["sh","-c","true"],"env":{"A":"b"}}`, `{"env":{"":"x"}}`, `{"name":"tab\there"}`,
		`{"name":"ok","colour":1}`, `{"a":1}{"b":2}`, `{"memory_mib":1e400}`, `{"name":"\ud800"}`,
		`{"pr_number":-5,"git_branch":"` + string(bytes.Repeat([]byte("b"), 300)) + `"}`,
	} {
		for i := range decoders {
			f.Add(uint8(i), []byte(seed))
		}
	}
	f.Fuzz(func(t *testing.T, which uint8, body []byte) {
		err := decoders[int(which)%len(decoders)](&httptestRequest{body})
		if err != nil && errdefs.Of(err).Class != errdefs.ClassInvalid {
			t.Fatalf("body %q: %v (class %v), want invalid_argument or success", body, err, errdefs.Of(err).Class)
		}
	})
}

// FuzzSnapshotName: an accepted snapshot name is 1-64 printable runes of
// valid UTF-8, so it is safe in logs, lists and terminals.
func FuzzSnapshotName(f *testing.F) {
	for _, s := range []string{"first", "", "tab\there", "\x1b[31mred", "é", "a\u202eb", string(bytes.Repeat([]byte("x"), 65)), "\xff"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, name string) {
		err := sandbox.CheckSnapshotName(name)
		if err != nil {
			if !errors.Is(err, errdefs.ErrInvalidArgument) {
				t.Fatalf("%q: %v", name, err)
			}
			return
		}
		if !utf8.ValidString(name) || utf8.RuneCountInString(name) < 1 || utf8.RuneCountInString(name) > 64 {
			t.Fatalf("accepted %q", name)
		}
		for _, c := range name {
			if !unicode.IsPrint(c) {
				t.Fatalf("accepted %q with %U", name, c)
			}
		}
	})
}
