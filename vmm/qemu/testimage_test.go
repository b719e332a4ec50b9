package qemu

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/zeish/zeish/template"
)

// testImage is what a test VM boots. It is a stand-in for the real base
// template: switch testImageFor to internal/testenv.BaseTemplate(t) once that
// exists.
type testImage struct {
	Kernel     string
	Initrd     string
	KernelArgs string
	BaseDisk   string
}

// initMarker is printed on the console by the test image's /init once it runs.
const initMarker = "ZEISH-TEST-INIT-READY"

// testKernel finds the guest kernel the way templates do (the newest cloud
// kernel in /boot: the apt mirror moves, so no version is pinned) and the
// folder of its modules.
func testKernel() (kernel, modules string, err error) {
	kernel, release, err := template.DefaultKernel()
	if err != nil {
		return "", "", err
	}
	return kernel, "/lib/modules/" + release + "/kernel", nil
}

// virtio modules in load order (virtio_ring before virtio).
var testModuleFiles = []string{
	"drivers/virtio/virtio_ring.ko", "drivers/virtio/virtio.ko",
	"drivers/virtio/virtio_pci_legacy_dev.ko", "drivers/virtio/virtio_pci_modern_dev.ko",
	"drivers/virtio/virtio_pci.ko", "drivers/block/virtio_blk.ko",
	"drivers/char/virtio_console.ko", "net/core/failover.ko",
	"drivers/net/net_failover.ko", "drivers/net/virtio_net.ko",
}

// testInit loads the virtio modules, prints initMarker and echoes whatever
// arrives on the "agent" virtio-serial port back to it, holding the port open.
const testInit = `#!/bin/busybox sh
/bin/busybox --install -s /bin
mount -t proc proc /proc
mount -t sysfs sys /sys
mount -t devtmpfs dev /dev
while read -r m; do insmod "/lib/modules/$m"; done < /lib/modules/order
echo ` + initMarker + ` > /dev/console
port=
for i in $(seq 50); do
  for p in /sys/class/virtio-ports/*; do
    [ "$(cat "$p/name" 2>/dev/null)" = agent ] && port=/dev/$(basename "$p")
  done
  [ -n "$port" ] && [ -e "$port" ] && break
  sleep 0.1
done
if [ -n "$port" ]; then
  exec 3<>"$port"
  cat <&3 >&3
fi
while :; do sleep 3600; done
`

var (
	imageOnce sync.Once
	imageDir  string
	image     testImage
	imageErr  error
)

// testImageFor builds (once per test binary) a busybox initramfs with the
// virtio modules and an empty 64 MiB qcow2 base disk. The directory is
// removed by TestMain.
func testImageFor(t *testing.T) testImage {
	t.Helper()
	imageOnce.Do(func() { image, imageErr = buildTestImage() })
	if imageErr != nil {
		t.Fatalf("build test image: %v", imageErr)
	}
	return image
}

func buildTestImage() (testImage, error) {
	testKernel, testModules, err := testKernel()
	if err != nil {
		return testImage{}, err
	}
	for _, p := range []string{testKernel, "/bin/busybox", testModules} {
		if _, err := os.Stat(p); err != nil {
			return testImage{}, err
		}
	}
	dir, err := os.MkdirTemp("", "zeish-vmimg-")
	if err != nil {
		return testImage{}, err
	}
	imageDir = dir
	root := filepath.Join(dir, "root")
	for _, d := range []string{"bin", "proc", "sys", "dev", "lib/modules"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			return testImage{}, err
		}
	}
	var order []string
	for _, m := range testModuleFiles {
		b, err := os.ReadFile(filepath.Join(testModules, m))
		if err != nil {
			return testImage{}, err
		}
		if err := os.WriteFile(filepath.Join(root, "lib/modules", filepath.Base(m)), b, 0o644); err != nil {
			return testImage{}, err
		}
		order = append(order, filepath.Base(m))
	}
	files := map[string]string{
		"lib/modules/order": strings.Join(order, "\n") + "\n",
		"init":              testInit,
	}
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(root, name), []byte(content), 0o755); err != nil {
			return testImage{}, err
		}
	}
	bb, err := os.ReadFile("/bin/busybox")
	if err != nil {
		return testImage{}, err
	}
	if err := os.WriteFile(filepath.Join(root, "bin/busybox"), bb, 0o755); err != nil {
		return testImage{}, err
	}
	initrd := filepath.Join(dir, "initrd.cpio")
	cmd := exec.Command("sh", "-c", "find . | cpio -o -H newc --quiet > "+initrd)
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		return testImage{}, fmt.Errorf("cpio: %w: %s", err, out)
	}
	base := filepath.Join(dir, "base.qcow2")
	if out, err := exec.Command("qemu-img", "create", "-q", "-f", "qcow2", base, "64M").CombinedOutput(); err != nil {
		return testImage{}, fmt.Errorf("qemu-img: %w: %s", err, out)
	}
	return testImage{
		Kernel:     testKernel,
		Initrd:     initrd,
		KernelArgs: "console=ttyS0 quiet loglevel=1",
		BaseDisk:   base,
	}, nil
}

func removeTestImage() {
	if imageDir != "" {
		_ = os.RemoveAll(imageDir)
	}
}
