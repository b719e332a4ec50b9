package qemu

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
)

// A VM that loads an image never boots a kernel: its guest runs already,
// and a reboot ends its QEMU (-no-reboot). QEMU still reads -kernel and
// -initrd into fresh memory at start: 15 MiB for the templates' kernel and
// initrd, 60–90 ms of QEMU's start on a host where the first touch of a
// page costs ~15–20 µs. Yet -kernel cannot simply go: it adds a RAM block
// (the linuxboot_dma.bin option ROM) that every saved state names, and a
// VM without it refuses such a state. So a VM that loads an image gets a
// stub instead: the kernel's own setup sectors (the same boot protocol,
// option ROM and firmware configuration layout) with an empty payload, and
// no initrd, which adds no RAM block.

// kernelStubName is the stub's file in the VM's folder.
const kernelStubName = "kernel.stub"

// bzImage setup header (Documentation/arch/x86/boot.rst).
const (
	setupSectsOffset = 0x1f1
	headerMagicAt    = 0x202
	headerMagic      = 0x53726448 // "HdrS"
	sectorSize       = 512
)

// writeKernelStub writes the setup sectors of the bzImage kernel, then one
// empty sector of payload, to path. It reports false, writing nothing, when
// kernel is not a bzImage: the VM then gets the kernel itself.
func writeKernelStub(kernel, path string) (bool, error) {
	f, err := os.Open(kernel)
	if err != nil {
		return false, err
	}
	defer f.Close()
	var hdr [headerMagicAt + 4]byte
	if _, err := io.ReadFull(f, hdr[:]); err != nil {
		if errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
			return false, nil
		}
		return false, fmt.Errorf("kernel %s: %w", kernel, err)
	}
	if binary.LittleEndian.Uint32(hdr[headerMagicAt:]) != headerMagic {
		return false, nil
	}
	sects := int(hdr[setupSectsOffset])
	if sects == 0 {
		sects = 4 // the boot protocol's meaning of 0
	}
	setup := make([]byte, (sects+1)*sectorSize, (sects+2)*sectorSize)
	if _, err := f.ReadAt(setup, 0); err != nil {
		return false, fmt.Errorf("kernel %s: setup sectors: %w", kernel, err)
	}
	// One sector of payload: QEMU would otherwise allocate and load an
	// empty kernel, a path less travelled.
	stub := append(setup, make([]byte, sectorSize)...)
	if err := os.WriteFile(path, stub, 0o644); err != nil {
		return false, err
	}
	return true, nil
}
