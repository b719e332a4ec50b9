package e2b

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"sort"
	"sync"
	"time"

	"connectrpc.com/connect"

	"github.com/zeish/zeish/errdefs"
	"github.com/zeish/zeish/guest"
	pb "github.com/zeish/zeish/internal/e2b/envdpb/process"
)

// The process service. Each started process runs in the guest through one
// exec of zeish's agent, owned by the facade rather than by the RPC that
// started it: a dropped stream leaves the process running, and Connect
// attaches to it again. Its pid is the facade's own number, unique per
// sandbox, since the agent reports the guest's pid only at the end.

type processTable struct {
	mu    sync.Mutex
	next  uint32
	procs map[string]map[uint32]*proc // sandbox id → pid → process
}

func newProcessTable() *processTable {
	return &processTable{next: 1000, procs: map[string]map[uint32]*proc{}}
}

type proc struct {
	pid    uint32
	tag    string
	config *pb.ProcessConfig
	cancel context.CancelFunc
	// term is the guest terminal of a PTY process (nil for a plain one),
	// agent the agent it runs on.
	term  *guest.Terminal
	agent *guest.Client

	mu    sync.Mutex
	stdin *io.PipeWriter // nil when stdin was not asked for, or once closed
	subs  map[*subscriber]struct{}
	ended *pb.ProcessEvent // the end event, once the process ended
	// lost, once set, says why the process can no longer be followed (the
	// sandbox went away under it): streams end with it instead of an end.
	lost error
	done chan struct{}
}

// subscriber is one stream following a process's events.
type subscriber struct {
	ch   chan *pb.ProcessEvent
	gone chan struct{}
}

func (t *processTable) add(sandboxID string, p *proc) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.next++
	p.pid = t.next
	if t.procs[sandboxID] == nil {
		t.procs[sandboxID] = map[uint32]*proc{}
	}
	t.procs[sandboxID][p.pid] = p
}

func (t *processTable) remove(sandboxID string, pid uint32) {
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.procs[sandboxID], pid)
	if len(t.procs[sandboxID]) == 0 {
		delete(t.procs, sandboxID)
	}
}

func (t *processTable) list(sandboxID string) []*proc {
	t.mu.Lock()
	defer t.mu.Unlock()
	var out []*proc
	for _, p := range t.procs[sandboxID] {
		out = append(out, p)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].pid < out[j].pid })
	return out
}

func (t *processTable) find(sandboxID string, sel *pb.ProcessSelector) (*proc, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	switch s := sel.GetSelector().(type) {
	case *pb.ProcessSelector_Pid:
		if p := t.procs[sandboxID][s.Pid]; p != nil {
			return p, nil
		}
		return nil, connect.NewError(connect.CodeNotFound, fmt.Errorf("process with pid %d not found", s.Pid))
	case *pb.ProcessSelector_Tag:
		for _, p := range t.procs[sandboxID] {
			if p.tag != "" && p.tag == s.Tag {
				return p, nil
			}
		}
		return nil, connect.NewError(connect.CodeNotFound, fmt.Errorf("process with tag %q not found", s.Tag))
	}
	return nil, connect.NewError(connect.CodeInvalidArgument, errors.New("process selector needs a pid or a tag"))
}

// subscribe follows the process's events from now on; the channel closes
// after the end event.
func (p *proc) subscribe() *subscriber {
	s := &subscriber{ch: make(chan *pb.ProcessEvent, 64), gone: make(chan struct{})}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ended != nil || p.lost != nil {
		if p.ended != nil {
			s.ch <- p.ended
		}
		close(s.ch)
		return s
	}
	p.subs[s] = struct{}{}
	return s
}

func (p *proc) unsubscribe(s *subscriber) {
	close(s.gone)
	p.mu.Lock()
	delete(p.subs, s)
	p.mu.Unlock()
}

// publish hands ev to every subscriber, waiting for slow ones (the guest's
// output waits with it) but not for those that left.
func (p *proc) publish(ev *pb.ProcessEvent) {
	p.mu.Lock()
	subs := make([]*subscriber, 0, len(p.subs))
	for s := range p.subs {
		subs = append(subs, s)
	}
	p.mu.Unlock()
	for _, s := range subs {
		select {
		case s.ch <- ev:
		case <-s.gone:
		}
	}
}

// end publishes the end event and closes every subscription.
func (p *proc) end(ev *pb.ProcessEvent) {
	p.publish(ev)
	p.finish(ev, nil)
}

// finish records how following the process ended (its end event, or why it
// was lost) and closes every subscription.
func (p *proc) finish(ev *pb.ProcessEvent, lost error) {
	p.mu.Lock()
	p.ended, p.lost = ev, lost
	subs := p.subs
	p.subs = nil
	p.mu.Unlock()
	for s := range subs {
		close(s.ch)
	}
	close(p.done)
}

// settle ends the process as its exec or terminal ended: with its end
// event, or, when the channel to the guest broke under it (the sandbox was
// killed, paused away or reached its end of life), as lost: envd's streams
// end then with the connection, which E2B's SDK turns into its TimeoutError
// ("…likely due to sandbox timeout"), never into an exit code.
func (p *proc) settle(res guest.ExecResult, err error, killed bool) {
	if err != nil && !killed && errdefs.Is(err, errdefs.ClassUnavailable) {
		p.finish(nil, connect.NewError(connect.CodeUnavailable,
			fmt.Errorf("the sandbox was killed or reached its end of life while process %d ran (%v)", p.pid, err)))
		return
	}
	p.end(endEvent(res, err, killed))
}

// failure is why the process was lost, once it was.
func (p *proc) failure() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.lost
}

type output struct {
	p      *proc
	stderr bool
	pty    bool
}

func (o output) Write(b []byte) (int, error) {
	data := &pb.ProcessEvent_DataEvent{}
	switch {
	case o.pty:
		data.Output = &pb.ProcessEvent_DataEvent_Pty{Pty: append([]byte(nil), b...)}
	case o.stderr:
		data.Output = &pb.ProcessEvent_DataEvent_Stderr{Stderr: append([]byte(nil), b...)}
	default:
		data.Output = &pb.ProcessEvent_DataEvent_Stdout{Stdout: append([]byte(nil), b...)}
	}
	o.p.publish(&pb.ProcessEvent{Event: &pb.ProcessEvent_Data{Data: data}})
	return len(b), nil
}

type processService struct{ f *Facade }

// shell is the command E2B's SDK starts for commands.run: bash. A template
// without bash (the built-in busybox one) gets its POSIX shell instead.
func shell(ctx context.Context, agent *guest.Client, cmd string) string {
	if cmd == "/bin/bash" {
		if _, err := agent.Stat(ctx, cmd); errors.Is(err, errdefs.ErrFileNotFound) {
			return "/bin/sh"
		}
	}
	return cmd
}

func (s *processService) Start(ctx context.Context, req *connect.Request[pb.StartRequest], stream *connect.ServerStream[pb.StartResponse]) error {
	cfg := req.Msg.GetProcess()
	if cfg.GetCmd() == "" {
		return connect.NewError(connect.CodeInvalidArgument, errors.New("process.cmd is required"))
	}
	var size guest.TermSize
	if req.Msg.Pty != nil {
		size = guest.TermSize{Rows: int(req.Msg.Pty.GetSize().GetRows()), Cols: int(req.Msg.Pty.GetSize().GetCols())}
		if err := size.Check(); err != nil {
			return rpcError(err)
		}
	}
	a, err := s.f.rpcAccount(ctx, req.Header())
	if err != nil {
		return rpcError(err)
	}
	home := a.home
	t := targetFrom(ctx)
	cwd := home
	if cfg.Cwd != nil {
		if cwd, err = resolve(home, cfg.GetCwd()); err != nil {
			return rpcError(err)
		}
	}
	if fi, err := t.agent.Stat(ctx, cwd); err != nil || !fi.IsDir {
		if cfg.Cwd != nil {
			return connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("cwd %s is not a directory", cwd))
		}
		cwd = "/"
	}
	argv := append([]string{shell(ctx, t.agent, cfg.GetCmd())}, cfg.GetArgs()...)
	env := maps.Clone(cfg.GetEnvs())
	if env == nil {
		env = map[string]string{}
	}
	if _, ok := env["HOME"]; !ok {
		env["HOME"] = home
	}

	// The process outlives this call: its context is the facade's, not the
	// request's.
	pctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	p := &proc{tag: req.Msg.GetTag(), config: cfg, cancel: cancel, agent: t.agent, subs: map[*subscriber]struct{}{}, done: make(chan struct{})}
	if req.Msg.Pty != nil {
		// A PTY process is a guest terminal: output comes as pty data,
		// input goes to the terminal, Update resizes it. The stream
		// subscribes first, so the shell's first prompt is not lost.
		sub := p.subscribe()
		term, err := t.agent.Terminal(pctx, guest.TermRequest{Argv: argv, Env: env, Cwd: cwd, User: a.name, Size: size}, output{p: p, pty: true})
		if err != nil {
			p.unsubscribe(sub)
			cancel()
			return rpcError(err)
		}
		p.term = term
		s.f.procs.add(t.id, p)
		go s.runTerminal(t, p)
		return s.stream(ctx, p, sub, stream)
	}
	var stdin io.Reader
	if req.Msg.GetStdin() {
		pr, pw := io.Pipe()
		stdin, p.stdin = pr, pw
	}
	s.f.procs.add(t.id, p)
	sub := p.subscribe()
	go s.run(pctx, t, p, guest.ExecRequest{Argv: argv, Env: env, Cwd: cwd, User: a.name}, stdin)
	return s.stream(ctx, p, sub, stream)
}

// stream answers Start: the start event, then the process's events.
func (s *processService) stream(ctx context.Context, p *proc, sub *subscriber, stream *connect.ServerStream[pb.StartResponse]) error {
	if err := stream.Send(&pb.StartResponse{Event: startEvent(p.pid)}); err != nil {
		p.unsubscribe(sub)
		return err
	}
	return follow(ctx, p, sub, func(ev *pb.ProcessEvent) error { return stream.Send(&pb.StartResponse{Event: ev}) })
}

func (s *processService) run(ctx context.Context, t target, p *proc, req guest.ExecRequest, stdin io.Reader) {
	defer s.f.procs.remove(t.id, p.pid)
	defer p.cancel()
	res, err := t.agent.Exec(ctx, req, stdin, output{p: p}, output{p: p, stderr: true})
	p.mu.Lock()
	if p.stdin != nil {
		p.stdin.Close()
	}
	p.mu.Unlock()
	p.settle(res, err, ctx.Err() != nil)
}

// runTerminal waits for a PTY process to end. A stream to the guest that
// breaks ends it too: its output could no longer be followed.
func (s *processService) runTerminal(t target, p *proc) {
	defer s.f.procs.remove(t.id, p.pid)
	defer p.cancel()
	defer p.term.Close()
	res, err := p.term.Result()
	p.settle(res, err, false)
}

// endEvent is how a process ended, in envd's words.
func endEvent(res guest.ExecResult, err error, killed bool) *pb.ProcessEvent {
	end := &pb.ProcessEvent_EndEvent{ExitCode: int32(res.ExitCode), Exited: res.Signal == "" && err == nil,
		Status: fmt.Sprintf("exit status %d", res.ExitCode)}
	switch {
	case err != nil && killed:
		end.ExitCode, end.Status = -1, "signal: killed"
	case err != nil:
		msg := err.Error()
		end.ExitCode, end.Status, end.Error = 127, "error", &msg
	case res.Signal != "":
		end.Status = "signal: " + res.Signal
	}
	return &pb.ProcessEvent{Event: &pb.ProcessEvent_End{End: end}}
}

func startEvent(pid uint32) *pb.ProcessEvent {
	return &pb.ProcessEvent{Event: &pb.ProcessEvent_Start{Start: &pb.ProcessEvent_StartEvent{Pid: pid}}}
}

// keepAlive is how often a quiet stream gets a keepalive event, so proxies
// and the SDK see it is alive.
const keepAlive = 30 * time.Second

// follow sends the events of sub until the end event, the caller leaving or
// a failed send; only the end stops the process.
func follow(ctx context.Context, p *proc, sub *subscriber, send func(*pb.ProcessEvent) error) error {
	defer p.unsubscribe(sub)
	tick := time.NewTicker(keepAlive)
	defer tick.Stop()
	for {
		select {
		case ev, ok := <-sub.ch:
			if !ok {
				return p.failure()
			}
			if err := send(ev); err != nil {
				return err
			}
		case <-tick.C:
			if err := send(&pb.ProcessEvent{Event: &pb.ProcessEvent_Keepalive{Keepalive: &pb.ProcessEvent_KeepAlive{}}}); err != nil {
				return err
			}
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

func (s *processService) Connect(ctx context.Context, req *connect.Request[pb.ConnectRequest], stream *connect.ServerStream[pb.ConnectResponse]) error {
	p, err := s.f.procs.find(targetFrom(ctx).id, req.Msg.GetProcess())
	if err != nil {
		return err
	}
	sub := p.subscribe()
	if err := stream.Send(&pb.ConnectResponse{Event: startEvent(p.pid)}); err != nil {
		p.unsubscribe(sub)
		return err
	}
	return follow(ctx, p, sub, func(ev *pb.ProcessEvent) error { return stream.Send(&pb.ConnectResponse{Event: ev}) })
}

func (s *processService) List(ctx context.Context, req *connect.Request[pb.ListRequest]) (*connect.Response[pb.ListResponse], error) {
	out := &pb.ListResponse{}
	for _, p := range s.f.procs.list(targetFrom(ctx).id) {
		info := &pb.ProcessInfo{Config: p.config, Pid: p.pid}
		if p.tag != "" {
			info.Tag = &p.tag
		}
		out.Processes = append(out.Processes, info)
	}
	return connect.NewResponse(out), nil
}

func (s *processService) Update(ctx context.Context, req *connect.Request[pb.UpdateRequest]) (*connect.Response[pb.UpdateResponse], error) {
	p, err := s.f.procs.find(targetFrom(ctx).id, req.Msg.GetProcess())
	if err != nil {
		return nil, err
	}
	if req.Msg.Pty == nil {
		return connect.NewResponse(&pb.UpdateResponse{}), nil
	}
	if p.term == nil {
		return nil, connect.NewError(connect.CodeFailedPrecondition, fmt.Errorf("process %d has no PTY to resize", p.pid))
	}
	size := guest.TermSize{Rows: int(req.Msg.Pty.GetSize().GetRows()), Cols: int(req.Msg.Pty.GetSize().GetCols())}
	if err := p.term.Resize(size); err != nil {
		return nil, rpcError(err)
	}
	return connect.NewResponse(&pb.UpdateResponse{}), nil
}

// input writes to a process's stdin, or its terminal: a PTY process takes
// either kind of input as keystrokes.
func (p *proc) input(in *pb.ProcessInput) error {
	if p.term != nil {
		b := in.GetPty()
		if b == nil {
			b = in.GetStdin()
		}
		if _, err := p.term.Write(b); err != nil {
			return connect.NewError(connect.CodeFailedPrecondition, fmt.Errorf("terminal of process %d: %w", p.pid, err))
		}
		return nil
	}
	if _, ok := in.GetInput().(*pb.ProcessInput_Pty); ok {
		return connect.NewError(connect.CodeFailedPrecondition, fmt.Errorf("process %d has no PTY (start it with pty)", p.pid))
	}
	p.mu.Lock()
	w := p.stdin
	p.mu.Unlock()
	if w == nil {
		return connect.NewError(connect.CodeFailedPrecondition, fmt.Errorf("process %d has no open stdin (start it with stdin: true)", p.pid))
	}
	if _, err := w.Write(in.GetStdin()); err != nil {
		return connect.NewError(connect.CodeFailedPrecondition, fmt.Errorf("stdin of process %d: %w", p.pid, err))
	}
	return nil
}

func (s *processService) SendInput(ctx context.Context, req *connect.Request[pb.SendInputRequest]) (*connect.Response[pb.SendInputResponse], error) {
	p, err := s.f.procs.find(targetFrom(ctx).id, req.Msg.GetProcess())
	if err != nil {
		return nil, err
	}
	if err := p.input(req.Msg.GetInput()); err != nil {
		return nil, err
	}
	return connect.NewResponse(&pb.SendInputResponse{}), nil
}

func (s *processService) StreamInput(ctx context.Context, stream *connect.ClientStream[pb.StreamInputRequest]) (*connect.Response[pb.StreamInputResponse], error) {
	var p *proc
	for stream.Receive() {
		switch ev := stream.Msg().GetEvent().(type) {
		case *pb.StreamInputRequest_Start:
			var err error
			if p, err = s.f.procs.find(targetFrom(ctx).id, ev.Start.GetProcess()); err != nil {
				return nil, err
			}
		case *pb.StreamInputRequest_Data:
			if p == nil {
				return nil, connect.NewError(connect.CodeInvalidArgument, errors.New("input before the start message"))
			}
			if err := p.input(ev.Data.GetInput()); err != nil {
				return nil, err
			}
		}
	}
	if err := stream.Err(); err != nil {
		return nil, err
	}
	return connect.NewResponse(&pb.StreamInputResponse{}), nil
}

// kill ends the process. A cancelled exec's whole process group gets SIGKILL
// from the agent; a terminal's shell gets it by pid (its foreground job is
// hung up by the kernel when the shell, the session leader, dies).
func (p *proc) kill(ctx context.Context) {
	if p.term == nil {
		p.cancel()
		return
	}
	if err := p.agent.Kill(ctx, p.term.PID(), "KILL"); err != nil {
		// Gone already, or the agent is: either way stop following it.
		p.term.Close()
	}
}

// SendSignal ends the process with SIGKILL, whichever of SIGTERM and
// SIGKILL was asked (an interactive shell ignores SIGTERM).
func (s *processService) SendSignal(ctx context.Context, req *connect.Request[pb.SendSignalRequest]) (*connect.Response[pb.SendSignalResponse], error) {
	p, err := s.f.procs.find(targetFrom(ctx).id, req.Msg.GetProcess())
	if err != nil {
		return nil, err
	}
	switch req.Msg.GetSignal() {
	case pb.Signal_SIGNAL_SIGKILL, pb.Signal_SIGNAL_SIGTERM:
	default:
		return nil, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("signal %v is not supported", req.Msg.GetSignal()))
	}
	p.kill(ctx)
	select {
	case <-p.done:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return connect.NewResponse(&pb.SendSignalResponse{}), nil
}

func (s *processService) CloseStdin(ctx context.Context, req *connect.Request[pb.CloseStdinRequest]) (*connect.Response[pb.CloseStdinResponse], error) {
	p, err := s.f.procs.find(targetFrom(ctx).id, req.Msg.GetProcess())
	if err != nil {
		return nil, err
	}
	if p.term != nil {
		// A terminal's end of input is the EOF key.
		if _, err := p.term.Write([]byte{4}); err != nil {
			return nil, connect.NewError(connect.CodeFailedPrecondition, fmt.Errorf("terminal of process %d: %w", p.pid, err))
		}
		return connect.NewResponse(&pb.CloseStdinResponse{}), nil
	}
	p.mu.Lock()
	if p.stdin != nil {
		p.stdin.Close()
		p.stdin = nil
	}
	p.mu.Unlock()
	return connect.NewResponse(&pb.CloseStdinResponse{}), nil
}
