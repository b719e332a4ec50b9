package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/zeish/zeish/internal/testenv"
	zeish "github.com/zeish/zeish/sdk/go"
)

// A second zeishd on a data dir in use refuses to start (it would recover
// the first one's VMs as orphans and kill them), and the first carries on.
func TestSecondZeishdRefused(t *testing.T) {
	s := startServer(t)
	second := &testenv.Zeishd{Bin: s.zeishd.Bin, DataDir: s.dataDir, Env: s.zeishd.Env}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := second.Start(ctx); err == nil {
		second.Stop()
		t.Fatal("a second zeishd started on a data dir in use")
	}
	if log := second.Log.String(); !strings.Contains(log, "in use by another zeishd") {
		t.Fatalf("second zeishd's log does not say why:\n%s", log)
	}
	if _, err := s.client.ListSandboxes(ctx, zeish.ListOptions{}); err != nil {
		t.Fatalf("the first zeishd after the refused second: %v", err)
	}
}
