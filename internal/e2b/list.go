package e2b

import (
	"fmt"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

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
