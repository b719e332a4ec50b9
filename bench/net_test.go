package main

import (
	"os"
	"slices"
	"strconv"
	"testing"
	"time"
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

func TestStatCPU(t *testing.T) {
	for _, tc := range []struct {
		stat string
		want time.Duration
		bad  bool
	}{
		// A command with a space and a parenthesis: fields count from the last ')'.
		{stat: "4242 (qemu (x) y) S 1 4242 4242 0 -1 4194560 100 0 0 0 250 37 0 0 20 0 3 0 12345 1000 200", want: 2870 * time.Millisecond},
		{stat: "1 (init) S 0 1 1 0 -1 0 0 0 0 0 0 0 0 0", want: 0},
		{stat: "garbage", bad: true},
		{stat: "1 (x) S 0 1", bad: true},
		{stat: "1 (x) S 0 1 1 0 -1 0 0 0 0 0 a 0 0 0", bad: true},
	} {
		got, err := statCPU(tc.stat)
		if (err != nil) != tc.bad || got != tc.want {
			t.Errorf("statCPU(%q) = %v, %v; want %v (error %v)", tc.stat, got, err, tc.want, tc.bad)
		}
	}
}

func TestQemuCPUFindsTheSandboxsLastVM(t *testing.T) {
	log := `time=x level=INFO msg="vm started" sandbox=sbx_a pid=999999991 accel=tcg
time=x level=INFO msg="vm started" sandbox=sbx_ab pid=999999992 accel=tcg
time=x level=INFO msg="vm started" sandbox=sbx_a pid=` + strconv.Itoa(os.Getpid()) + ` accel=tcg
`
	if _, err := qemuCPU(log, "sbx_a"); err != nil {
		t.Errorf("sbx_a (this process): %v", err)
	}
	if _, err := qemuCPU(log, "sbx_ab"); err == nil {
		t.Error("sbx_ab: a pid that does not run gave no error")
	}
	if _, err := qemuCPU(log, "sbx_b"); err == nil {
		t.Error("sbx_b: no line gave no error")
	}
}
