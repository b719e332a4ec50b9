package errdefs

import (
	"errors"
	"fmt"
	"net/http"
	"testing"

	"connectrpc.com/connect"
)

// The table, row by row: what each class is on every wire.
func TestWireTable(t *testing.T) {
	rows := []struct {
		class   Class
		http    int
		rpc     connect.Code
		envd    int
		generic *Error
	}{
		{ClassInternal, 500, connect.CodeInternal, 500, ErrInternal},
		{ClassInvalid, 400, connect.CodeInvalidArgument, 400, ErrInvalidArgument},
		{ClassUnauthenticated, 401, connect.CodeUnauthenticated, 401, ErrUnauthenticated},
		{ClassPermissionDenied, 403, connect.CodePermissionDenied, 403, ErrForbidden},
		{ClassNotFound, 404, connect.CodeNotFound, 404, ErrNotFound},
		{ClassConflict, 409, connect.CodeFailedPrecondition, 409, ErrInvalidState},
		{ClassExists, 409, connect.CodeAlreadyExists, 409, ErrNameTaken},
		{ClassRateLimited, 429, connect.CodeResourceExhausted, 429, ErrRateLimited},
		{ClassUnavailable, 503, connect.CodeUnavailable, 502, ErrUnavailable},
		{ClassTooLarge, 413, connect.CodeResourceExhausted, 413, ErrUploadTooLarge},
	}
	if len(rows) != len(Classes()) {
		t.Fatalf("%d rows for %d classes", len(rows), len(Classes()))
	}
	for _, r := range rows {
		w := WireOf(r.class)
		if w.HTTP != r.http || connect.Code(w.RPC) != r.rpc || w.Envd != r.envd || w.Generic != r.generic {
			t.Errorf("class %d: %+v, want %d %s %d %s", r.class, w, r.http, r.rpc, r.envd, r.generic.Code)
		}
		if r.generic.Class != r.class {
			t.Errorf("class %d: generic code %s is of class %d", r.class, r.generic.Code, r.generic.Class)
		}
	}
}

// Every class is used deliberately: each has codes, and each code's class
// has a row.
func TestEveryClassHasCodes(t *testing.T) {
	used := map[Class]int{}
	for _, e := range All() {
		if e.Class < 0 || int(e.Class) >= len(Classes()) {
			t.Errorf("code %s: class %d has no row in the table", e.Code, e.Class)
		}
		used[e.Class]++
	}
	for _, c := range Classes() {
		if used[c] == 0 {
			t.Errorf("class %d has no code: remove it or give it one", c)
		}
	}
}

func TestFromHTTPStatus(t *testing.T) {
	for status, want := range map[int]*Error{
		400: ErrInvalidArgument, 401: ErrUnauthenticated, 403: ErrForbidden, 404: ErrNotFound, 409: ErrInvalidState,
		413: ErrUploadTooLarge, 429: ErrRateLimited, 503: ErrUnavailable, 502: ErrUnavailable, 504: ErrTimeout, 500: ErrInternal, 418: ErrInternal,
	} {
		if got := FromHTTPStatus(status); got != want {
			t.Errorf("%d: %s, want %s", status, got.Code, want.Code)
		}
	}
}

func TestPublic(t *testing.T) {
	cases := []struct {
		err        error
		code, text string
	}{
		{fmt.Errorf("sandbox %q: %w", "a", ErrNameTaken), "name_taken", `sandbox "a"`},
		{fmt.Errorf("qemu: /dev/shm/x: no space: %w", ErrInternal), "internal", serverMessages[ErrInternal]},
		{errors.New("a bare error"), "internal", serverMessages[ErrInternal]},
		{fmt.Errorf("guest: %w", ErrTimeout), "timeout", serverMessages[ErrTimeout]},
		{Reclass(fmt.Errorf("vm: %w", ErrInvalidArgument), ErrInternal), "internal", serverMessages[ErrInternal]},
	}
	for _, c := range cases {
		code, text := Public(c.err)
		if code != c.code || text != c.text {
			t.Errorf("%v: %s %q, want %s %q", c.err, code, text, c.code, c.text)
		}
	}
	if HTTPStatus(ErrTimeout) != http.StatusServiceUnavailable || !ServerFault(ErrTimeout) || ServerFault(ErrNodeFull) {
		t.Error("timeout is the server's 503; node_full the caller's 409")
	}
}
