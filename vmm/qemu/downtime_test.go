package qemu

import "testing"

// TestLiveDowntimeFor checks the switch-over limit of a live capture: the
// configured one for the first passes, then doubling every pass up to the
// maximum, so that a guest that keeps dirtying memory still switches over.
func TestLiveDowntimeFor(t *testing.T) {
	for _, tc := range []struct {
		base, pass, want int
	}{
		{5, 1, 5},
		{5, downtimeEscalateAfter - 1, 5},
		{5, downtimeEscalateAfter, 10},
		{5, downtimeEscalateAfter + 1, 20},
		{5, downtimeEscalateAfter + 8, 2000},
		{5, 1000, maxLiveDowntimeMS},
		{50, 2, 50},
		{50, downtimeEscalateAfter, 100},
		{3000, downtimeEscalateAfter + 3, 3000}, // above the maximum already: kept
	} {
		if got := liveDowntimeFor(tc.base, tc.pass); got != tc.want {
			t.Errorf("liveDowntimeFor(%d, pass %d) = %d, want %d", tc.base, tc.pass, got, tc.want)
		}
	}
}
