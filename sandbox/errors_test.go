package sandbox

import (
	"strings"
	"testing"
	"unicode/utf8"
)

func TestCleanMessage(t *testing.T) {
	tests := []struct{ name, in, want string }{
		{"plain", "Kernel panic - not syncing: VFS", "Kernel panic - not syncing: VFS"},
		{"lines kept", "a\nb\tc\r\n", "a\nb\tc"},
		{"escape sequences dropped", "\x1b[31mred\x1b[0m text\x07", "red text"},
		{"invalid utf-8 replaced", "ok \xff\xfe end", "ok \uFFFD\uFFFD end"},
		{"nul dropped", "a\x00b", "ab"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := CleanMessage(tt.in); got != tt.want {
				t.Errorf("CleanMessage(%q) = %q, want %q", tt.in, got, tt.want)
			}
		})
	}
	long := strings.Repeat("é", 5000) + "THE END"
	got := CleanMessage(long)
	if len(got) > maxErrorMessage+len("…") || !strings.HasSuffix(got, "THE END") || !utf8.ValidString(got) {
		t.Errorf("long message: %d bytes, suffix %q, valid %v", len(got), got[len(got)-7:], utf8.ValidString(got))
	}
}

func FuzzCleanMessage(f *testing.F) {
	for _, s := range []string{"", "plain", "\x1b[", "\x1b[31m", "\xff", strings.Repeat("x", 5000)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		out := CleanMessage(s)
		if !utf8.ValidString(out) || strings.ContainsAny(out, "\x1b\x00\r") || len(out) > maxErrorMessage+len("…") {
			t.Fatalf("CleanMessage(%q) = %q", s, out)
		}
	})
}
