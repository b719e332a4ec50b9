package e2b

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"sync"
	"time"

	"github.com/zeish/zeish/errdefs"
	"github.com/zeish/zeish/guest"
)

// Metrics, as E2B keeps them: a sample of the sandbox's CPU, memory and
// disk every few seconds, from inside the guest (the agent's stats), kept
// where the sandbox's envd is served (its node) and asked for by
// getMetrics through envd. Sampling starts with the first envd request for
// a sandbox (create and connect send one) and stops a minute after the
// sandbox stops answering (killed, paused, stopped); connecting again
// starts it again. Samples are kept for keepSamples, at most maxSamples per
// sandbox.

const (
	sampleEvery = 5 * time.Second
	maxSamples  = int(2 * time.Hour / sampleEvery)
	keepSamples = 2 * time.Hour
	// quietFor is how long a sandbox may not answer before its sampling
	// stops.
	quietFor = time.Minute
)

// metric is one sample, in E2B's SandboxMetric words.
type metric struct {
	Timestamp     time.Time `json:"timestamp"`
	TimestampUnix int64     `json:"timestampUnix"`
	CPUCount      int       `json:"cpuCount"`
	CPUUsedPct    float64   `json:"cpuUsedPct"`
	MemUsed       uint64    `json:"memUsed"`
	MemTotal      uint64    `json:"memTotal"`
	MemCache      uint64    `json:"memCache"`
	DiskUsed      uint64    `json:"diskUsed"`
	DiskTotal     uint64    `json:"diskTotal"`
}

// toMetric turns the guest's counters into a sample; prev (zero: since
// boot) is the last sample's, for the CPU's use between the two.
func toMetric(st, prev guest.SystemStats) metric {
	busy, total := st.CPUBusy-prev.CPUBusy, st.CPUTotal-prev.CPUTotal
	if st.CPUTotal < prev.CPUTotal || st.CPUBusy < prev.CPUBusy { // a reboot in between
		busy, total = st.CPUBusy, st.CPUTotal
	}
	pct := 0.0
	if total > 0 {
		pct = math.Round(float64(busy)/float64(total)*10000) / 100
	}
	// Used memory as the kernel's free(1) counts it: neither free nor
	// buffers nor page cache.
	used := st.MemTotal - min(st.MemTotal, st.MemFree+st.MemBuffers+st.MemCached)
	return metric{
		Timestamp: st.Time.UTC().Truncate(time.Second), TimestampUnix: st.Time.Unix(),
		CPUCount: st.CPUCount, CPUUsedPct: pct,
		MemUsed: used, MemTotal: st.MemTotal, MemCache: st.MemCached,
		DiskUsed: st.DiskTotal - min(st.DiskTotal, st.DiskAvailable), DiskTotal: st.DiskTotal,
	}
}

// series is one sandbox's samples and its sampler.
type series struct {
	samples []metric
	last    guest.SystemStats // the counters of the last sample
	token   string            // the token the sampler uses
	running bool              // a sampler goroutine is on it
	ended   time.Time         // when its sampler stopped
}

// samplers holds every sandbox's series this process samples.
type samplers struct {
	mu sync.Mutex
	m  map[string]*series
	// agent finds a sandbox's running agent with a token (Backend.SandboxAgent).
	agent func(ctx context.Context, id, token string) (*guest.Client, func(), error)
	every time.Duration
	stop  chan struct{} // closed by close: every sampler ends
}

func newSamplers(agent func(ctx context.Context, id, token string) (*guest.Client, func(), error)) *samplers {
	return &samplers{m: map[string]*series{}, agent: agent, every: sampleEvery, stop: make(chan struct{})}
}

// touch makes sure sandbox id is sampled, with token from now on (a newer
// token outlives an older one).
func (s *samplers) touch(id, token string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	sr := s.m[id]
	if sr == nil {
		// Old series go when a new one comes, not on every request.
		s.drop(time.Now())
		sr = &series{}
		s.m[id] = sr
	}
	sr.token = token
	if !sr.running {
		sr.running = true
		go s.run(id)
	}
}

// drop forgets series whose sampling ended keepSamples ago.
func (s *samplers) drop(now time.Time) {
	for id, sr := range s.m {
		if !sr.running && now.Sub(sr.ended) > keepSamples {
			delete(s.m, id)
		}
	}
}

// forget drops a sandbox's series (it was killed through this facade); its
// sampler ends at its next tick.
func (s *samplers) forget(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if sr := s.m[id]; sr != nil {
		sr.token = ""
		delete(s.m, id)
	}
}

// run samples sandbox id until it has not answered for quietFor, its token
// stops working or it is forgotten.
func (s *samplers) run(id string) {
	quietSince := time.Time{}
	t := time.NewTicker(s.every)
	defer t.Stop()
	for {
		done, err := s.sample(id)
		switch {
		case done:
			return
		case err == nil:
			quietSince = time.Time{}
		case quietSince.IsZero():
			quietSince = time.Now()
		case time.Since(quietSince) > quietFor || errdefs.Is(err, errdefs.ClassUnauthenticated):
			s.end(id)
			return
		}
		select {
		case <-t.C:
		case <-s.stop:
			return
		}
	}
}

// sample takes one sample of sandbox id. done says its series is gone.
func (s *samplers) sample(id string) (done bool, err error) {
	s.mu.Lock()
	sr := s.m[id]
	token := ""
	if sr != nil {
		token = sr.token
	}
	s.mu.Unlock()
	if token == "" {
		return true, nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), s.every)
	defer cancel()
	agent, release, err := s.agent(ctx, id, token)
	if err != nil {
		return false, err
	}
	defer release()
	st, err := agent.Stats(ctx)
	if err != nil {
		return false, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	sr.samples = append(sr.samples, toMetric(st, sr.last))
	if len(sr.samples) > maxSamples {
		sr.samples = sr.samples[len(sr.samples)-maxSamples:]
	}
	sr.last = st
	return false, nil
}

func (s *samplers) end(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if sr := s.m[id]; sr != nil {
		sr.running, sr.ended = false, time.Now()
	}
}

// between is a copy of sandbox id's samples from start to end (zero: open).
func (s *samplers) between(id string, start, end time.Time) []metric {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := []metric{}
	if sr := s.m[id]; sr != nil {
		for _, m := range sr.samples {
			if (start.IsZero() || !m.Timestamp.Before(start)) && (end.IsZero() || !m.Timestamp.After(end)) {
				out = append(out, m)
			}
		}
	}
	return out
}

func (s *samplers) close() {
	close(s.stop)
}

// sampled starts sampling the sandbox of every envd request that reached
// it.
func (f *Facade) sampled(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f.samples.touch(targetFrom(r.Context()).id, r.Header.Get("X-Access-Token"))
		h.ServeHTTP(w, r)
	})
}

// seriesPath is where a node's envd answers a sandbox's samples: not one of
// envd's routes, the facade's own, so getMetrics reaches the samples on the
// sandbox's node as envd's other calls do, also while it is paused.
const seriesPath = "/metrics/series"

// withSeries answers seriesPath for a sandbox whose token is good in any
// state (the samples outlive a pause); the rest goes on to h.
func (f *Facade) withSeries(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != seriesPath || r.Method != http.MethodGet {
			h.ServeHTTP(w, r)
			return
		}
		id := r.Header.Get("E2b-Sandbox-Id")
		if err := f.app.CheckToken(r.Context(), id, r.Header.Get("X-Access-Token")); err != nil {
			writeError(w, httpStatus(err), err.Error())
			return
		}
		start, end, err := metricsRange(r.URL.Query())
		if err != nil {
			writeError(w, http.StatusBadRequest, err.Error())
			return
		}
		writeJSON(w, http.StatusOK, f.samples.between(id, start, end))
	})
}

// metricsRange reads getMetrics' start and end (unix seconds, both optional).
func metricsRange(q url.Values) (start, end time.Time, err error) {
	for _, p := range []struct {
		name string
		dst  *time.Time
	}{{"start", &start}, {"end", &end}} {
		v := q.Get(p.name)
		if v == "" {
			continue
		}
		n, perr := strconv.ParseInt(v, 10, 64)
		if perr != nil || n < 0 {
			return start, end, fmt.Errorf("%s %q: want unix seconds", p.name, v)
		}
		*p.dst = time.Unix(n, 0).UTC()
	}
	if !start.IsZero() && !end.IsZero() && end.Before(start) {
		return start, end, fmt.Errorf("end %d is before start %d", end.Unix(), start.Unix())
	}
	return start, end, nil
}

// envdMetrics is envd's GET /metrics: the sandbox's use now.
func (f *Facade) envdMetrics(w http.ResponseWriter, r *http.Request) {
	st, err := targetFrom(r.Context()).agent.Stats(r.Context())
	if err != nil {
		writeError(w, httpStatus(err), err.Error())
		return
	}
	m := toMetric(st, guest.SystemStats{})
	writeJSON(w, http.StatusOK, map[string]any{
		"ts": m.TimestampUnix, "cpu_count": m.CPUCount, "cpu_used_pct": m.CPUUsedPct,
		"mem_total_mib": m.MemTotal >> 20, "mem_used_mib": m.MemUsed >> 20,
		"mem_total": m.MemTotal, "mem_used": m.MemUsed, "mem_cache": m.MemCache,
		"disk_used": m.DiskUsed, "disk_total": m.DiskTotal,
	})
}

// envdCall makes one request to the sandbox's envd, wherever it is served
// (this process, or its node through the control plane's forwarding), as
// the holder of token.
func (f *Facade) envdCall(ctx context.Context, method, id, token, pathAndQuery string) *httptest.ResponseRecorder {
	req := httptest.NewRequestWithContext(ctx, method, Prefix+"/envd"+pathAndQuery, nil)
	req.Header.Set("E2b-Sandbox-Id", id)
	req.Header.Set("E2b-Sandbox-Port", envdPort)
	req.Header.Set("X-Access-Token", token)
	rec := httptest.NewRecorder()
	f.envdServer().ServeHTTP(rec, req)
	return rec
}

func (f *Facade) envdServer() http.Handler {
	if f.envd != nil {
		return f.envd
	}
	return f.envdLocal
}

// startSampling has the sandbox's node sample it from now on (envd's GET
// /metrics through it), in the background: an answer to create or connect
// does not wait for it.
func (f *Facade) startSampling(id, token string) {
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if rec := f.envdCall(ctx, http.MethodGet, id, token, "/metrics"); rec.Code != http.StatusOK {
			f.log.Debug("e2b: start sampling", "sandbox", id, "status", rec.Code, "body", rec.Body.String())
		}
	}()
}

// metrics is getMetrics: the samples of the sandbox's node.
func (f *Facade) metrics(w http.ResponseWriter, r *http.Request) {
	sb, err := f.lookup(r.Context(), r.PathValue("id"))
	if err != nil {
		f.fail(w, err)
		return
	}
	if _, _, err := metricsRange(r.URL.Query()); err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	token, err := f.app.TokenUntil(r.Context(), callerFrom(r.Context()), sb.ID, tokenExpiry(time.Now()))
	if err != nil {
		f.fail(w, err)
		return
	}
	q := url.Values{}
	for _, k := range []string{"start", "end"} {
		if v := r.URL.Query().Get(k); v != "" {
			q.Set(k, v)
		}
	}
	rec := f.envdCall(r.Context(), http.MethodGet, sb.ID, token, seriesPath+"?"+q.Encode())
	var out []metric
	if rec.Code != http.StatusOK || json.Unmarshal(rec.Body.Bytes(), &out) != nil {
		writeError(w, http.StatusInternalServerError, fmt.Sprintf("metrics of sandbox %s from its node: %d %s", sb.ID, rec.Code, rec.Body))
		return
	}
	writeJSON(w, http.StatusOK, out)
}
