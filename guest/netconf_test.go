//go:build linux

package guest

import (
	"testing"
	"unsafe"
)

// The kernel reads struct rtentry by its C layout: 120 bytes on 64-bit
// Linux, the device name pointer at offset 88.
func TestRtentryLayout(t *testing.T) {
	var rt rtentry
	if got := unsafe.Sizeof(rt); got != 120 {
		t.Fatalf("sizeof rtentry = %d, want 120", got)
	}
	if got := unsafe.Offsetof(rt.flags); got != 56 {
		t.Fatalf("offsetof flags = %d, want 56", got)
	}
	if got := unsafe.Offsetof(rt.metric); got != 80 {
		t.Fatalf("offsetof metric = %d, want 80", got)
	}
	if got := unsafe.Offsetof(rt.dev); got != 88 {
		t.Fatalf("offsetof dev = %d, want 88", got)
	}
}
