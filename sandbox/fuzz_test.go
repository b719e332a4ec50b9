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

// FuzzParseRule: an allow or deny entry parses to exactly one of a masked
// IPv4 prefix or a lower-case domain without a trailing dot, or fails; a
// domain rule matches its own name (exact) or the names below it
// (wildcard), never a name that merely ends like it; Matches never panics.
func FuzzParseRule(f *testing.F) {
	for _, s := range []string{"10.0.0.0/8", "1.2.3.4", "1.2.3.4/33", "example.com", "*.Example.COM.", "*.com", "a.*.b", "::1", "", " x.y ", "300.1.1.1"} {
		f.Add(s, "www.example.com")
	}
	f.Fuzz(func(t *testing.T, s, name string) {
		r, err := ParseRule(s)
		if err != nil {
			return
		}
		switch {
		case r.Domain == "" && !r.Prefix.IsValid(), r.Domain != "" && r.Prefix.IsValid():
			t.Fatalf("%q: %+v is not exactly one of a prefix or a domain", s, r)
		case r.Prefix.IsValid() && (!r.Prefix.Addr().Is4() || r.Prefix != r.Prefix.Masked()):
			t.Fatalf("%q: prefix %s", s, r.Prefix)
		case r.Domain != "" && (r.Domain != strings.ToLower(r.Domain) || strings.HasSuffix(r.Domain, ".") || len(r.Domain) > 253):
			t.Fatalf("%q: domain %q", s, r.Domain)
		}
		if r.Domain != "" {
			if r.Wildcard == r.Matches(r.Domain) {
				t.Fatalf("%q: matches its own domain %v (wildcard %v)", s, r.Matches(r.Domain), r.Wildcard)
			}
			if r.Wildcard && !r.Matches("x."+r.Domain) {
				t.Fatalf("%q: does not match a name below it", s)
			}
			if r.Matches("x" + r.Domain) {
				t.Fatalf("%q: matches x%s", s, r.Domain)
			}
		}
		if r.Matches(name) && !(name == r.Domain || r.Wildcard && strings.HasSuffix(name, "."+r.Domain)) {
			t.Fatalf("%q matches %q", s, name)
		}
	})
}
