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

	"github.com/zeish/zeish/internal/control"
	"github.com/zeish/zeish/sandbox"
)

// E2B's lists of sandboxes: filtered by metadata, state and template, paged.

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

const maxPage = 100

// listV2 filters by metadata, state and template, and pages with
// nextToken: the id of the last sandbox of the previous page.
func (f *Facade) listV2(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	md, err := metadataFilter(q.Get("metadata"))
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	states := []string{"running", "paused"}
	if v := q.Get("state"); v != "" {
		states = strings.Split(v, ",")
		for _, s := range states {
			if s != "running" && s != "paused" {
				writeError(w, http.StatusBadRequest, fmt.Sprintf("state %q: want running or paused", s))
				return
			}
		}
	}
	limit := maxPage
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > maxPage {
			writeError(w, http.StatusBadRequest, fmt.Sprintf("limit %q: want 1..%d", v, maxPage))
			return
		}
		limit = n
	}
	all, err := f.all(r.Context())
	if err != nil {
		f.fail(w, err)
		return
	}
	if after := q.Get("nextToken"); after != "" {
		i := slices.IndexFunc(all, func(sb sandbox.Sandbox) bool { return sb.ID == after })
		if i < 0 {
			writeError(w, http.StatusBadRequest, "nextToken is not valid")
			return
		}
		all = all[i+1:]
	}
	out := []map[string]any{}
	var last string
	for _, sb := range all {
		st, _ := state(sb.State)
		if !slices.Contains(states, st) || !matches(sb, md) || (q.Get("template") != "" && sb.Template != q.Get("template")) {
			continue
		}
		if len(out) == limit {
			// Another match exists: the next page starts after last.
			w.Header().Set("X-Next-Token", last)
			break
		}
		out = append(out, f.detail(sb))
		last = sb.ID
	}
	writeJSON(w, http.StatusOK, out)
}
