package server

import (
	"net/http"
	"strconv"
	"time"

	"github.com/zeish/zeish/internal/control"
)

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

// usage reports the account's usage in [from, to).
func (s *Server) usage(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
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
	rep, err := s.ctl.Usage(r.Context(), callerFrom(r.Context()), from, to)
	reply(w, r, http.StatusOK, rep, err)
}

// estimate is the pricing calculator.
func (s *Server) estimate(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	req := control.EstimateRequest{Size: q.Get("size")}
	ints := map[string]**int{"sandboxes": &req.Sandboxes, "vcpus": &req.VCPUs, "memory_mib": &req.MemoryMiB,
		"disk_mib": &req.DiskMiB, "minutes": &req.Minutes}
	for k := range q {
		if _, ok := ints[k]; !ok && k != "size" {
			writeError(w, r, invalid("unknown query parameter %q", k))
			return
		}
	}
	for k, dst := range ints {
		v := q.Get(k)
		if v == "" {
			continue
		}
		n, err := strconv.Atoi(v)
		if err != nil {
			writeError(w, r, invalid("%s=%q: want a whole number", k, v))
			return
		}
		*dst = &n
	}
	est, err := s.ctl.Estimate(req)
	reply(w, r, http.StatusOK, est, err)
}
