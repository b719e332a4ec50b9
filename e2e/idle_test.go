package e2e

import (
	"strings"
	"testing"
	"time"

	"github.com/zeish/zeish/internal/procscan"
	zeish "github.com/zeish/zeish/sdk/go"
)

// requireIdleFriendly checks what keeps a fork child cheap while idle
// (docs/fork.md, "Density"): its guest never enabled the HPET, whose
// emulation wakes QEMU ~250 times a second for the VM's whole life, and
// under TCG its QEMU runs with the translation cache ZEISH_TCG_CLONE_TB_MIB
// gives VMs started from an image (by default, as booted VMs': 128 MiB).
func requireIdleFriendly(t *testing.T, s *server, child *zeish.SandboxConn, accel string) {
	t.Helper()
	if got := shell(t, child, "cat /sys/devices/system/clocksource/clocksource0/available_clocksource"); strings.Contains(got, "hpet") {
		t.Fatalf("child %s's guest uses the HPET: clocksources %q", child.ID(), got)
	}
	if got := shell(t, child, "grep -c 'Clock Event Device: hpet' /proc/timer_list || true"); got != "0" {
		t.Fatalf("child %s's guest has the HPET as a clock-event device (%s)", child.ID(), got)
	}
	if accel != "tcg" {
		return
	}
	pids := s.pidsOf(child.ID())
	if len(pids) != 1 {
		t.Fatalf("child %s: VM processes %v, want one", child.ID(), pids)
	}
	args := strings.Join(procscan.Args(pids[0]), " ")
	if !strings.Contains(args, "-accel tcg,tb-size=128 ") {
		t.Fatalf("child %s's QEMU: want -accel tcg,tb-size=128 (ZEISH_TCG_CLONE_TB_MIB's default: as booted VMs) in %q", child.ID(), args)
	}
}

// accelOf is the accelerator zeishd runs VMs with.
func accelOf(t *testing.T, s *server) string {
	t.Helper()
	h, err := s.client.Health(ctxFor(t, time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	return h.Accel
}
