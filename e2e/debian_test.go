package e2e

import (
	"archive/zip"
	"bytes"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/zeish/zeish/api"
	"github.com/zeish/zeish/internal/testenv"
	"github.com/zeish/zeish/internal/testskip"
	"github.com/zeish/zeish/sandbox"
	zeish "github.com/zeish/zeish/sdk/go"
)

// wheel is a minimal pure-Python wheel, made here so pip installs it with
// no index and no network.
func wheel(t *testing.T) []byte {
	t.Helper()
	var b bytes.Buffer
	z := zip.NewWriter(&b)
	files := []struct{ name, body string }{
		{"zeishdemo/__init__.py", "def hello():\n    return 'hello from a wheel'\n"},
		{"zeishdemo-1.0.dist-info/METADATA", "Metadata-Version: 2.1\nName: zeishdemo\nVersion: 1.0\n"},
		{"zeishdemo-1.0.dist-info/WHEEL", "Wheel-Version: 1.0\nGenerator: zeish-e2e\nRoot-Is-Purelib: true\nTag: py3-none-any\n"},
		{"zeishdemo-1.0.dist-info/RECORD", "zeishdemo/__init__.py,,\nzeishdemo-1.0.dist-info/METADATA,,\nzeishdemo-1.0.dist-info/WHEEL,,\nzeishdemo-1.0.dist-info/RECORD,,\n"},
	}
	for _, f := range files {
		w, err := z.Create(f.name)
		if err != nil {
			t.Fatal(err)
		}
		w.Write([]byte(f.body))
	}
	if err := z.Close(); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// TestDebianTemplate boots the built-in debian template and works in it as
// an agent would: python3, a venv with pip installing a wheel, git, sudo
// from the unprivileged user, and no background services of its own.
func TestDebianTemplate(t *testing.T) {
	if _, err := exec.LookPath("mmdebstrap"); err != nil {
		testskip.Skip(t, "mmdebstrap not installed (scripts/deps.sh)")
	}
	testenv.RequireQEMU(t)
	testenv.DebianTemplate(t) // built once into the shared cache (about a minute, more on a slow mirror)
	s := startServer(t, "ZEISH_DEBIAN_TEMPLATE=on")
	ctx := ctxFor(t, 15*time.Minute)
	c := s.client
	list, err := c.ListTemplates(ctx)
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, tpl := range list {
		found = found || (tpl.Name == "debian" && tpl.Builtin)
	}
	if !found {
		t.Fatalf("debian not listed: %+v", list)
	}
	sb, err := c.CreateSandbox(ctx, api.CreateSandboxRequest{Template: "debian", MemoryMiB: 512}, zeish.Wait())
	if err != nil || sb.State != sandbox.StateRunning {
		t.Fatalf("create: %+v %v", sb, err)
	}
	conn, err := c.Connect(ctx, sb.ID)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conn.WriteFile(ctx, "/tmp/zeishdemo-1.0-py3-none-any.whl", bytes.NewReader(wheel(t)), 0o644); err != nil {
		t.Fatal(err)
	}
	asUser := func(script string) (string, string, int) {
		var out, errOut bytes.Buffer
		res, err := conn.Exec(ctxFor(t, 5*time.Minute), api.ExecRequest{Argv: []string{"bash", "-c", script}, User: "user"}, &out, &errOut)
		if err != nil {
			t.Fatalf("exec %q: %v", script, err)
		}
		return out.String(), errOut.String(), res.ExitCode
	}
	checks := []struct{ script, want string }{
		{"id -un; id -u; echo $HOME; pwd", "user\n1000\n/home/user\n/home/user\n"},
		{"sudo -n id -u", "0\n"},
		{"python3 -c 'import sys, ssl, sqlite3; print(sys.version_info[0])'", "3\n"},
		{"python3 -m venv ~/venv && ~/venv/bin/pip install -q --no-index /tmp/zeishdemo-1.0-py3-none-any.whl && ~/venv/bin/python -c 'import zeishdemo; print(zeishdemo.hello())'", "hello from a wheel\n"},
		{"git init -q repo && cd repo && git config user.email a@example.com && git config user.name A && echo hi > f && git add f && git commit -qm first && git log --format=%s", "first\n"},
		{"for c in curl wget ssh ip ps less; do command -v $c >/dev/null || echo missing $c; done; ls /etc/ssl/certs | grep -c . | awk '$1 > 50 {print \"certs\"}'", "certs\n"},
	}
	for _, ch := range checks {
		out, errOut, code := asUser(ch.script)
		if out != ch.want || code != 0 {
			t.Errorf("%s:\n got %q (exit %d, stderr %q)\nwant %q", ch.script, out, code, errOut, ch.want)
		}
	}
	// Nothing of the image's runs at boot: user-space processes (not kernel
	// threads, the children of kthreadd) are the agent, its init and this ps.
	out, _, _ := run(t, conn, "ps", "-N", "--ppid", "2", "-o", "pid=,comm=")
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		f := strings.Fields(line)
		if len(f) != 2 || f[0] == "2" {
			continue
		}
		switch f[1] {
		case "sandboxd", "ps", "resize2fs", "ld-linux-x86-64":
		default:
			t.Errorf("unexpected process: %q (all:\n%s)", f[1], out)
		}
	}
}
