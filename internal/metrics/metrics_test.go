package metrics_test

import (
	"context"
	"io"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/zeish/zeish/internal/metrics"
	"github.com/zeish/zeish/internal/store"
	"github.com/zeish/zeish/internal/store/sqlite"
	"github.com/zeish/zeish/sandbox"
)

func TestExposition(t *testing.T) {
	ctx := context.Background()
	st, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	for i, state := range []sandbox.State{sandbox.StateRunning, sandbox.StateRunning, sandbox.StatePaused, sandbox.StateDestroyed} {
		r := &store.SandboxRecord{Sandbox: sandbox.Sandbox{ID: "sbx_" + string(rune('a'+i)), Name: "s" + string(rune('a'+i)),
			AccountID: "acc_1", State: state, CreatedAt: time.Now()}}
		if err := st.CreateSandboxes(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	m := metrics.New(metrics.Options{Store: st, NodeID: "node-1",
		Capacity: func() (metrics.Capacity, error) {
			return metrics.Capacity{BudgetMiB: 4096, CommittedMiB: 768, ImageRAMMiB: 12}, nil
		}})
	m.ForkPause.Observe(0.031)
	rec := httptest.NewRecorder()
	m.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	body, _ := io.ReadAll(rec.Body)
	for _, want := range []string{
		`zeish_sandboxes{state="running"} 2`,
		`zeish_sandboxes{state="paused"} 1`,
		`zeish_sandboxes{state="stopped"} 0`,
		`zeish_node_memory_budget_mib{node="node-1"} 4096`,
		`zeish_node_memory_committed_mib{node="node-1"} 768`,
		`zeish_node_image_ram_mib{node="node-1"} 12`,
		`zeish_fork_pause_seconds_bucket{le="0.05"} 1`,
		`zeish_fork_pause_seconds_count 1`,
		`go_goroutines`,
	} {
		if !strings.Contains(string(body), want) {
			t.Errorf("no %q in\n%s", want, body)
		}
	}
	if strings.Contains(string(body), `state="destroyed"`) {
		t.Errorf("destroyed sandboxes are counted")
	}
}
