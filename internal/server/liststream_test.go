package server

import (
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/zeish/zeish/api"
	"github.com/zeish/zeish/errdefs"
	"github.com/zeish/zeish/guest"
)

// streamList writes the shape writeJSON wrote (api.FileList), entry by
// entry; an error before the first entry is an ordinary error reply, one
// after it cuts the response.
func TestStreamList(t *testing.T) {
	names := func(n int) []guest.FileInfo {
		var out []guest.FileInfo
		for i := range n {
			out = append(out, guest.FileInfo{Name: string(rune('a' + i%26)), Path: "/x"})
		}
		return out
	}
	for _, tc := range []struct {
		name    string
		entries []guest.FileInfo
		failAt  int // -1: no failure
		status  int
		cut     bool
	}{
		{"entries", names(3), -1, 200, false},
		{"many", names(10_000), -1, 200, false},
		{"empty", nil, -1, 200, false},
		{"error first", names(3), 0, 404, false},
		{"error midway", names(3), 2, 200, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := httptest.NewRecorder()
			req := httptest.NewRequest("GET", "/files/list?path=/x", nil)
			cut := false
			func() {
				defer func() {
					if p := recover(); p != nil {
						if p != http.ErrAbortHandler {
							panic(p)
						}
						cut = true
					}
				}()
				streamList(rec, req, "files", func(fn func(guest.FileInfo) error) error {
					for i, e := range tc.entries {
						if i == tc.failAt {
							return errors.Join(errors.New("gone"), errdefs.ErrNotFound)
						}
						if err := fn(e); err != nil {
							return err
						}
					}
					return nil
				})
			}()
			if rec.Code != tc.status || cut != tc.cut {
				t.Fatalf("status %d, cut %v; want %d, %v", rec.Code, cut, tc.status, tc.cut)
			}
			if tc.status != 200 || tc.cut {
				return
			}
			var got api.FileList
			if err := json.Unmarshal(rec.Body.Bytes(), &got); err != nil || got.Files == nil || len(got.Files) != len(tc.entries) {
				t.Fatalf("body %.200q: %d entries, %v; want %d", rec.Body.String(), len(got.Files), err, len(tc.entries))
			}
			if rec.Header().Get("Content-Type") != "application/json" {
				t.Errorf("content type %q", rec.Header().Get("Content-Type"))
			}
		})
	}
}
