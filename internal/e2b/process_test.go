package e2b

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"connectrpc.com/connect"

	"github.com/zeish/zeish/errdefs"
	"github.com/zeish/zeish/guest"
	pb "github.com/zeish/zeish/internal/e2b/envdpb/process"
)

// A subscriber that leaves never blocks the process's output; one that stays
// gets every event, then the end, then a closed channel; a late one gets the
// end at once.
func TestProcessEvents(t *testing.T) {
	p := &proc{subs: map[*subscriber]struct{}{}, done: make(chan struct{})}
	stays, leaves := p.subscribe(), p.subscribe()
	p.unsubscribe(leaves)
	var got []*pb.ProcessEvent
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for ev := range stays.ch {
			got = append(got, ev)
		}
	}()
	const n = 500
	for i := 0; i < n; i++ {
		output{p: p, stderr: i%2 == 1}.Write([]byte{byte(i)})
	}
	end := &pb.ProcessEvent{Event: &pb.ProcessEvent_End{End: &pb.ProcessEvent_EndEvent{ExitCode: 3, Exited: true}}}
	p.end(end)
	wg.Wait()
	if len(got) != n+1 || got[n] != end {
		t.Fatalf("got %d events, want %d then the end", len(got), n)
	}
	if got[1].GetData().GetStderr()[0] != 1 || got[2].GetData().GetStdout()[0] != 2 {
		t.Fatalf("events out of order or mixed up: %v %v", got[1], got[2])
	}
	late := p.subscribe()
	if ev := <-late.ch; ev != end {
		t.Fatalf("late subscriber got %v, want the end", ev)
	}
	if _, ok := <-late.ch; ok {
		t.Fatal("late subscriber's channel is open")
	}
	<-p.done
}

func TestProcessTable(t *testing.T) {
	tb := newProcessTable()
	a, b := &proc{tag: "web"}, &proc{}
	tb.add("sbx_1", a)
	tb.add("sbx_1", b)
	tb.add("sbx_2", &proc{})
	if a.pid == b.pid {
		t.Fatal("pids repeat")
	}
	for _, tc := range []struct {
		sel  *pb.ProcessSelector
		want *proc
	}{
		{&pb.ProcessSelector{Selector: &pb.ProcessSelector_Pid{Pid: b.pid}}, b},
		{&pb.ProcessSelector{Selector: &pb.ProcessSelector_Tag{Tag: "web"}}, a},
		{&pb.ProcessSelector{Selector: &pb.ProcessSelector_Tag{Tag: "db"}}, nil},
		{&pb.ProcessSelector{Selector: &pb.ProcessSelector_Pid{Pid: 1}}, nil},
		{&pb.ProcessSelector{}, nil},
	} {
		got, err := tb.find("sbx_1", tc.sel)
		if got != tc.want || (tc.want == nil) != (err != nil) {
			t.Errorf("%v: %v, %v", tc.sel, got, err)
		}
	}
	if len(tb.list("sbx_1")) != 2 || len(tb.list("sbx_2")) != 1 {
		t.Fatal("list per sandbox")
	}
	tb.remove("sbx_1", a.pid)
	if _, err := tb.find("sbx_1", &pb.ProcessSelector{Selector: &pb.ProcessSelector_Pid{Pid: a.pid}}); err == nil {
		t.Fatal("removed process found")
	}
}

// A process whose sandbox goes away under it (the channel to the guest
// breaks: errdefs.ErrUnavailable) is not given an exit code: following it
// ends with Connect's unavailable, which E2B's SDK turns into its
// TimeoutError ("…likely due to sandbox timeout") as envd's dropped stream
// does. A process killed on purpose, or failing otherwise, still ends.
func TestProcessLostWithItsSandbox(t *testing.T) {
	for _, tc := range []struct {
		name   string
		err    error
		killed bool
		lost   bool
	}{
		{"channel broke", fmt.Errorf("guest exec: channel to the agent failed: EOF: %w", errdefs.ErrUnavailable), false, true},
		{"killed by the caller", fmt.Errorf("guest exec: %w", context.Canceled), true, false},
		{"could not start", fmt.Errorf("exec: no such file: %w", errdefs.ErrInvalidArgument), false, false},
		{"exited", nil, false, false},
	} {
		p := &proc{pid: 1001, subs: map[*subscriber]struct{}{}, done: make(chan struct{})}
		sub := p.subscribe()
		var sent []*pb.ProcessEvent
		errc := make(chan error, 1)
		go func() {
			errc <- follow(context.Background(), p, sub, func(ev *pb.ProcessEvent) error { sent = append(sent, ev); return nil })
		}()
		p.settle(guest.ExecResult{ExitCode: 0}, tc.err, tc.killed)
		err := <-errc
		if tc.lost {
			if connect.CodeOf(err) != connect.CodeUnavailable || len(sent) != 0 {
				t.Errorf("%s: %v after %v, want unavailable and no end", tc.name, err, sent)
			}
			if late := follow(context.Background(), p, p.subscribe(), func(*pb.ProcessEvent) error { return nil }); connect.CodeOf(late) != connect.CodeUnavailable {
				t.Errorf("%s: a later Connect got %v", tc.name, late)
			}
			continue
		}
		if err != nil || len(sent) != 1 || sent[0].GetEnd() == nil {
			t.Errorf("%s: %v, sent %v; want the end event", tc.name, err, sent)
		}
	}
}
