package sandbox

import (
	"fmt"

	"github.com/zeish/zeish/errdefs"
)

// Size is a sandbox's resources.
type Size struct {
	VCPUs     int `json:"vcpus"`
	MemoryMiB int `json:"memory_mib"`
	DiskMiB   int `json:"disk_mib"`
}

// Presets are the named sizes (docs/sandboxes.md, Objects).
var Presets = map[string]Size{
	"small":  {VCPUs: 1, MemoryMiB: 512, DiskMiB: 2048},
	"medium": {VCPUs: 2, MemoryMiB: 2048, DiskMiB: 8192},
	"large":  {VCPUs: 4, MemoryMiB: 8192, DiskMiB: 20480},
}

// Bounds on an explicit size. Memory is a multiple of 2 MiB so RAM files align
// with huge pages; the floor keeps the guest kernel and agent bootable.
const (
	MinVCPUs     = 1
	MaxVCPUs     = 16
	MinMemoryMiB = 128
	MaxMemoryMiB = 65536
	MinDiskMiB   = 1024
	MaxDiskMiB   = 262144
)

// ResolveSize turns a preset name and explicit overrides into a checked Size.
// An empty preset means "small"; explicit values win over the preset's.
func ResolveSize(preset string, vcpus, memoryMiB, diskMiB int) (Size, error) {
	if preset == "" {
		preset = "small"
	}
	s, ok := Presets[preset]
	if !ok {
		return Size{}, fmt.Errorf("size %q is not one of small, medium, large: %w", preset, errdefs.ErrInvalidArgument)
	}
	if vcpus != 0 {
		s.VCPUs = vcpus
	}
	if memoryMiB != 0 {
		s.MemoryMiB = memoryMiB
	}
	if diskMiB != 0 {
		s.DiskMiB = diskMiB
	}
	switch {
	case s.VCPUs < MinVCPUs || s.VCPUs > MaxVCPUs:
		return Size{}, fmt.Errorf("vcpus %d is outside %d..%d: %w", s.VCPUs, MinVCPUs, MaxVCPUs, errdefs.ErrInvalidArgument)
	case s.MemoryMiB < MinMemoryMiB || s.MemoryMiB > MaxMemoryMiB:
		return Size{}, fmt.Errorf("memory_mib %d is outside %d..%d: %w", s.MemoryMiB, MinMemoryMiB, MaxMemoryMiB, errdefs.ErrInvalidArgument)
	case s.MemoryMiB%2 != 0:
		return Size{}, fmt.Errorf("memory_mib %d is not a multiple of 2: %w", s.MemoryMiB, errdefs.ErrInvalidArgument)
	case s.DiskMiB < MinDiskMiB || s.DiskMiB > MaxDiskMiB:
		return Size{}, fmt.Errorf("disk_mib %d is outside %d..%d: %w", s.DiskMiB, MinDiskMiB, MaxDiskMiB, errdefs.ErrInvalidArgument)
	}
	return s, nil
}
