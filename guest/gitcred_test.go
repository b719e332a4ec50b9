//go:build linux

package guest

import (
	"bytes"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/zeish/zeish/internal/testskip"
)

func TestAnswerCredential(t *testing.T) {
	auth := &GitAuth{Protocol: "https", Host: "git.example:8443", Username: "x-access-token", Password: "tok"}
	cases := []struct {
		name string
		auth *GitAuth
		req  map[string]string
		want string
	}{
		{"its host", auth, map[string]string{"protocol": "https", "host": "git.example:8443", "path": "r.git"}, "username=x-access-token\npassword=tok\n"},
		{"host case", auth, map[string]string{"protocol": "https", "host": "GIT.example:8443"}, "username=x-access-token\npassword=tok\n"},
		{"another host", auth, map[string]string{"protocol": "https", "host": "evil.example"}, ""},
		{"another port", auth, map[string]string{"protocol": "https", "host": "git.example"}, ""},
		{"downgraded to http", auth, map[string]string{"protocol": "http", "host": "git.example:8443"}, ""},
		{"no credential", nil, map[string]string{"protocol": "https", "host": "git.example:8443"}, ""},
		{"a newline would inject a key", &GitAuth{Protocol: "https", Host: "h", Username: "u", Password: "p\nurl=x"},
			map[string]string{"protocol": "https", "host": "h"}, ""},
	}
	for _, c := range cases {
		if got := answerCredential(c.auth, c.req); got != c.want {
			t.Errorf("%s: %q, want %q", c.name, got, c.want)
		}
	}
	got := parseCredential(strings.NewReader("protocol=https\nhost=h\n\nignored=1\n"))
	if len(got) != 2 || got["host"] != "h" {
		t.Errorf("parseCredential: %v", got)
	}
}

// The agent answers the helper over its socket while a credential is set,
// and stops listening once it is forgotten.
func TestGitCredentialHelper(t *testing.T) {
	if os.Geteuid() != 0 {
		testskip.Skip(t, "the agent chowns the socket to the clone's user: needs root")
	}
	dir := t.TempDir()
	old := credentialSocket
	credentialSocket = filepath.Join(dir, "run", "git.sock")
	t.Cleanup(func() { credentialSocket = old })
	s := NewServer(slog.New(slog.DiscardHandler), "test")
	auth := &GitAuth{Protocol: "http", Host: "198.18.0.1:8080", Username: "x-access-token", Password: "s3cret-token", User: "root"}
	if err := s.setGitAuth(auth); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.setGitAuth(nil) })
	fi, err := os.Stat(credentialSocket)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("socket %v %v, want mode 0600", fi, err)
	}
	helper := func(action, in string) string {
		var out bytes.Buffer
		if code := RunGitCredential([]string{action}, strings.NewReader(in), &out); code != 0 {
			t.Fatalf("helper exit %d", code)
		}
		return out.String()
	}
	if got := helper("get", "protocol=http\nhost=198.18.0.1:8080\npath=r.git\n\n"); got != "username=x-access-token\npassword=s3cret-token\n" {
		t.Fatalf("get: %q", got)
	}
	if got := helper("get", "protocol=http\nhost=198.18.0.2:8080\n\n"); got != "" {
		t.Fatalf("another host got %q", got)
	}
	if got := helper("store", "protocol=http\nhost=198.18.0.1:8080\nusername=a\npassword=b\n\n"); got != "" {
		t.Fatalf("store answered %q", got)
	}
	// Configured again (a fork, a restore): still answering, with the new token.
	auth.Password = "rotated-token"
	if err := s.setGitAuth(auth); err != nil {
		t.Fatal(err)
	}
	if got := helper("get", "protocol=http\nhost=198.18.0.1:8080\n\n"); !strings.Contains(got, "password=rotated-token") {
		t.Fatalf("after reconfigure: %q", got)
	}
	if err := s.setGitAuth(nil); err != nil {
		t.Fatal(err)
	}
	if got := helper("get", "protocol=http\nhost=198.18.0.1:8080\n\n"); got != "" {
		t.Fatalf("forgotten credential still answered: %q", got)
	}
}

// FuzzParseCredential: whatever a process in the guest sends the helper,
// the request it reads has keys without "=" or a newline and values
// without a newline, no more than the bound is read, and the token goes
// out only for the credential's own protocol and host, as exactly a user
// name and a password.
func FuzzParseCredential(f *testing.F) {
	for _, seed := range []string{
		"protocol=https\nhost=git.example:8443\npath=r.git\n\n", "protocol=https\nhost=evil.example\nhost=git.example:8443\n",
		"host=git.example:8443\r\nprotocol=https\r\n", "protocol=https\nhost=git.example:8443\x00evil\n", "=\n==\nhost\n", "",
		"protocol=https\nhost=GIT.EXAMPLE:8443", strings.Repeat("a", maxCredentialRequest+10) + "\nprotocol=https\nhost=git.example:8443\n",
	} {
		f.Add([]byte(seed))
	}
	auth := &GitAuth{Protocol: "https", Host: "git.example:8443", Username: "x-access-token", Password: "tok"}
	f.Fuzz(func(t *testing.T, in []byte) {
		r := bytes.NewReader(in)
		req := parseCredential(r)
		if read := len(in) - r.Len(); read > maxCredentialRequest {
			t.Fatalf("read %d bytes, more than %d", read, maxCredentialRequest)
		}
		for k, v := range req {
			if strings.ContainsAny(k, "=\n") || strings.Contains(v, "\n") {
				t.Fatalf("%q: key %q value %q", in, k, v)
			}
		}
		switch got := answerCredential(auth, req); got {
		case "":
		case "username=x-access-token\npassword=tok\n":
			if req["protocol"] != auth.Protocol || !strings.EqualFold(req["host"], auth.Host) {
				t.Fatalf("%q: answered a request for %q://%q", in, req["protocol"], req["host"])
			}
		default:
			t.Fatalf("%q: answered %q", in, got)
		}
	})
}
