package e2b

import (
	"context"
	"encoding/base64"
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/zeish/zeish/guest"

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
		// As envd: no path is the home, another user's home is refused.
		{"", "/root", nil},
		{"~user/x", "", errdefs.ErrInvalidArgument},
	} {
		got, err := resolve("/root", tc.in)
		if got != tc.want || !errors.Is(err, tc.err) {
			t.Errorf("resolve(%q) = %q, %v; want %q, %v", tc.in, got, err, tc.want, tc.err)
		}
	}
}

func TestRPCUserName(t *testing.T) {
	basic := func(s string) string { return "Basic " + base64.StdEncoding.EncodeToString([]byte(s)) }
	for _, tc := range []struct {
		name, auth, want string
		err              error
	}{
		{"none", "", "", nil},
		{"bearer", "Bearer x", "", nil},
		{"root", basic("root:"), "root", nil},
		{"user", basic("user:"), "user", nil},
		{"garbage", "Basic %%%", "", errdefs.ErrInvalidArgument},
	} {
		got, err := rpcUserName(tc.auth)
		if got != tc.want || !errors.Is(err, tc.err) {
			t.Errorf("%s: %q, %v; want %q, %v", tc.name, got, err, tc.want, tc.err)
		}
	}
}

func TestLookupAccount(t *testing.T) {
	passwd := "root:x:0:0:root:/root:/bin/bash\nuser:x:1000:1000::/home/user:/bin/bash\nodd:x:1001:1001::relative:/bin/sh\nshort:x:1\n"
	read := func(context.Context, string) (io.ReadCloser, guest.FileInfo, error) {
		return io.NopCloser(strings.NewReader(passwd)), guest.FileInfo{}, nil
	}
	for _, tc := range []struct {
		name  string
		found bool
		home  string
	}{
		{"user", true, "/home/user"},
		{"root", true, "/root"},
		{"odd", true, "/"},
		{"short", false, ""},
		{"nobody", false, ""},
	} {
		a, found, err := lookupAccount(context.Background(), read, tc.name)
		if err != nil || found != tc.found || a.home != tc.home {
			t.Errorf("%s: %+v %v %v; want found=%v home %q", tc.name, a, found, err, tc.found, tc.home)
		}
	}
	none := func(context.Context, string) (io.ReadCloser, guest.FileInfo, error) {
		return nil, guest.FileInfo{}, errdefs.ErrFileNotFound
	}
	if _, found, err := lookupAccount(context.Background(), none, "user"); found || err != nil {
		t.Errorf("no /etc/passwd: %v %v", found, err)
	}
}
