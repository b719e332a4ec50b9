package server

import (
	"errors"
	"testing"

	"github.com/zeish/zeish/api"
	"github.com/zeish/zeish/errdefs"
)

// FuzzTermControl feeds a terminal WebSocket's client text messages to
// their decoder: never a panic; a message is a resize or a signal, or it
// is invalid_argument.
func FuzzTermControl(f *testing.F) {
	for _, s := range []string{`{"type":"resize","rows":24,"cols":80}`, `{"type":"signal","signal":"INT"}`,
		`{"type":"resize","rows":-1,"cols":1e99}`, `{"type":"other"}`, `[]`, `{"type":"resize"`, "", `null`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, p []byte) {
		m, err := decodeTermControl(p)
		if err != nil {
			if !errors.Is(err, errdefs.ErrInvalidArgument) {
				t.Fatalf("%q: %v is not invalid_argument", p, err)
			}
			return
		}
		if m.Type != api.TermControlResize && m.Type != api.TermControlSignal {
			t.Fatalf("%q: accepted type %q", p, m.Type)
		}
	})
}
