package cli

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/zeish/zeish/api"
	"github.com/zeish/zeish/sandbox"
)

var (
	child2   = sandbox.Sandbox{ID: "sbx_2", Name: "fork-1", State: sandbox.StateRunning, ParentID: "sbx_1", Template: "base", VCPUs: 1, MemoryMiB: 512}
	child3   = sandbox.Sandbox{ID: "sbx_3", Name: "fork-2", State: sandbox.StateRunning, ParentID: "sbx_1", Template: "base", VCPUs: 1, MemoryMiB: 512}
	cloned   = api.CloneResponse{PauseMS: 42, Sandboxes: []sandbox.Sandbox{child2, child3}}
	lineage1 = api.Lineage{
		Sandbox:   api.LineageEntry{ID: "sbx_1", Name: "brave-otter-42", State: sandbox.StateRunning, ParentID: "sbx_0"},
		Ancestors: []api.LineageEntry{{ID: "sbx_0", Name: "root", State: sandbox.StateStopped}},
		Descendants: []api.LineageEntry{
			{ID: "sbx_2", Name: "fork-1", State: sandbox.StateRunning, ParentID: "sbx_1"},
			{ID: "sbx_3", Name: "fork-2", State: sandbox.StatePaused, ParentID: "sbx_1"},
			{ID: "sbx_4", Name: "grandchild", State: sandbox.StateDestroyed, ParentID: "sbx_2"},
		},
	}
	snp1 = sandbox.Snapshot{ID: "snp_1", SandboxID: "sbx_1", Name: "before-tests", SizeBytes: 3 << 29, IncludeRAM: true,
		CreatedAt: time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)}
	restored = api.RestoreResponse{Snapshot: snp1, Sandbox: sbx1}
	events1  = []api.Event{
		{Type: "state", Sandbox: withState(sbx1, sandbox.StateStopping, time.Date(2030, 1, 1, 0, 0, 1, 0, time.UTC))},
		{Type: "state", Sandbox: withState(sbx1, sandbox.StateStopped, time.Date(2030, 1, 1, 0, 0, 2, 0, time.UTC))},
	}
)

func withState(sb sandbox.Sandbox, s sandbox.State, at time.Time) sandbox.Sandbox {
	sb.State, sb.UpdatedAt = s, at
	return sb
}

// lifecycleRoutes adds the lifecycle, clone, lineage, snapshot and event
// routes to the fake. Asynchronous calls answer 202, or 200 with ?wait=true.
func lifecycleRoutes(f *fake, mux *http.ServeMux, authed func(http.HandlerFunc) http.HandlerFunc, send func(http.ResponseWriter, int, any)) {
	async := func(v any) http.HandlerFunc {
		return authed(func(w http.ResponseWriter, r *http.Request) {
			status := http.StatusAccepted
			if r.URL.Query().Get("wait") == "true" {
				status = http.StatusOK
			}
			send(w, status, v)
		})
	}
	for _, action := range []string{"pause", "resume", "stop", "start"} {
		mux.HandleFunc("POST /api/v1/public/sandboxes/{id}/"+action, async(sbx1))
	}
	mux.HandleFunc("POST /api/v1/public/sandboxes/{id}/clone", async(cloned))
	mux.HandleFunc("POST /api/v1/public/sandboxes/{id}/fork", async(cloned))
	mux.HandleFunc("GET /api/v1/public/sandboxes/{id}/lineage", authed(func(w http.ResponseWriter, _ *http.Request) { send(w, 200, lineage1) }))
	mux.HandleFunc("POST /api/v1/public/sandboxes/{id}/snapshots", authed(func(w http.ResponseWriter, _ *http.Request) { send(w, 201, snp1) }))
	mux.HandleFunc("GET /api/v1/public/sandboxes/{id}/snapshots", authed(func(w http.ResponseWriter, _ *http.Request) {
		send(w, 200, api.SnapshotList{Snapshots: []sandbox.Snapshot{snp1}})
	}))
	mux.HandleFunc("GET /api/v1/public/snapshots/{snp}", authed(func(w http.ResponseWriter, _ *http.Request) { send(w, 200, snp1) }))
	mux.HandleFunc("DELETE /api/v1/public/snapshots/{snp}", authed(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(204) }))
	mux.HandleFunc("POST /api/v1/public/snapshots/{snp}/restore", async(restored))
	mux.HandleFunc("GET /api/v1/public/sandboxes/{id}/events", authed(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprint(w, ": keep-alive\n\n")
		for _, ev := range events1 {
			b, _ := json.Marshal(ev)
			fmt.Fprintf(w, "event: state\ndata: %s\n\n", b)
		}
		w.(http.Flusher).Flush()
		f.mu.Lock()
		hold := f.holdEvents
		f.mu.Unlock()
		if hold {
			<-r.Context().Done()
		}
	}))
}

func TestLifecycleCommandsSendWait(t *testing.T) {
	tests := []struct {
		args      []string
		wantPath  string
		wantQuery string
	}{
		{[]string{"sandboxes", "pause", "sbx_1"}, "/api/v1/public/sandboxes/sbx_1/pause", ""},
		{[]string{"sbx", "resume", "sbx_1", "--wait"}, "/api/v1/public/sandboxes/sbx_1/resume", "wait=true"},
		{[]string{"sbx", "stop", "sbx_1"}, "/api/v1/public/sandboxes/sbx_1/stop", ""},
		{[]string{"sbx", "start", "sbx_1", "--wait"}, "/api/v1/public/sandboxes/sbx_1/start", "wait=true"},
		{[]string{"sbx", "clone", "sbx_1", "--wait"}, "/api/v1/public/sandboxes/sbx_1/clone", "wait=true"},
		{[]string{"sbx", "fork", "sbx_1"}, "/api/v1/public/sandboxes/sbx_1/clone", ""},
		{[]string{"snapshots", "restore", "snp_1", "--wait"}, "/api/v1/public/snapshots/snp_1/restore", "wait=true"},
		{[]string{"snap", "restore", "snp_1"}, "/api/v1/public/snapshots/snp_1/restore", ""},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			f := newFake(t)
			r := zeishctl(t, f.URL, nil, tt.args...)
			if r.code != 0 || r.stderr != "" {
				t.Fatalf("code %d stderr %q", r.code, r.stderr)
			}
			calls := f.log()
			if len(calls) != 1 || calls[0].method != "POST" || calls[0].path != tt.wantPath || calls[0].query != tt.wantQuery {
				t.Errorf("calls %+v, want one POST %s?%s", calls, tt.wantPath, tt.wantQuery)
			}
		})
	}
}

func TestCloneSendsOnlySetFlags(t *testing.T) {
	tests := []struct {
		name     string
		flags    []string
		wantBody string
	}{
		{"no flags", nil, `{}`},
		{"count and name", []string{"--count", "3", "--name", "try"}, `{"name":"try","count":3}`},
		{"placement any", []string{"--count", "6", "--placement", "any"}, `{"count":6,"placement":"any"}`},
		{"count 1 set explicitly is sent", []string{"--count=1"}, `{"count":1}`},
		{"branch and pr", []string{"--git-branch", "fix-1", "--pr-number", "12"}, `{"git_branch":"fix-1","pr_number":12}`},
		{"zero values the user set are sent", []string{"--git-branch", "", "--pr-number", "0", "--max-cost-micros", "0", "--browser=false", "--desktop=false"},
			`{"git_branch":"","pr_number":0,"max_cost_micros":0,"browser":false,"desktop":false}`},
		{"bools and cost", []string{"--browser", "--desktop=true", "--max-cost-micros", "250000"}, `{"max_cost_micros":250000,"browser":true,"desktop":true}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFake(t)
			r := zeishctl(t, f.URL, nil, append([]string{"sandboxes", "clone", "sbx_1"}, tt.flags...)...)
			if r.code != 0 {
				t.Fatalf("code %d: %s", r.code, r.stderr)
			}
			calls := f.log()
			if len(calls) != 1 {
				t.Fatalf("calls %+v", calls)
			}
			if !sameJSON(t, calls[0].body, tt.wantBody) {
				t.Errorf("body %s, want %s", calls[0].body, tt.wantBody)
			}
		})
	}
}

func sameJSON(t *testing.T, a, b string) bool {
	t.Helper()
	var va, vb any
	if err := json.Unmarshal([]byte(a), &va); err != nil {
		t.Fatalf("bad JSON %q: %v", a, err)
	}
	if err := json.Unmarshal([]byte(b), &vb); err != nil {
		t.Fatalf("bad JSON %q: %v", b, err)
	}
	return mustMarshal(va) == mustMarshal(vb)
}

func TestTextOutput(t *testing.T) {
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"sbx", "clone", "sbx_1", "--count", "2"}, "paused sbx_1 for 42 ms (pause_ms) to fork it\n" +
			"ID     NAME    STATE    TEMPLATE  VCPUS  MEM     CREATED\n" +
			"sbx_2  fork-1  running  base      1      512MiB  -\n" +
			"sbx_3  fork-2  running  base      1      512MiB  -\n"},
		{[]string{"sbx", "lineage", "sbx_1"}, "" +
			"SANDBOX         NAME            STATE      CREATED\n" +
			"sbx_0           root            stopped    -\n" +
			"└─ sbx_1        brave-otter-42  running    -  <- this\n" +
			"   ├─ sbx_2     fork-1          running    -\n" +
			"   │  └─ sbx_4  grandchild      destroyed  -\n" +
			"   └─ sbx_3     fork-2          paused     -\n"},
		{[]string{"snapshots", "list", "sbx_1"}, "" +
			"ID     NAME          SANDBOX  SIZE    CREATED\n" +
			"snp_1  before-tests  sbx_1    1.5GiB  " + age(snp1.CreatedAt) + "\n"},
		{[]string{"snapshots", "restore", "snp_1"}, "restored sbx_1 to snapshot before-tests (snp_1); it is running\n"},
		{[]string{"snapshots", "delete", "snp_1"}, "deleted snapshot snp_1\n"},
		{[]string{"snapshots", "delete", "snp_1", "-o", "json"}, ""},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			f := newFake(t)
			r := zeishctl(t, f.URL, nil, tt.args...)
			if r.code != 0 || r.stderr != "" {
				t.Fatalf("code %d stderr %q", r.code, r.stderr)
			}
			if r.stdout != tt.want {
				t.Errorf("stdout:\n%s\nwant:\n%s", r.stdout, tt.want)
			}
		})
	}
}

func TestEventsCommand(t *testing.T) {
	f := newFake(t)
	var wantText, wantJSON strings.Builder
	for _, ev := range events1 {
		fmt.Fprintf(&wantText, "%s  sbx_1  brave-otter-42  %s\n", ev.Sandbox.UpdatedAt.Local().Format(time.RFC3339), ev.Sandbox.State)
		b, _ := json.Marshal(ev)
		wantJSON.Write(append(b, '\n'))
	}
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"sandboxes", "events", "sbx_1"}, wantText.String()},
		{[]string{"sandboxes", "events", "sbx_1", "-o", "json"}, wantJSON.String()},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			r := zeishctl(t, f.URL, nil, tt.args...)
			if r.code != 0 || r.stderr != "" || r.stdout != tt.want {
				t.Errorf("code %d stderr %q stdout:\n%s\nwant:\n%s", r.code, r.stderr, r.stdout, tt.want)
			}
			// One JSON object per line.
			if len(tt.args) > 3 {
				sc := bufio.NewScanner(strings.NewReader(r.stdout))
				for sc.Scan() {
					var ev api.Event
					if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
						t.Errorf("line %q: %v", sc.Text(), err)
					}
				}
			}
		})
	}

	t.Run("Ctrl-C ends it quietly", func(t *testing.T) {
		f.mu.Lock()
		f.holdEvents = true
		f.mu.Unlock()
		ctx, cancel := context.WithCancel(context.Background())
		out := &notifyingBuffer{lines: make(chan struct{}, 8)}
		var errOut bytes.Buffer
		done := make(chan int)
		go func() {
			done <- run(ctx, []string{"--api-url", f.URL + "/api/v1", "--api-key", "good-key", "sbx", "events", "sbx_1"},
				streams{inIsTerminal: true, out: out, err: &errOut})
		}()
		for range events1 {
			<-out.lines
		}
		cancel() // what signal.NotifyContext does on SIGINT
		select {
		case code := <-done:
			if code != 0 || errOut.Len() != 0 {
				t.Errorf("code %d stderr %q", code, errOut.String())
			}
		case <-time.After(5 * time.Second):
			t.Fatal("events did not stop on cancel")
		}
	})

	r := zeishctl(t, f.URL, nil, "sbx", "events", "sbx_9")
	if r.code != 1 || !strings.Contains(r.stderr, "no sandbox sbx_9 (code not_found)") {
		t.Errorf("unknown sandbox: %+v", r)
	}
}

// notifyingBuffer signals each write, so a test can wait for output.
type notifyingBuffer struct {
	bytes.Buffer
	lines chan struct{}
}

func (b *notifyingBuffer) Write(p []byte) (int, error) {
	n, err := b.Buffer.Write(p)
	b.lines <- struct{}{}
	return n, err
}

func TestWaitProgressOnlyOnATerminal(t *testing.T) {
	tests := []struct {
		name      string
		args      []string
		want      any
		wantFirst call // the asynchronous call
		wantWaits []string
		wantLine  string
	}{
		{"create", []string{"sbx", "create", "--wait", "-o", "json"}, sbx1,
			call{method: "POST", path: "/api/v1/public/sandboxes", body: "{}"}, []string{"sbx_1"}, "waiting for sbx_1: running (0s)"},
		{"start", []string{"sbx", "start", "sbx_1", "--wait", "-o", "json"}, sbx1,
			call{method: "POST", path: "/api/v1/public/sandboxes/sbx_1/start"}, []string{"sbx_1"}, "waiting for sbx_1: running (0s)"},
		{"clone", []string{"sbx", "clone", "sbx_1", "--count", "2", "--wait", "-o", "json"}, api.CloneResponse{PauseMS: 42, Sandboxes: []sandbox.Sandbox{sbx1, sbx1}},
			call{method: "POST", path: "/api/v1/public/sandboxes/sbx_1/clone", body: `{"count":2}`}, []string{"sbx_2", "sbx_3"}, "waiting for 2 sandboxes: 2 running (0s)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, terminal := range []bool{false, true} {
				f := newFake(t)
				var out, errOut bytes.Buffer
				args := append([]string{"--api-url", f.URL + "/api/v1", "--api-key", "good-key"}, tt.args...)
				code := run(context.Background(), args, streams{inIsTerminal: true, out: &out, err: &errOut, errIsTerminal: terminal})
				if code != 0 {
					t.Fatalf("terminal=%v: code %d stderr %q", terminal, code, errOut.String())
				}
				calls := f.log()
				if !terminal {
					if errOut.Len() != 0 {
						t.Errorf("progress drawn off a terminal: %q", errOut.String())
					}
					if len(calls) != 1 || calls[0].query != "wait=true" {
						t.Errorf("off a terminal: calls %+v, want one with wait=true", calls)
					}
					continue
				}
				// The fake's /wait answers sbx1 for any sandbox: what is
				// printed is what the waits returned.
				if !sameJSON(t, out.String(), mustMarshal(tt.want)) {
					t.Errorf("stdout %s, want %s", out.String(), mustMarshal(tt.want))
				}
				first := calls[0]
				if first.method != tt.wantFirst.method || first.path != tt.wantFirst.path || first.query != "" ||
					(tt.wantFirst.body != "" && !sameJSON(t, first.body, tt.wantFirst.body)) {
					t.Errorf("first call %+v, want %+v without wait", first, tt.wantFirst)
				}
				var waited []string
				for _, c := range calls[1:] {
					if strings.HasSuffix(c.path, "/wait") {
						waited = append(waited, strings.TrimSuffix(strings.TrimPrefix(c.path, "/api/v1/public/sandboxes/"), "/wait"))
					}
				}
				if strings.Join(waited, ",") != strings.Join(tt.wantWaits, ",") {
					t.Errorf("waited on %v, want %v", waited, tt.wantWaits)
				}
				stderr := errOut.String()
				if !strings.HasPrefix(stderr, "\r"+tt.wantLine+"\x1b[K") || !strings.HasSuffix(stderr, "\r\x1b[K") {
					t.Errorf("progress %q, want it to start with %q and end erased", stderr, tt.wantLine)
				}
			}
		})
	}
}

func TestCloneUsageErrors(t *testing.T) {
	f := newFake(t)
	for _, args := range [][]string{
		{"sbx", "clone", "sbx_1", "--count", "0"},
		{"sbx", "clone", "sbx_1", "--count", "17"},
		{"sbx", "clone", "sbx_1", "--browser=maybe"},
		{"sbx", "clone"},
	} {
		r := zeishctl(t, f.URL, nil, args...)
		if r.code != 2 || len(f.log()) != 0 {
			t.Errorf("%v: code %d stderr %q, %d calls", args, r.code, r.stderr, len(f.log()))
		}
	}
}
