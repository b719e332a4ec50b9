package e2e

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	zeish "github.com/zeish/zeish/sdk/go"
)

// TestEvalFarm runs the Go eval-farm example against a real zeishd: baseline,
// warm-up, snapshot, three clones with one trial each, results table, and
// every sandbox deleted at the end (-keep=false).
func TestEvalFarm(t *testing.T) {
	s := startServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "go", "run", "./examples/eval-farm/go", "-n", "3", "-keep=false")
	cmd.Dir = ".."
	cmd.Env = append(os.Environ(), "ZEISH_API_URL="+s.url(), "ZEISH_API_KEY="+s.key)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	start := time.Now()
	err := cmd.Run()
	t.Logf("eval-farm took %v:\n%s", time.Since(start).Round(time.Second), stdout.String())
	if err != nil {
		t.Fatalf("eval-farm: %v\nstderr:\n%s", err, stderr.String())
	}

	// Rows of the table: TRIAL SANDBOX NAME FORK-PAUSE FIRST-OUTPUT TOTAL EXIT SCORE.
	var rows [][]string
	for _, line := range strings.Split(stdout.String(), "\n") {
		if f := strings.Fields(line); len(f) == 8 && strings.HasPrefix(f[1], "sbx_") {
			rows = append(rows, f)
		}
	}
	if len(rows) != 3 {
		t.Fatalf("%d result rows, want 3", len(rows))
	}
	seen := map[string]bool{}
	for _, f := range rows {
		if f[6] != "0" || f[7] == "-" || seen[f[1]] {
			t.Errorf("row %v: want a distinct clone, exit 0 and a score", f)
		}
		seen[f[1]] = true
	}

	list, err := s.client.ListSandboxes(ctx, zeish.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 0 {
		t.Errorf("with -keep=false every sandbox is deleted, but %d are left", len(list))
	}
}
