package qemu

import (
	"fmt"
	"os/exec"
	"regexp"
	"strconv"
)

// version is QEMU's release, read once at New: command-line options and
// migration features differ between the 7.2 that Debian 12 ships and the
// 10.x of its backports (which zeish installs).
type version struct{ Major, Minor int }

func (v version) String() string { return fmt.Sprintf("%d.%d", v.Major, v.Minor) }

// atLeast reports whether v is major.minor or newer.
func (v version) atLeast(major, minor int) bool {
	return v.Major > major || v.Major == major && v.Minor >= minor
}

var versionRE = regexp.MustCompile(`QEMU emulator version (\d+)\.(\d+)`)

// parseVersion reads "QEMU emulator version 10.0.2 (Debian …)".
func parseVersion(out string) (version, error) {
	m := versionRE.FindStringSubmatch(out)
	if m == nil {
		return version{}, fmt.Errorf("qemu --version: unrecognised %q", tail(out, 200))
	}
	major, _ := strconv.Atoi(m[1])
	minor, _ := strconv.Atoi(m[2])
	return version{major, minor}, nil
}

func qemuVersion(qemuPath string) (version, error) {
	out, err := exec.Command(qemuPath, "--version").CombinedOutput()
	if err != nil {
		return version{}, fmt.Errorf("%s --version: %w: %s", qemuPath, err, tail(string(out), 200))
	}
	return parseVersion(string(out))
}
