package e2b

import (
	"encoding/base64"
	"errors"
	"net/http"
	"testing"

	"github.com/zeish/zeish/errdefs"
)

func TestResolve(t *testing.T) {
	for _, tc := range []struct {
		in, want string
		err      error
	}{
		{"/etc/hosts", "/etc/hosts", nil},
		{"a/b", "/root/a/b", nil},
		{"~", "/root", nil},
		{"~/x/../y", "/root/y", nil},
		{"/a//b/", "/a/b", nil},
		{"../../etc", "/etc", nil},
		{"", "", errdefs.ErrInvalidArgument},
	} {
		got, err := resolve("/root", tc.in)
		if got != tc.want || !errors.Is(err, tc.err) {
			t.Errorf("resolve(%q) = %q, %v; want %q, %v", tc.in, got, err, tc.want, tc.err)
		}
	}
}

func TestRPCUser(t *testing.T) {
	basic := func(s string) http.Header {
		h := http.Header{}
		h.Set("Authorization", "Basic "+base64.StdEncoding.EncodeToString([]byte(s)))
		return h
	}
	for _, tc := range []struct {
		name string
		h    http.Header
		home string
		err  error
	}{
		{"none", http.Header{}, "/root", nil},
		{"root", basic("root:"), "/root", nil},
		{"user", basic("user:"), "", errdefs.ErrInvalidArgument},
		{"garbage", http.Header{"Authorization": {"Basic %%%"}}, "", errdefs.ErrInvalidArgument},
	} {
		home, err := rpcUser(tc.h)
		if home != tc.home || !errors.Is(err, tc.err) {
			t.Errorf("%s: %q, %v; want %q, %v", tc.name, home, err, tc.home, tc.err)
		}
	}
}
