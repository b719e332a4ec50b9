package qemu

import (
	"fmt"
	"os"

	"github.com/zeish/zeish/errdefs"
	"github.com/zeish/zeish/vmm"
)

const kvmDevice = "/dev/kvm"

// detectAccel picks KVM when kvmPath opens read-write (what QEMU needs), TCG
// otherwise. A requested accelerator is honoured, but asking for KVM where it
// cannot be opened is an error rather than a silent 5× slowdown.
func detectAccel(requested vmm.Accel, kvmPath string) (vmm.Accel, error) {
	kvmOK := func() error {
		f, err := os.OpenFile(kvmPath, os.O_RDWR, 0)
		if err != nil {
			return err
		}
		return f.Close()
	}
	switch requested {
	case "":
		if kvmOK() == nil {
			return vmm.AccelKVM, nil
		}
		return vmm.AccelTCG, nil
	case vmm.AccelTCG:
		return vmm.AccelTCG, nil
	case vmm.AccelKVM:
		if err := kvmOK(); err != nil {
			return "", fmt.Errorf("accel kvm: %w: %w", errdefs.ErrInvalidArgument, err)
		}
		return vmm.AccelKVM, nil
	default:
		return "", fmt.Errorf("accel %q: %w: want kvm, tcg or empty", requested, errdefs.ErrInvalidArgument)
	}
}
