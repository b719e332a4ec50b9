package main

import (
	"slices"
	"testing"
)

func TestStepMS(t *testing.T) {
	log := `time=2026-12-02T03:44:31Z level=DEBUG msg="guest configured" sandbox=sbx-a configure_ms=12
time=2026-12-02T03:44:32Z level=DEBUG msg="guest configured" sandbox=sbx-b configure_ms=7
time=2026-12-02T03:44:33Z level=INFO msg="vm started" sandbox=sbx-a pid=9 accel=tcg incoming=false launch_ms=40 qmp_ready_ms=310
time=2026-12-02T03:44:34Z level=DEBUG msg="guest configured" sandbox=sbx-c configure_ms=x
time=2026-12-02T03:44:35Z level=DEBUG msg="guest configured" sandbox=sbx-a configure_ms=3
`
	for _, tc := range []struct {
		name, msg, key string
		ids            []string
		want           []float64
	}{
		{"one sandbox, every line of it", "guest configured", "configure_ms", []string{"sbx-a"}, []float64{12, 3}},
		{"two sandboxes", "guest configured", "configure_ms", []string{"sbx-a", "sbx-b"}, []float64{12, 7, 3}},
		{"other message", "vm started", "qmp_ready_ms", []string{"sbx-a", "sbx-b"}, []float64{310}},
		{"not a number is left out", "guest configured", "configure_ms", []string{"sbx-c"}, nil},
		{"no such sandbox", "guest configured", "configure_ms", []string{"sbx-z"}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := stepMS(log, tc.msg, tc.key, tc.ids); !slices.Equal(got, tc.want) {
				t.Errorf("stepMS = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestMAD(t *testing.T) {
	for _, tc := range []struct {
		xs   []float64
		want float64
	}{
		{nil, 0},
		{[]float64{5}, 0},
		{[]float64{1, 2, 3, 4, 100}, 1}, // the outlier does not count
		{[]float64{-10, 0, 10}, 10},
	} {
		if got := mad(tc.xs); got != tc.want {
			t.Errorf("mad(%v) = %v, want %v", tc.xs, got, tc.want)
		}
	}
}
