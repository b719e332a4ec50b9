package sandbox

import (
	"errors"
	"strings"
	"testing"

	"github.com/zeish/zeish/errdefs"
)

// FuzzCheckName: a name CheckName accepts is a valid hostname label (it
// becomes the guest's hostname): 1-63 of [a-z0-9-], no '-' at either end.
// Anything else is invalid_argument.
func FuzzCheckName(f *testing.F) {
	for _, s := range []string{"a", "kid-1", "-a", "a-", "A", "a.b", "", strings.Repeat("a", 63), strings.Repeat("a", 64), "ä", "a\n", "a b"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, name string) {
		err := CheckName(name)
		if err != nil {
			if !errors.Is(err, errdefs.ErrInvalidArgument) {
				t.Fatalf("%q: %v, want invalid_argument", name, err)
			}
			return
		}
		if len(name) < 1 || len(name) > 63 || name[0] == '-' || name[len(name)-1] == '-' {
			t.Fatalf("accepted %q", name)
		}
		for _, c := range name {
			if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-') {
				t.Fatalf("accepted %q with %q", name, c)
			}
		}
	})
}

// FuzzCheckID: an accepted id is its prefix and 20 of [0-9a-z]; it can be
// used as a path element and in a socket name.
func FuzzCheckID(f *testing.F) {
	for _, s := range []string{NewID(PrefixSandbox), "sbx_", "sbx_../../../etc/passw", "sbx_AAAAAAAAAAAAAAAAAAAA", NewID(PrefixSnapshot)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, id string) {
		if err := CheckID(PrefixSandbox, id); err == nil {
			if len(id) != len(PrefixSandbox)+20 || strings.ContainsAny(id, "/.\x00 ") || !strings.HasPrefix(id, PrefixSandbox) {
				t.Fatalf("accepted %q", id)
			}
		} else if !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Fatalf("%q: %v", id, err)
		}
	})
}
