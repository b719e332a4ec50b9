package e2e

import (
	"bytes"
	"crypto/rand"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/zeish/zeish/sandbox"
)

// zeishctl runs the CLI against s and returns stdout, stderr and exit code.
func (s *server) zeishctl(t *testing.T, stdin string, args ...string) (string, string, int) {
	t.Helper()
	cmd := exec.Command(filepath.Join(bin, "zeishctl"), args...)
	cmd.Env = append(os.Environ(), "ZEISH_API_URL="+s.url(), "ZEISH_API_KEY="+s.key)
	cmd.Stdin = strings.NewReader(stdin)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return out.String(), errOut.String(), code
}

// TestCLI drives a real sandbox with zeishctl only.
func TestCLI(t *testing.T) {
	s := startServer(t)
	out, errOut, code := s.zeishctl(t, "", "sandboxes", "create", "--template", "base", "--name", "cli-box", "--memory-mib", "256", "--wait", "-o", "json")
	if code != 0 {
		t.Fatalf("create: exit %d: %s", code, errOut)
	}
	var sb sandbox.Sandbox
	if err := json.Unmarshal([]byte(out), &sb); err != nil {
		t.Fatalf("create -o json must print exactly the sandbox object: %v\n%s", err, out)
	}
	if sb.State != sandbox.StateRunning || sb.Name != "cli-box" || sb.MemoryMiB != 256 {
		t.Fatalf("created %+v", sb)
	}

	out, errOut, code = s.zeishctl(t, "", "exec", sb.ID, "--", "sh", "-c", "echo to-out; echo to-err >&2; exit 7")
	if out != "to-out\n" || errOut != "to-err\n" || code != 7 {
		t.Fatalf("exec: stdout %q stderr %q exit %d; want to-out, to-err, 7", out, errOut, code)
	}
	out, _, code = s.zeishctl(t, "piped\n", "exec", sb.ID, "--", "cat")
	if out != "piped\n" || code != 0 {
		t.Fatalf("exec with stdin: %q %d", out, code)
	}

	dir := t.TempDir()
	data := make([]byte, 256<<10)
	rand.Read(data)
	local := filepath.Join(dir, "up.bin")
	os.WriteFile(local, data, 0o644)
	if _, errOut, code := s.zeishctl(t, "", "files", "put", sb.ID, local, "/root/up.bin"); code != 0 {
		t.Fatalf("files put: %d %s", code, errOut)
	}
	back := filepath.Join(dir, "down.bin")
	if _, errOut, code := s.zeishctl(t, "", "files", "get", sb.ID, "/root/up.bin", back); code != 0 {
		t.Fatalf("files get: %d %s", code, errOut)
	}
	if got, _ := os.ReadFile(back); !bytes.Equal(got, data) {
		t.Fatalf("files get returned %d bytes, want the %d put", len(got), len(data))
	}
	if out, _, code := s.zeishctl(t, "", "files", "ls", sb.ID, "/root"); code != 0 || !strings.Contains(out, "up.bin") {
		t.Fatalf("files ls: %d %q", code, out)
	}
	if out, _, code := s.zeishctl(t, "", "sandboxes", "list"); code != 0 || !strings.Contains(out, sb.ID) {
		t.Fatalf("list: %d %q", code, out)
	}
	if out, _, code := s.zeishctl(t, "", "sandboxes", "get", sb.ID, "-o", "json"); code != 0 || !strings.Contains(out, `"running"`) {
		t.Fatalf("get: %d %q", code, out)
	}
	if _, errOut, code := s.zeishctl(t, "", "sandboxes", "get", "sbx_00000000000000000000"); code != 1 || !strings.Contains(errOut, "not_found") {
		t.Fatalf("get unknown: exit %d, stderr %q; want 1 and the code", code, errOut)
	}
	if _, errOut, code := s.zeishctl(t, "", "sandboxes", "delete", sb.ID, "--wait"); code != 0 {
		t.Fatalf("delete: %d %s", code, errOut)
	}
	if out, _, _ := s.zeishctl(t, "", "sandboxes", "get", sb.ID, "-o", "json"); !strings.Contains(out, `"destroyed"`) {
		t.Fatalf("after delete: %q", out)
	}
}
