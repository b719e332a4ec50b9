package template

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
)

// DefaultKernel is the guest kernel templates boot unless told otherwise: the
// newest Debian cloud kernel in /boot, and its release ("6.1.0-57-cloud-amd64").
// Tests find their kernel here too: the apt mirror moves, so none pins one.
func DefaultKernel() (path, release string, err error) {
	path, err = defaultKernel("/boot")
	if err != nil {
		return "", "", err
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return "", "", err
	}
	release, err = kernelRelease(b, path)
	return path, release, err
}

// defaultKernel picks the newest Debian cloud kernel in bootDir. The cloud
// flavour is the one whose virtio drivers the init script expects.
func defaultKernel(bootDir string) (string, error) {
	paths, _ := filepath.Glob(filepath.Join(bootDir, "vmlinuz-*-cloud-amd64"))
	if len(paths) == 0 {
		return "", fmt.Errorf("%w: no %s/vmlinuz-*-cloud-amd64 (apt-get install linux-image-cloud-amd64)", ErrMissingInput, bootDir)
	}
	sort.Slice(paths, func(i, j int) bool { return versionLess(paths[i], paths[j]) })
	return paths[len(paths)-1], nil
}

// versionLess compares strings piecewise, numbers by value, so
// vmlinuz-6.1.0-10 sorts after vmlinuz-6.1.0-9.
func versionLess(a, b string) bool {
	split := func(s string) []string {
		return strings.FieldsFunc(s, func(r rune) bool { return r == '.' || r == '-' })
	}
	pa, pb := split(a), split(b)
	for i := 0; i < len(pa) && i < len(pb); i++ {
		if pa[i] == pb[i] {
			continue
		}
		na, ea := strconv.Atoi(pa[i])
		nb, eb := strconv.Atoi(pb[i])
		if ea == nil && eb == nil {
			return na < nb
		}
		return pa[i] < pb[i]
	}
	return len(pa) < len(pb)
}

// kernelRelease reads the release string ("6.1.0-56-cloud-amd64") from the
// bzImage setup header, so a kernel at any path finds its modules. The file
// name is only a fallback for images without the header.
func kernelRelease(kernel []byte, path string) (string, error) {
	// Boot protocol: "HdrS" magic at 0x202; at 0x20E a pointer (relative
	// to 0x200) to a NUL-terminated version string.
	if len(kernel) > 0x210 && string(kernel[0x202:0x206]) == "HdrS" {
		off := int(binary.LittleEndian.Uint16(kernel[0x20E:])) + 0x200
		if off > 0x200 && off < len(kernel) {
			s := kernel[off:]
			if i := bytes.IndexByte(s, 0); i > 0 {
				if f := strings.Fields(string(s[:i])); len(f) > 0 {
					return f[0], nil
				}
			}
		}
	}
	if base := filepath.Base(path); strings.HasPrefix(base, "vmlinuz-") {
		return strings.TrimPrefix(base, "vmlinuz-"), nil
	}
	return "", fmt.Errorf("%s: cannot tell the kernel release (not a bzImage, not named vmlinuz-<release>)", path)
}

// readInput reads a host file the build needs, naming the Debian package that
// provides it when it is missing.
func readInput(path, pkg string) ([]byte, error) {
	b, err := os.ReadFile(path)
	if os.IsNotExist(err) {
		return nil, fmt.Errorf("%w: %s not found (apt-get install %s)", ErrMissingInput, path, pkg)
	}
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	return b, nil
}
