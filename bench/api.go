package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/zeish/zeish/api"
	"github.com/zeish/zeish/internal/store"
	"github.com/zeish/zeish/internal/store/postgres"
	"github.com/zeish/zeish/internal/store/sqlite"
	"github.com/zeish/zeish/internal/testenv"
	"github.com/zeish/zeish/sandbox"
)

var (
	apiRows    = flag.Int("api-sandboxes", 1000, "api: sandboxes in the database")
	apiRate    = flag.Int("api-rate", 200, "api: requests per second")
	apiSeconds = flag.Int("api-seconds", 10, "api: seconds of load per call and store")
)

func init() {
	register(section{name: "api", about: "control-plane latency: get and list at a fixed request rate with many sandboxes in SQLite and in PostgreSQL", run: runAPI})
}

// runAPI fills a database with stopped sandboxes (records only: no VM is
// booted), starts a zeishd on it and sends get and list calls at a fixed
// rate, open loop (a slow answer does not slow the sender), for each store.
func runAPI(ctx context.Context, e *benchEnv) (*report, error) {
	r := &report{Section: "api", Title: fmt.Sprintf("control plane: %d sandboxes in the database, %d requests/s for %d s per call",
		*apiRows, *apiRate, *apiSeconds)}
	t := &table{Title: "latency (ms)", Header: []string{"store", "call", "p50", "p99", "max", "requests", "errors", "sent req/s", "answered req/s"}}
	r.Tables = append(r.Tables, t)
	kinds := []string{"sqlite", "postgres"}
	for _, kind := range kinds {
		var url string
		if kind == "postgres" {
			pg, err := testenv.StartPostgres()
			if err != nil {
				r.Notes = append(r.Notes, "postgres: not measured: "+err.Error())
				continue
			}
			defer pg.Stop()
			url = pg.URL("postgres")
		}
		res, err := apiLoad(ctx, e, kind, url)
		if err != nil {
			return r, fmt.Errorf("%s: %w", kind, err)
		}
		for _, c := range res {
			r.add(newSeries(kind+" "+c.call+" latency", "ms", c.ms))
			p99 := percentile(c.ms, 0.99)
			t.Rows = append(t.Rows, []string{kind, c.call, fmtNum(percentile(c.ms, 0.5)), fmtNum(p99), fmtNum(slices.Max(c.ms)),
				fmt.Sprint(len(c.ms)), fmt.Sprint(c.errors), fmt.Sprint(c.sent), fmtNum(c.rate)})
			r.addGoal(goal{Name: kind + " " + c.call + " p99", Target: "reported (issue 17 sets no number)", Value: p99, Unit: "ms", Met: c.errors == 0})
		}
	}
	return r, nil
}

type callLoad struct {
	call   string
	ms     []float64
	errors int
	sent   int     // the rate asked for
	rate   float64 // answers per second over the whole run
}

func apiLoad(ctx context.Context, e *benchEnv, kind, dbURL string) ([]callLoad, error) {
	dataDir := filepath.Join(e.tmp, "data-api-"+kind)
	env := []string{"ZEISH_SANDBOXD=" + e.sandboxd, "ZEISH_TEMPLATE_CACHE=" + e.cacheDir, "ZEISH_LOG_LEVEL=warn"}
	if dbURL != "" {
		env = append(env, "ZEISH_DATABASE_URL="+dbURL)
	}
	z := &testenv.Zeishd{Bin: e.zeishdBin, DataDir: dataDir, Env: env, OwnProcessGroup: true}
	// First start: the schema and the admin account.
	if err := z.Start(ctx); err != nil {
		return nil, err
	}
	key, err := z.AdminKey()
	z.Stop()
	if err != nil {
		return nil, err
	}
	ids, err := fillStore(ctx, dataDir, dbURL, *apiRows)
	if err != nil {
		return nil, err
	}
	if err := z.Start(ctx); err != nil {
		return nil, err
	}
	defer z.Stop()
	base := "http://" + z.Addr + api.BasePath + "/public/sandboxes"
	// A list of all 1,000 is a megabyte of JSON: it runs at a tenth of the
	// rate (the table says what each achieved).
	calls := []struct {
		name string
		rate int
		url  func() string
	}{
		{"get", *apiRate, func() string { return base + "/" + ids[rand.IntN(len(ids))] }},
		{"list, a page of 50", *apiRate, func() string {
			return base + "?limit=50&after=" + ids[rand.IntN(len(ids)-50)]
		}},
		{fmt.Sprintf("list, all %d", len(ids)), max(1, *apiRate/10), func() string { return base }},
	}
	var out []callLoad
	for _, c := range calls {
		l, err := openLoop(ctx, key, c.url, c.rate, time.Duration(*apiSeconds)*time.Second)
		if err != nil {
			return nil, err
		}
		l.call, l.sent = c.name, c.rate
		out = append(out, l)
	}
	return out, nil
}

// fillStore adds n stopped sandboxes of the admin account to the database
// zeishd left (it is stopped meanwhile), and returns their ids.
func fillStore(ctx context.Context, dataDir, dbURL string, n int) ([]string, error) {
	var st store.Store
	var err error
	if dbURL != "" {
		st, err = postgres.Open(ctx, dbURL)
	} else {
		st, err = sqlite.Open(ctx, filepath.Join(dataDir, "zeish.db"))
	}
	if err != nil {
		return nil, err
	}
	defer st.Close()
	accounts, err := st.ListAccounts(ctx)
	if err != nil || len(accounts) == 0 {
		return nil, fmt.Errorf("no admin account: %v", err)
	}
	acct := accounts[0].ID
	now := time.Now().UTC()
	var ids []string
	for i := 0; i < n; i += 100 {
		var batch []*store.SandboxRecord
		for j := i; j < min(n, i+100); j++ {
			id := sandbox.NewID(sandbox.PrefixSandbox)
			ids = append(ids, id)
			batch = append(batch, &store.SandboxRecord{Sandbox: sandbox.Sandbox{ID: id, Name: fmt.Sprintf("bench-%04d", j), AccountID: acct,
				State: sandbox.StateStopped, Template: "base", VCPUs: 1, MemoryMiB: 256, DiskMiB: 1024, Region: "local",
				Env: map[string]string{"N": fmt.Sprint(j)}, CreatedAt: now.Add(time.Duration(j) * time.Millisecond), UpdatedAt: now}})
		}
		if err := st.CreateSandboxes(ctx, batch...); err != nil {
			return nil, err
		}
	}
	return ids, nil
}

// openLoop sends a request every 1/rate seconds for d, each on its own
// goroutine, and returns every latency.
func openLoop(ctx context.Context, key string, url func() string, rate int, d time.Duration) (callLoad, error) {
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 256}, Timeout: 30 * time.Second}
	var (
		mu  sync.Mutex
		out callLoad
		wg  sync.WaitGroup
	)
	tick := time.NewTicker(time.Second / time.Duration(rate))
	defer tick.Stop()
	start := time.Now()
	for time.Since(start) < d {
		select {
		case <-ctx.Done():
			return out, ctx.Err()
		case <-tick.C:
		}
		wg.Add(1)
		go func(u string) {
			defer wg.Done()
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
			req.Header.Set("Authorization", "Bearer "+key)
			t0 := time.Now()
			resp, err := client.Do(req)
			ok := err == nil && resp.StatusCode == http.StatusOK
			if err == nil {
				io.Copy(io.Discard, resp.Body) // the whole answer counts
				resp.Body.Close()
			}
			ms := float64(time.Since(t0).Microseconds()) / 1000
			mu.Lock()
			out.ms = append(out.ms, ms)
			if !ok {
				out.errors++
			}
			mu.Unlock()
		}(url())
	}
	wg.Wait()
	out.rate = float64(len(out.ms)) / time.Since(start).Seconds()
	return out, nil
}

// percentile of xs (nearest rank), p in [0,1].
func percentile(xs []float64, p float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	i := int(p*float64(len(s))+0.5) - 1
	return s[max(0, min(len(s)-1, i))]
}
