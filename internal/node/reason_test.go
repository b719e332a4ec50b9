package node

import (
	"strings"
	"testing"
	"unicode"
)

// Guest-controlled text in a state reason is escaped and bounded before it
// reaches the database, the API and terminals.
func TestCleanReason(t *testing.T) {
	tests := []struct{ in, want string }{
		{"boot failed: timeout", "boot failed: timeout"},
		{"agent said \x1b[2J\x1b[31mpwned\x07", `agent said \x1b[2J\x1b[31mpwned\a`},
		{"line\nbreak\ttab", `line\nbreak\ttab`},
		{"rtl \u202eevil", `rtl \u202eevil`},
		{"bad \xff byte", `bad \xff byte`},
		{"ünïcode ok", "ünïcode ok"},
	}
	for _, tc := range tests {
		if got := cleanReason(tc.in); got != tc.want {
			t.Errorf("cleanReason(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
	long := cleanReason(strings.Repeat("\x1b", 100000))
	if len(long) > maxReasonBytes+16 {
		t.Errorf("a 100 KB reason became %d bytes", len(long))
	}
	for _, r := range long {
		if unicode.IsControl(r) {
			t.Fatalf("control character left: %q", r)
		}
	}
}
