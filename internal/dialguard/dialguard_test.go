package dialguard

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"
)

var guestRanges = []string{"0.0.0.0/8", "10.0.0.0/8", "100.64.0.0/10", "127.0.0.0/8", "169.254.0.0/16",
	"172.16.0.0/12", "192.0.0.0/24", "192.168.0.0/16", "224.0.0.0/4", "240.0.0.0/4"}

func TestCheck(t *testing.T) {
	g, err := New(guestRanges, []string{"10.9.0.0/16", "fd00:1::/32"})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		addr    string
		blocked bool
	}{
		{"127.0.0.1", true}, {"10.1.2.3", true}, {"169.254.169.254", true}, {"192.168.1.1", true}, {"0.0.0.0", true},
		{"::1", true}, {"::", true}, {"::ffff:127.0.0.1", true}, {"fe80::1%eth0", true}, {"fd12::1", true}, {"64:ff9b::7f00:1", true},
		{"2002:7f00:1::", true},
		{"10.9.3.4", false}, {"fd00:1:2::5", false}, // opened
		{"93.184.216.34", false}, {"2606:4700::1111", false}, {"::ffff:1.1.1.1", false},
	} {
		err := g.Check(netip.MustParseAddr(c.addr))
		if got := errors.Is(err, ErrBlocked); got != c.blocked {
			t.Errorf("%s: blocked=%v (%v), want %v", c.addr, got, err, c.blocked)
		}
	}
	if _, err := New(nil, []string{"10.0.0.1"}); err == nil {
		t.Error("an allowed range without a prefix length was accepted")
	}
}

// The check is on the address dialled, after resolution: a name that
// resolves to loopback is refused as loopback is, and an opened range
// lets the same server through.
func TestTransportChecksEveryDial(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("ok")) }))
	defer srv.Close()
	_, port, _ := net.SplitHostPort(strings.TrimPrefix(srv.URL, "http://"))
	for _, url := range []string{srv.URL, "http://localhost:" + port} {
		blocked, _ := New(guestRanges, nil)
		_, err := (&http.Client{Transport: blocked.Transport()}).Get(url)
		if !errors.Is(err, ErrBlocked) {
			t.Errorf("%s through the guard: %v, want ErrBlocked", url, err)
		}
		opened, _ := New(guestRanges, []string{"127.0.0.0/8", "::1/128"})
		resp, err := (&http.Client{Transport: opened.Transport()}).Get(url)
		if err != nil {
			t.Errorf("%s with loopback opened: %v", url, err)
			continue
		}
		resp.Body.Close()
	}
	// The dialer itself, for callers that are not HTTP.
	g, _ := New(guestRanges, nil)
	if _, err := g.Dialer().DialContext(context.Background(), "tcp", strings.TrimPrefix(srv.URL, "http://")); !errors.Is(err, ErrBlocked) {
		t.Errorf("dialer: %v", err)
	}
}
