package e2b

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/zeish/zeish/internal/control"
	"github.com/zeish/zeish/sandbox"
)

// Sandbox.list (GET /v2/sandboxes) as E2B's API answers it: filtered by
// metadata, state, template and startedAfter (at or after, to the
// microsecond), ordered by start time (desc, newest first, unless
// order=asc), and paged by a keyset token (the last sandbox's start and
// id), so a sandbox removed between two pages does not break the next one.

const maxPage = 100

type listQuery struct {
	metadata     map[string]string
	states       []string
	template     string
	asc          bool
	startedAfter time.Time // zero: no bound
	limit        int
	after        *cursor // the page starts after it
}

// cursor is where a page ended.
type cursor struct {
	started time.Time
	id      string
}

func (c cursor) token() string { return strconv.FormatInt(c.started.UnixNano(), 10) + "_" + c.id }

func parseCursor(tok string) (*cursor, error) {
	ns, id, ok := strings.Cut(tok, "_")
	n, err := strconv.ParseInt(ns, 10, 64)
	if !ok || err != nil || !strings.HasPrefix(id, strings.TrimSuffix(sandbox.PrefixSandbox, "_")) {
		return nil, fmt.Errorf("nextToken %q is not valid", tok)
	}
	return &cursor{started: time.Unix(0, n).UTC(), id: id}, nil
}

func parseListQuery(q url.Values) (listQuery, error) {
	lq := listQuery{states: []string{"running", "paused"}, limit: maxPage, template: q.Get("template")}
	var err error
	if lq.metadata, err = metadataFilter(q.Get("metadata")); err != nil {
		return lq, err
	}
	if v := q.Get("state"); v != "" {
		lq.states = strings.Split(v, ",")
		for _, s := range lq.states {
			if s != "running" && s != "paused" {
				return lq, fmt.Errorf("state %q: want running or paused", s)
			}
		}
	}
	switch v := q.Get("order"); v {
	case "", "desc":
	case "asc":
		lq.asc = true
	default:
		return lq, fmt.Errorf("unknown order %q: want asc or desc", v)
	}
	if v := q.Get("startedAfter"); v != "" {
		t, err := time.Parse(time.RFC3339Nano, v)
		if err != nil {
			return lq, fmt.Errorf("startedAfter %q: want an RFC 3339 time", v)
		}
		lq.startedAfter = t.UTC().Truncate(time.Microsecond)
	}
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > maxPage {
			return lq, fmt.Errorf("limit %q: want 1..%d", v, maxPage)
		}
		lq.limit = n
	}
	if v := q.Get("nextToken"); v != "" {
		if lq.after, err = parseCursor(v); err != nil {
			return lq, err
		}
	}
	return lq, nil
}

// before says whether a comes before b in the listing's order.
func (lq listQuery) before(a, b cursor) bool {
	if !a.started.Equal(b.started) {
		return a.started.Before(b.started) == lq.asc
	}
	return a.id != b.id && (a.id < b.id) == lq.asc
}

func (lq listQuery) matches(sb sandbox.Sandbox) bool {
	st, ok := state(sb.State)
	return ok && slices.Contains(lq.states, st) && matches(sb, lq.metadata) &&
		(lq.template == "" || sb.Template == lq.template) &&
		(lq.startedAfter.IsZero() || !sb.CreatedAt.Truncate(time.Microsecond).Before(lq.startedAfter))
}

// page is the listing's page of all: the sandboxes that match, in order,
// after the token's, at most limit of them, and the next page's token ("":
// this is the last page).
func (lq listQuery) page(all []sandbox.Sandbox) ([]sandbox.Sandbox, string) {
	var out []sandbox.Sandbox
	for _, sb := range all {
		if lq.matches(sb) && (lq.after == nil || lq.before(*lq.after, cursor{sb.CreatedAt, sb.ID})) {
			out = append(out, sb)
		}
	}
	slices.SortFunc(out, func(a, b sandbox.Sandbox) int {
		if lq.before(cursor{a.CreatedAt, a.ID}, cursor{b.CreatedAt, b.ID}) {
			return -1
		}
		return 1
	})
	if len(out) <= lq.limit {
		return out, ""
	}
	out = out[:lq.limit]
	last := out[len(out)-1]
	return out, cursor{last.CreatedAt, last.ID}.token()
}

// all lists the caller's E2B-visible sandboxes, newest first.
func (f *Facade) all(ctx context.Context) ([]sandbox.Sandbox, error) {
	list, err := f.app.List(ctx, callerFrom(ctx), control.ListFilter{})
	if err != nil {
		return nil, err
	}
	var out []sandbox.Sandbox
	for _, sb := range list.Sandboxes {
		if _, ok := state(sb.State); ok {
			out = append(out, sb)
		}
	}
	sort.SliceStable(out, func(i, j int) bool {
		if !out[i].CreatedAt.Equal(out[j].CreatedAt) {
			return out[i].CreatedAt.After(out[j].CreatedAt)
		}
		return out[i].ID > out[j].ID
	})
	return out, nil
}

// metadataFilter parses E2B's metadata query: "k=v&k2=v2", its keys and
// values URL-encoded once more inside.
func metadataFilter(q string) (map[string]string, error) {
	if q == "" {
		return nil, nil
	}
	vals, err := url.ParseQuery(q)
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	for k, v := range vals {
		kk, err1 := url.QueryUnescape(k)
		vv, err2 := url.QueryUnescape(v[0])
		if err1 != nil || err2 != nil {
			return nil, fmt.Errorf("metadata %q is not URL-encoded", q)
		}
		out[kk] = vv
	}
	return out, nil
}

func matches(sb sandbox.Sandbox, md map[string]string) bool {
	for k, v := range md {
		if sb.Metadata[k] != v {
			return false
		}
	}
	return true
}

func (f *Facade) listV1(w http.ResponseWriter, r *http.Request) {
	md, err := metadataFilter(r.URL.Query().Get("metadata"))
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	all, err := f.all(r.Context())
	if err != nil {
		f.fail(w, err)
		return
	}
	out := []map[string]any{}
	for _, sb := range all {
		if st, _ := state(sb.State); st == "running" && matches(sb, md) {
			out = append(out, f.detail(sb))
		}
	}
	writeJSON(w, http.StatusOK, out)
}

// listV2 is Sandbox.list (listQuery, above).
func (f *Facade) listV2(w http.ResponseWriter, r *http.Request) {
	lq, err := parseListQuery(r.URL.Query())
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	all, err := f.all(r.Context())
	if err != nil {
		f.fail(w, err)
		return
	}
	page, next := lq.page(all)
	if next != "" {
		w.Header().Set("X-Next-Token", next)
	}
	out := []map[string]any{}
	for _, sb := range page {
		out = append(out, f.detail(sb))
	}
	writeJSON(w, http.StatusOK, out)
}
