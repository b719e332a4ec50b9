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

// A control plane reports every node agent from the registry; a node agent
// reports its own capacity and no sandbox counts (those are cluster-wide).
func TestClusterExposition(t *testing.T) {
	scrape := func(m *metrics.Metrics) string {
		rec := httptest.NewRecorder()
		m.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
		body, _ := io.ReadAll(rec.Body)
		return string(body)
	}
	control := metrics.New(metrics.Options{Nodes: func(context.Context) ([]metrics.NodeState, error) {
		return []metrics.NodeState{
			{ID: "n1", Region: "eu", VCPUs: 8, Healthy: true, Live: true, SecondsSinceBeat: 2, Capacity: metrics.Capacity{BudgetMiB: 8192, CommittedMiB: 1024}},
			{ID: "n2", Region: "eu", VCPUs: 4, Healthy: true, Live: false, Draining: true, SecondsSinceBeat: 95},
		}, nil
	}})
	body := scrape(control)
	for _, want := range []string{
		`zeish_node_up{node="n1",region="eu"} 1`,
		`zeish_node_up{node="n2",region="eu"} 0`,
		`zeish_node_draining{node="n2",region="eu"} 1`,
		`zeish_node_vcpus{node="n1",region="eu"} 8`,
		`zeish_node_heartbeat_age_seconds{node="n2",region="eu"} 95`,
		`zeish_node_memory_budget_mib{node="n1"} 8192`,
		`zeish_node_memory_committed_mib{node="n1"} 1024`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("control plane: no %q in\n%s", want, body)
		}
	}
	node := metrics.New(metrics.Options{NodeID: "n1", Capacity: func() (metrics.Capacity, error) { return metrics.Capacity{BudgetMiB: 512}, nil }})
	body = scrape(node)
	if !strings.Contains(body, `zeish_node_memory_budget_mib{node="n1"} 512`) || strings.Contains(body, "zeish_sandboxes") {
		t.Errorf("node agent:\n%s", body)
	}
}
