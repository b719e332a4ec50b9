package template_test

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/zeish/zeish/internal/testenv"
	"github.com/zeish/zeish/internal/testskip"
)

// Builds (or finds in the shared test cache) the real debian template and
// reads its disk without booting it: the packages' binaries, the user, sudo.
func TestBuildDebian(t *testing.T) {
	testskip.Short(t, "runs mmdebstrap (about a minute)")
	testenv.RequireQEMU(t)
	if _, err := exec.LookPath("mmdebstrap"); err != nil {
		testskip.Skip(t, "mmdebstrap not installed (scripts/deps.sh)")
	}
	a := testenv.DebianTemplate(t)
	raw := filepath.Join(t.TempDir(), "disk.raw")
	if out, err := exec.Command("qemu-img", "convert", "-O", "raw", a.BaseDisk, raw).CombinedOutput(); err != nil {
		t.Fatalf("qemu-img: %v %s", err, out)
	}
	for _, p := range []string{"/usr/bin/python3", "/usr/bin/git", "/usr/bin/curl", "/usr/bin/sudo", "/usr/bin/ssh", "/.zeish/sandboxd", "/home/user"} {
		if out := debugfs(t, raw, "stat "+p); strings.Contains(out, "File not found") {
			t.Errorf("%s missing", p)
		}
	}
	if out := debugfs(t, raw, "cat /etc/passwd"); !strings.Contains(out, "user:x:1000:1000::/home/user:/bin/bash") {
		t.Errorf("/etc/passwd:\n%s", out)
	}
	if out := debugfs(t, raw, "cat /etc/sudoers.d/user"); !strings.Contains(out, "NOPASSWD:ALL") {
		t.Errorf("sudoers:\n%s", out)
	}
	if out := debugfs(t, raw, "stat /usr/bin/sudo"); !strings.Contains(out, "Mode:  04755") {
		t.Errorf("sudo is not setuid root:\n%s", out)
	}
}
