package server

import (
	"context"
	"crypto/tls"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"
)

// The data-plane URL handed out with a token never follows a Host header to
// another server: without ZEISH_PUBLIC_URL it is the address the client
// connected to, and Host names it only for the console or a loopback name
// on the listener's port.
func TestPublicURLIgnoresForeignHost(t *testing.T) {
	tcp := func(s string) net.Addr { a, _ := net.ResolveTCPAddr("tcp", s); return a }
	cases := []struct {
		name, public, host string
		local              net.Addr
		console, tls       bool
		want               string
	}{
		{name: "foreign host", host: "evil.example", local: tcp("127.0.0.1:7420"), want: "http://127.0.0.1:7420"},
		{name: "foreign host with our port", host: "evil.example:7420", local: tcp("127.0.0.1:7420"), want: "http://127.0.0.1:7420"},
		{name: "localhost", host: "localhost:7420", local: tcp("127.0.0.1:7420"), want: "http://localhost:7420"},
		{name: "loopback ip", host: "127.0.0.1:7420", local: tcp("127.0.0.1:7420"), want: "http://127.0.0.1:7420"},
		{name: "ipv6 loopback", host: "[::1]:7420", local: tcp("[::1]:7420"), want: "http://[::1]:7420"},
		{name: "localhost on another port", host: "localhost:9999", local: tcp("127.0.0.1:7420"), want: "http://127.0.0.1:7420"},
		{name: "name of a wildcard listener", host: "box.lan:7420", local: tcp("10.1.2.3:7420"), want: "http://10.1.2.3:7420"},
		{name: "console", host: "box.lan:7420", local: tcp("10.1.2.3:7420"), console: true, want: "http://box.lan:7420"},
		{name: "tls", host: "evil.example", local: tcp("127.0.0.1:7420"), tls: true, want: "https://127.0.0.1:7420"},
		{name: "configured", public: "https://zeish.example/", host: "evil.example", local: tcp("127.0.0.1:7420"), want: "https://zeish.example"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := &Server{opts: Options{PublicURL: c.public}}
			r := httptest.NewRequest("POST", "/v1/public/sandboxes/x/access", nil)
			r.Host = c.host
			ctx := context.WithValue(r.Context(), http.LocalAddrContextKey, c.local)
			if c.console {
				ctx = context.WithValue(ctx, consoleKey{}, true)
			}
			r = r.WithContext(ctx)
			if c.tls {
				r.TLS = &tls.ConnectionState{}
			} else {
				r.TLS = nil
			}
			if got := s.publicURL(r); got != c.want {
				t.Errorf("publicURL = %q, want %q", got, c.want)
			}
		})
	}
}
