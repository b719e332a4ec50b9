package node

import (
	"testing"

	"github.com/zeish/zeish/sandbox"
)

func TestWarmSize(t *testing.T) {
	for _, c := range []struct {
		name string
		tpl  sandbox.Template
		want sandbox.Size
	}{
		{"default", sandbox.Template{DiskMiB: 256}, sandbox.Size{VCPUs: 1, MemoryMiB: 512, DiskMiB: 2048}},
		{"1 GiB", sandbox.Template{DiskMiB: 256, MemoryMiB: 1024}, sandbox.Size{VCPUs: 1, MemoryMiB: 1024, DiskMiB: 2048}},
		{"2 vCPUs, big disk", sandbox.Template{DiskMiB: 4096, VCPUs: 2}, sandbox.Size{VCPUs: 2, MemoryMiB: 512, DiskMiB: 4096}},
		{"bad row", sandbox.Template{MemoryMiB: 3}, sandbox.Size{VCPUs: 1, MemoryMiB: 512, DiskMiB: 2048}},
	} {
		if got := WarmSize(c.tpl); got != c.want {
			t.Errorf("%s: WarmSize = %+v, want %+v", c.name, got, c.want)
		}
	}
}
