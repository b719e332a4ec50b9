package server

import (
	"context"
	"net/http"
	"strconv"
	"time"

	"github.com/zeish/zeish/api"
	"github.com/zeish/zeish/internal/metering"
	"github.com/zeish/zeish/internal/store"
	"github.com/zeish/zeish/sandbox"
)

// view is a sandbox as the API shows it, its cost computed now from its
// recorded intervals (so it is always fresh).
func (s *Server) view(r *store.SandboxRecord) sandbox.Sandbox {
	sb := r.Sandbox
	sb.CostMicros = s.cost(r, time.Now())
	if r.ResumeImage != "" { // stopped: its saved state is an image
		sb.ImageDurable = s.durable(context.Background(), r.ResumeImage)
	}
	return sb
}

func (s *Server) cost(r *store.SandboxRecord, now time.Time) int64 {
	return metering.Measure(r, time.Time{}, time.Time{}, now, s.prices).CostMicros
}

func timeParam(q string, v string) (time.Time, error) {
	if v == "" {
		return time.Time{}, nil
	}
	t, err := time.Parse(time.RFC3339, v)
	if err != nil {
		return t, invalid("%s=%q: want an RFC 3339 time such as 2026-01-02T15:04:05Z", q, v)
	}
	return t, nil
}

// usage reports the account's usage in [from, to): by default since its
// first sandbox, until now.
func (s *Server) usage(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	now := time.Now().UTC()
	from, err := timeParam("from", q.Get("from"))
	if err != nil {
		writeError(w, r, err)
		return
	}
	to, err := timeParam("to", q.Get("to"))
	if err != nil {
		writeError(w, r, err)
		return
	}
	if to.IsZero() || to.After(now) {
		to = now
	}
	if from.After(to) {
		writeError(w, r, invalid("from must not be after to"))
		return
	}
	rows, err := s.store.ListSandboxes(r.Context(), store.SandboxFilter{AccountID: accountFrom(r.Context()).ID, IncludeDestroyed: true})
	if err != nil {
		writeError(w, r, err)
		return
	}
	out := api.UsageReport{From: from, To: to, Prices: api.Prices(s.prices), Sandboxes: []api.SandboxUsage{}}
	var total metering.Usage
	if from.IsZero() {
		// Since the account's first sandbox.
		out.From = to
		for _, row := range rows {
			if row.CreatedAt.Before(out.From) {
				out.From = row.CreatedAt
			}
		}
	}
	for _, row := range rows {
		// Only sandboxes that existed in the window.
		if !row.CreatedAt.Before(to) || (row.DestroyedAt != nil && row.DestroyedAt.Before(from)) {
			continue
		}
		u := metering.Measure(row, from, to, now, s.prices)
		u.NetInBytes, u.NetOutBytes = s.node.NetBytes(row)
		total = total.Add(u)
		out.Sandboxes = append(out.Sandboxes, api.SandboxUsage{SandboxID: row.ID, Name: row.Name, State: row.State, Usage: api.Usage(u)})
	}
	out.Total = api.Usage(total)
	writeJSON(w, http.StatusOK, out)
}

// estimate is the pricing calculator.
func (s *Server) estimate(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	for k := range q {
		switch k {
		case "sandboxes", "vcpus", "memory_mib", "disk_mib", "minutes", "size":
		default:
			writeError(w, r, invalid("unknown query parameter %q", k))
			return
		}
	}
	intParam := func(name string, def, lo, hi int) (int, error) {
		v := q.Get(name)
		if v == "" {
			return def, nil
		}
		n, err := strconv.Atoi(v)
		if err != nil || n < lo || n > hi {
			return 0, invalid("%s=%q: want a whole number within %d..%d", name, v, lo, hi)
		}
		return n, nil
	}
	n, err := intParam("sandboxes", 1, 1, 10000)
	if err != nil {
		writeError(w, r, err)
		return
	}
	minutes, err := intParam("minutes", 60, 1, 60*24*366)
	if err != nil {
		writeError(w, r, err)
		return
	}
	var vcpus, mem, disk int
	for _, p := range []struct {
		name string
		dst  *int
	}{{"vcpus", &vcpus}, {"memory_mib", &mem}, {"disk_mib", &disk}} {
		if *p.dst, err = intParam(p.name, 0, 1, 1<<30); err != nil {
			writeError(w, r, err)
			return
		}
	}
	size, err := sandbox.ResolveSize(q.Get("size"), vcpus, mem, disk)
	if err != nil {
		writeError(w, r, err)
		return
	}
	u := metering.Estimate(n, size.VCPUs, size.MemoryMiB, size.DiskMiB, time.Duration(minutes)*time.Minute, s.prices)
	writeJSON(w, http.StatusOK, api.PriceEstimate{Sandboxes: n, VCPUs: size.VCPUs, MemoryMiB: size.MemoryMiB, DiskMiB: size.DiskMiB,
		Minutes: minutes, Prices: api.Prices(s.prices), Usage: api.Usage(u)})
}

// EnforceBudgets has the control plane stop every sandbox whose cost
// reached its max_cost_micros and act on every timeout that passed, every
// interval, until ctx ends.
func (s *Server) EnforceBudgets(ctx context.Context, every time.Duration) {
	s.control.Enforce(ctx, every)
}
