package e2b

import (
	"strconv"
	"strings"
	"testing"
)

// FuzzHostRoute: a Host header routes to a sandbox only as E2B names one,
// <port>-<id>.<domain> with a port in 1..65535 written plainly, so what
// hostRoute reads back writes the same name again (case, the listener's
// port and the id's "-" for "_" aside), and "api" only as api.<domain>.
func FuzzHostRoute(f *testing.F) {
	for _, seed := range []string{
		"api.example.test", "API.example.test:443", "49983-sbx_abc.example.test", "3000-sbx-abc.example.test:8080",
		"0-sbx_abc.example.test", "03000-sbx_abc.example.test", "49983-a.b.example.test", "example.test",
		"api.example.test.evil", "[::1]:7420", "3000-.example.test", "3000-sbx-.example.test", "",
	} {
		f.Add(seed)
	}
	const domain = "example.test"
	fc := New(Options{Domain: domain})
	f.Fuzz(func(t *testing.T, host string) {
		id, port := fc.hostRoute(host)
		name := strings.ToLower(host)
		if h, _, ok := strings.Cut(name, ":"); ok {
			name = h
		}
		switch {
		case id == "" && port == "":
			return
		case id == "api":
			if port != "" || name != "api."+domain {
				t.Fatalf("%q routed to the API (port %q)", host, port)
			}
			return
		case id == "" || port == "":
			t.Fatalf("%q: id %q port %q", host, id, port)
		}
		if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 || strconv.Itoa(n) != port {
			t.Fatalf("%q: port %q", host, port)
		}
		if strings.Contains(id, ".") {
			t.Fatalf("%q: id %q holds a dot", host, id)
		}
		dnsID := id
		if rest, ok := strings.CutPrefix(id, "sbx_"); ok {
			dnsID = "sbx-" + rest
		}
		// The id's "_" may come as is (no DNS name holds it, a Host header may).
		if p, rest, ok := strings.Cut(name, "-"); ok && strings.HasPrefix(rest, "sbx_") {
			name = p + "-sbx-" + strings.TrimPrefix(rest, "sbx_")
		}
		if again := port + "-" + dnsID + "." + domain; again != name {
			t.Fatalf("%q read as %q %q, which is named %q", host, id, port, again)
		}
	})
}
