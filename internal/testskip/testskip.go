// Package testskip is the one way a test in this module skips. It has no
// dependencies, so every package's tests (internal ones too) can use it.
package testskip

import (
	"fmt"
	"os"
	"testing"
)

// Skip is the one way a test in this module skips: it skips where a tool,
// a kernel or root is missing on a developer's machine, and fails under CI
// (env CI set), where a skipped VM test would pass by proving nothing.
// TestEverySkipGoesThroughTestskip keeps every other skip out of the suite.
func Skip(t testing.TB, format string, args ...any) {
	t.Helper()
	msg := fmt.Sprintf(format, args...)
	if os.Getenv("CI") != "" {
		t.Fatalf("CI is set, refusing to skip: %s", msg)
	}
	t.Skip(msg)
}

// SkipShort skips a slow test under -short (failing under CI, like Skip).
func Short(t testing.TB, what string) {
	t.Helper()
	if testing.Short() {
		Skip(t, "%s; skipped with -short", what)
	}
}
