package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"path/filepath"
	"time"

	"github.com/zeish/zeish/api"
	"github.com/zeish/zeish/internal/testenv"
	"github.com/zeish/zeish/sandbox"
	zeish "github.com/zeish/zeish/sdk/go"
)

func init() {
	register(section{name: "cluster", about: "what a control plane in front of a node agent adds to create and fork, next to the single binary", run: runCluster})
}

// runCluster starts PostgreSQL, a control plane and one node agent, and
// times the create and clone calls (their answers, not the boots, which
// the control plane does not touch) through it and through the bench's
// single binary, interleaved, with the same sizes.
func runCluster(ctx context.Context, e *benchEnv) (*report, error) {
	pg, err := testenv.StartPostgres()
	if err != nil {
		return nil, err
	}
	defer pg.Stop()
	db := pg.URL("postgres")
	cp, err := e.startControl(ctx, db, "data-control")
	if err != nil {
		return nil, err
	}
	defer cp.Stop()
	node, err := e.startNodeAgent(ctx, cp, db, "bench-node")
	if err != nil {
		return nil, err
	}
	defer node.Stop()
	key, err := cp.AdminKey()
	if err != nil {
		return nil, err
	}
	clients := map[string]*zeish.Client{
		"single binary":              e.client,
		"control plane + node agent": zeish.NewClient("http://"+cp.Addr+api.BasePath, key),
	}
	order := []string{"single binary", "control plane + node agent"}
	create, clone := map[string][]float64{}, map[string][]float64{}
	for i := 0; i < e.opts.warmup+e.opts.runs; i++ {
		for _, name := range order {
			c := clients[name]
			cms, fms, err := createAndClone(ctx, c, e.opts.memMiB)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", name, err)
			}
			if i >= e.opts.warmup {
				create[name] = append(create[name], cms)
				clone[name] = append(clone[name], fms)
			}
		}
	}
	r := &report{Section: "cluster", Title: "control plane overhead: the create and clone calls' answers (ms), through one zeishd and through a control plane in front of a node agent"}
	t := &table{Title: "call latency (ms)", Header: []string{"call", "path", "median", "min", "max", "runs"}}
	r.Tables = append(r.Tables, t)
	for _, call := range []struct {
		name string
		m    map[string][]float64
	}{{"create (answer: starting)", create}, {"clone ×1 (answer: pause included)", clone}} {
		for _, name := range order {
			s := r.add(newSeries(call.name+" via "+name, "ms", call.m[name]))
			t.Rows = append(t.Rows, []string{call.name, name, fmtNum(s.Median), fmtNum(s.Min), fmtNum(s.Max), fmt.Sprint(len(s.Samples))})
		}
		over := median(call.m[order[1]]) - median(call.m[order[0]])
		r.addGoal(goal{Name: call.name + ": control plane overhead (median difference)", Target: "≤ 10 ms", Value: over, Unit: "ms", Met: over <= 10})
	}
	r.Notes = append(r.Notes, "The boots themselves run on the same node code either way; only the calls' answers differ by the control plane's hop (placement, the node RPC, the shared database).")
	return r, nil
}

// startControl starts a control plane (ZEISH_ROLE=control) on database
// db and data dir e.tmp/dir, with plan limits the bench does not reach;
// env are more settings.
func (e *benchEnv) startControl(ctx context.Context, db, dir string, env ...string) (*testenv.Zeishd, error) {
	cp := &testenv.Zeishd{Bin: e.zeishdBin, DataDir: filepath.Join(e.tmp, dir), OwnProcessGroup: true,
		Env: append([]string{"ZEISH_ROLE=control", "ZEISH_DATABASE_URL=" + db, "ZEISH_CLUSTER_ALLOW_HTTP=on", "ZEISH_LOG_LEVEL=warn",
			"ZEISH_PLAN_RUNNING_SLOTS=100", "ZEISH_PLAN_CREATES_PER_MINUTE=1000", "ZEISH_PLAN_DAILY_CREATES=100000"}, env...)}
	return cp, cp.Start(ctx)
}

// startNodeAgent starts node agent id of control plane cp, joined with a
// join token made for it on database db (the node itself opens no
// database), on data dir e.tmp/data-<id>, and waits until cp lists it
// live; env are more settings. Every node agent of the bench is started
// here.
func (e *benchEnv) startNodeAgent(ctx context.Context, cp *testenv.Zeishd, db, id string, env ...string) (*testenv.Zeishd, error) {
	join, err := testenv.JoinToken(ctx, e.zeishdBin, db, id)
	if err != nil {
		return nil, err
	}
	node := &testenv.Zeishd{Bin: e.zeishdBin, DataDir: filepath.Join(e.tmp, "data-"+id), OwnProcessGroup: true,
		Env: append([]string{"ZEISH_ROLE=node", "ZEISH_NODE_ID=" + id, "ZEISH_CONTROL_URL=http://" + cp.Addr, "ZEISH_JOIN_TOKEN=" + join,
			"ZEISH_CLUSTER_ALLOW_HTTP=on", "ZEISH_SANDBOXD=" + e.sandboxd, "ZEISH_TEMPLATE_CACHE=" + e.cacheDir,
			"ZEISH_LOG_LEVEL=warn"}, env...)}
	if err := node.Start(ctx); err != nil {
		return nil, err
	}
	key, err := cp.AdminKey()
	if err == nil {
		err = waitNodeLive(ctx, cp.Addr, key, id)
	}
	if err != nil {
		node.Stop()
		return nil, err
	}
	return node, nil
}

// createAndClone times a create's answer and, once it runs, a clone's
// answer, then deletes both.
func createAndClone(ctx context.Context, c *zeish.Client, memMiB int) (createMS, cloneMS float64, err error) {
	t0 := time.Now()
	sb, err := c.CreateSandbox(ctx, zeish.CreateSandboxRequest{Template: "base", MemoryMiB: memMiB})
	if err != nil {
		return 0, 0, err
	}
	createMS = ms(time.Since(t0))
	defer c.DeleteSandbox(context.WithoutCancel(ctx), sb.ID, zeish.Wait())
	if _, err := c.WaitForState(ctx, sb.ID, sandbox.StateRunning); err != nil {
		return 0, 0, err
	}
	t0 = time.Now()
	res, err := c.CloneSandbox(ctx, sb.ID, zeish.CloneRequest{})
	if err != nil {
		return 0, 0, err
	}
	cloneMS = ms(time.Since(t0))
	for _, kid := range res.Sandboxes {
		c.WaitForState(ctx, kid.ID, sandbox.StateRunning)
		c.DeleteSandbox(context.WithoutCancel(ctx), kid.ID, zeish.Wait())
	}
	return createMS, cloneMS, nil
}

// waitNodeLive polls the control plane's node list until id is live.
func waitNodeLive(ctx context.Context, addr, key, id string) error {
	deadline := time.Now().Add(2 * time.Minute)
	for time.Now().Before(deadline) {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+api.BasePath+"/admin/nodes", nil)
		req.Header.Set("Authorization", "Bearer "+key)
		if resp, err := http.DefaultClient.Do(req); err == nil {
			var list api.NodeList
			json.NewDecoder(resp.Body).Decode(&list)
			resp.Body.Close()
			for _, n := range list.Nodes {
				if n.ID == id && n.Live && n.Healthy {
					return nil
				}
			}
		}
		time.Sleep(200 * time.Millisecond)
	}
	return fmt.Errorf("node %s never became live", id)
}
