package main

import "testing"

func TestParseStatTicks(t *testing.T) {
	for _, tc := range []struct {
		name, stat string
		want       int64
		bad        bool
	}{
		{"plain", "4592 (qemu-system-x86) S 1 4591 4591 0 -1 4194368 100 0 0 0 367 854 0 0 20 0 5 0 1 2 3", 367 + 854, false},
		{"spaces and parens in the name", "17 (zeish (a) b) R 1 2 3 4 5 6 7 8 9 10 11 12 0 0", 11 + 12, false},
		{"short", "17 (x) R 1 2 3", 0, true},
		{"no name", "17 x R", 0, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseStatTicks(tc.stat)
			if tc.bad {
				if err == nil {
					t.Fatalf("want an error, got %d", got)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("got %d, %v; want %d", got, err, tc.want)
			}
		})
	}
}
