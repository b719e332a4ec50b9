package template_test

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/zeish/zeish/internal/testenv"
	"github.com/zeish/zeish/internal/testskip"
)

// Builds (or finds in the shared test cache) the real desktop template and
// reads its disk without booting it: the browser, the X server, the window
// manager and the tools desktop actions use are there.
func TestBuildDesktop(t *testing.T) {
	testskip.Short(t, "runs mmdebstrap with Chromium (several minutes the first time)")
	testenv.RequireQEMU(t)
	if _, err := exec.LookPath("mmdebstrap"); err != nil {
		testskip.Skip(t, "mmdebstrap not installed (scripts/deps.sh)")
	}
	a := testenv.DesktopTemplate(t)
	raw := filepath.Join(t.TempDir(), "disk.raw")
	if out, err := exec.Command("qemu-img", "convert", "-O", "raw", a.BaseDisk, raw).CombinedOutput(); err != nil {
		t.Fatalf("qemu-img: %v %s", err, out)
	}
	for _, p := range []string{
		"/usr/lib/chromium/chromium", "/usr/lib/chromium/chromium-headless-shell", "/usr/bin/Xvfb", "/usr/bin/openbox", "/usr/bin/xterm", "/usr/bin/xdotool",
		"/usr/bin/x11vnc", "/usr/bin/scrot", "/usr/bin/xdpyinfo", "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
		"/usr/bin/python3", "/.zeish/sandboxd", "/home/user",
	} {
		if out := debugfs(t, raw, "stat "+p); strings.Contains(out, "File not found") {
			t.Errorf("%s missing", p)
		}
	}
	if out := debugfs(t, raw, "cat /etc/passwd"); !strings.Contains(out, "user:x:1000:1000::/home/user:/bin/bash") {
		t.Errorf("/etc/passwd:\n%s", out)
	}
}
