package api

import (
	"regexp"
	"strings"
	"testing"
)

// E2B's SDKs before 2.46 refuse a key unless it matches this (their own
// check, e2b 2.45.0's API_KEY_PATTERN).
var e2bKeyFormat = regexp.MustCompile(`^e2b_[0-9a-f]+$`)

func TestE2BKeyForm(t *testing.T) {
	const key = "zk_AAECAwQFBgcICQoLDA0ODxAREhMUFRYX" // bytes 0..23
	e2b, err := E2BKey(key)
	if err != nil || e2b != "e2b_000102030405060708090a0b0c0d0e0f1011121314151617" || !e2bKeyFormat.MatchString(e2b) {
		t.Fatalf("E2BKey = %q, %v", e2b, err)
	}
	if back, ok := ZeishKey(e2b); !ok || back != key {
		t.Fatalf("ZeishKey(%q) = %q, %v", e2b, back, ok)
	}
	for _, bad := range []string{"", "zk_short", "e2b_00", "key", "zk_" + strings.Repeat("!", 32)} {
		if _, err := E2BKey(bad); err == nil {
			t.Errorf("E2BKey(%q) took it", bad)
		}
	}
	// Only the exact form maps; anything else is a key of its own (and
	// unknown, so refused).
	for _, other := range []string{key, "e2b_" + strings.Repeat("0", 40), "e2b_" + strings.ToUpper(e2b[4:]), "e2b_" + strings.Repeat("g", 48), "x" + e2b} {
		if _, ok := ZeishKey(other); ok {
			t.Errorf("ZeishKey(%q) mapped it", other)
		}
	}
}
