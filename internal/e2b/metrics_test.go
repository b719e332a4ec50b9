package e2b

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"github.com/zeish/zeish/guest"
)

// E2B's SandboxMetric from two readings of the guest's counters: CPU use
// between them (since boot for the first), memory used as free(1) counts it
// and the page cache apart, disk used as total less what users may still
// use.
func TestToMetric(t *testing.T) {
	at := time.Date(2026, 5, 1, 12, 0, 5, 300, time.UTC)
	prev := guest.SystemStats{CPUBusy: 100, CPUTotal: 1000}
	st := guest.SystemStats{Time: at, CPUCount: 2, CPUBusy: 130, CPUTotal: 1200,
		MemTotal: 1000, MemFree: 200, MemBuffers: 50, MemCached: 300, MemAvailable: 600,
		DiskTotal: 5000, DiskAvailable: 1500}
	m := toMetric(st, prev)
	want := metric{Timestamp: at.Truncate(time.Second), TimestampUnix: at.Unix(), CPUCount: 2, CPUUsedPct: 15,
		MemUsed: 450, MemTotal: 1000, MemCache: 300, DiskUsed: 3500, DiskTotal: 5000}
	if m != want {
		t.Errorf("toMetric = %+v\nwant %+v", m, want)
	}
	if first := toMetric(st, guest.SystemStats{}); first.CPUUsedPct != 10.83 {
		t.Errorf("first sample's CPU (since boot) = %v, want 10.83", first.CPUUsedPct)
	}
	// Counters that went back (the guest rebooted) count from zero.
	if back := toMetric(guest.SystemStats{CPUBusy: 5, CPUTotal: 10}, prev); back.CPUUsedPct != 50 {
		t.Errorf("after a reboot: %v, want 50", back.CPUUsedPct)
	}
}

// getMetrics' series, on the sandbox's node: only with a good token, start
// and end (unix seconds) bounding it, bad bounds a 400.
func TestMetricsSeries(t *testing.T) {
	b := &fakeApp{}
	f := New(Options{App: b})
	defer f.Close()
	t0 := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	sr := &series{}
	for i := 0; i < 4; i++ {
		at := t0.Add(time.Duration(i) * sampleEvery)
		sr.samples = append(sr.samples, metric{Timestamp: at, TimestampUnix: at.Unix(), CPUCount: 1})
	}
	f.samples.m["sbx_m"] = sr
	get := func(query, token string) (int, []metric) {
		req := httptest.NewRequest("GET", Prefix+"/envd"+seriesPath+query, nil)
		req.Header.Set("E2b-Sandbox-Id", "sbx_m")
		req.Header.Set("X-Access-Token", token)
		w := httptest.NewRecorder()
		f.EnvdHandler().ServeHTTP(w, req)
		var out []metric
		json.Unmarshal(w.Body.Bytes(), &out)
		return w.Code, out
	}
	if code, all := get("", "good-token"); code != http.StatusOK || len(all) != 4 {
		t.Fatalf("all: %d %v", code, all)
	}
	start, end := t0.Add(sampleEvery).Unix(), t0.Add(2*sampleEvery).Unix()
	if code, some := get("?start="+itoa(start)+"&end="+itoa(end), "good-token"); code != http.StatusOK || len(some) != 2 || some[0].TimestampUnix != start {
		t.Fatalf("between: %d %v", code, some)
	}
	if code, _ := get("", "bad"); code != http.StatusUnauthorized {
		t.Errorf("bad token: %d", code)
	}
	for _, q := range []string{"?start=x", "?end=-1", "?start=" + itoa(end) + "&end=" + itoa(start)} {
		if code, _ := get(q, "good-token"); code != http.StatusBadRequest {
			t.Errorf("%s: %d, want 400", q, code)
		}
	}
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }
