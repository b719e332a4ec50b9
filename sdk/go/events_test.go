package zeish

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"testing/iotest"
	"time"

	"github.com/zeish/zeish/errdefs"
	"github.com/zeish/zeish/sandbox"
)

func stateJSON(id string, s State) string {
	b, _ := json.Marshal(Event{Type: "state", Sandbox: Sandbox{ID: id, State: s}})
	return string(b)
}

func TestEventStreamParsing(t *testing.T) {
	running, paused := stateJSON("sbx_1", sandbox.StateRunning), stateJSON("sbx_1", sandbox.StatePaused)
	// The same object split over data lines: joined with "\n", still JSON.
	multiLine := strings.Replace(strings.Replace(paused, `,"sandbox":`, "\ndata: ,\"sandbox\":", 1), `"state":"paused"`, "\ndata:\"state\":\"paused\"", 1)
	tests := []struct {
		name    string
		stream  string
		want    []State
		wantErr bool
	}{
		{"one event", "event: state\ndata: " + running + "\n\n", []State{"running"}, false},
		{"two events", "event: state\ndata: " + running + "\n\nevent: state\ndata: " + paused + "\n\n", []State{"running", "paused"}, false},
		{"keep-alive comments are skipped", ": ping\n\n:\nevent: state\n: mid-event comment\ndata: " + running + "\n\n: ping\n\n", []State{"running"}, false},
		{"multi-line data is joined", "event: state\ndata: " + multiLine + "\n\n", []State{"paused"}, false},
		{"no space after the colon", "event:state\ndata:" + running + "\n\n", []State{"running"}, false},
		{"CRLF line ends", "event: state\r\ndata: " + running + "\r\n\r\n", []State{"running"}, false},
		{"CR line ends", "event: state\rdata: " + running + "\r\r", []State{"running"}, false},
		{"id and retry are ignored", "id: 7\nretry: 1000\nevent: state\ndata: " + running + "\n\n", []State{"running"}, false},
		{"unknown event types are skipped", "event: hello\ndata: {}\n\nevent: state\ndata: " + paused + "\n\n", []State{"paused"}, false},
		{"event without data is not dispatched", "event: state\n\ndata: " + running + "\n\n", []State{"running"}, false},
		{"unnamed event uses the type in the data", "data: " + running + "\n\n", []State{"running"}, false},
		{"an event cut off by the end is dropped", "event: state\ndata: " + running + "\n\nevent: state\ndata: " + paused, []State{"running"}, false},
		{"empty stream", "", nil, false},
		{"bad JSON is an error", "event: state\ndata: {nope\n\n", nil, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// One byte per read, so every split point is crossed.
			body := io.NopCloser(iotest.OneByteReader(strings.NewReader(tt.stream)))
			s := newEventStream(context.Background(), body)
			var got []State
			for s.Next() {
				if s.Event().Type != "state" || s.Event().Sandbox.ID != "sbx_1" {
					t.Errorf("event %+v", s.Event())
				}
				got = append(got, s.Event().Sandbox.State)
			}
			if (s.Err() != nil) != tt.wantErr {
				t.Errorf("Err() = %v, want error: %v", s.Err(), tt.wantErr)
			}
			if strings.Join(states(got), ",") != strings.Join(states(tt.want), ",") {
				t.Errorf("states %v, want %v", got, tt.want)
			}
		})
	}
}

func states(ss []State) []string {
	out := make([]string, len(ss))
	for i, s := range ss {
		out[i] = string(s)
	}
	return out
}

func TestEventsOverHTTP(t *testing.T) {
	release := make(chan struct{})
	f := newFake(t, map[string]http.HandlerFunc{
		"GET /api/v1/public/sandboxes/{id}/events": func(w http.ResponseWriter, r *http.Request) {
			if r.Header.Get("Accept") != "text/event-stream" {
				http.Error(w, "accept", http.StatusNotAcceptable)
				return
			}
			w.Header().Set("Content-Type", "text/event-stream; charset=utf-8")
			_, _ = io.WriteString(w, ": hello\n\nevent: state\ndata: "+stateJSON(r.PathValue("id"), sandbox.StateStopping)+"\n\n")
			w.(http.Flusher).Flush()
			// The stream stays open, as the server's does.
			select {
			case <-release:
			case <-r.Context().Done():
			}
		},
		"GET /api/v1/public/sandboxes/sbx_gone/events": replyError(http.StatusNotFound, "not_found", "no sandbox sbx_gone"),
		"GET /api/v1/public/sandboxes/sbx_html/events": func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "text/html")
			_, _ = io.WriteString(w, "<html>")
		},
	})
	defer close(release)
	c := f.client()

	if _, err := c.Events(context.Background(), "sbx_gone"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("unknown sandbox: %v", err)
	}
	if _, err := c.Events(context.Background(), "sbx_html"); err == nil || !strings.Contains(err.Error(), "text/html") {
		t.Errorf("html answer: %v", err)
	}

	t.Run("context ends the stream", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		s, err := c.Events(ctx, "sbx_1")
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		if !s.Next() || s.Event().Sandbox.State != sandbox.StateStopping {
			t.Fatalf("first event %+v, err %v", s.Event(), s.Err())
		}
		time.AfterFunc(50*time.Millisecond, cancel)
		if s.Next() {
			t.Fatalf("unexpected event %+v", s.Event())
		}
		if !errors.Is(s.Err(), context.Canceled) {
			t.Errorf("Err() = %v, want context.Canceled", s.Err())
		}
	})
	t.Run("Close from another goroutine ends the stream without error", func(t *testing.T) {
		s, err := c.Events(context.Background(), "sbx_1")
		if err != nil {
			t.Fatal(err)
		}
		if !s.Next() {
			t.Fatalf("no first event: %v", s.Err())
		}
		time.AfterFunc(50*time.Millisecond, func() { _ = s.Close() })
		if s.Next() {
			t.Fatalf("unexpected event %+v", s.Event())
		}
		if s.Err() != nil {
			t.Errorf("Err() after Close = %v", s.Err())
		}
	})
}
