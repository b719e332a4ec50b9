package e2b

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"path"
	"sort"
	"strings"
	"sync"
	"time"

	"connectrpc.com/connect"

	"github.com/zeish/zeish/errdefs"
	"github.com/zeish/zeish/guest"
	pb "github.com/zeish/zeish/internal/e2b/envdpb/filesystem"
)

// Watching a directory. The guest agent reports changes as they happen
// (inotify in sandboxd: guest.Client.WatchDir). An agent too old for that
// (a template built before it) is polled instead: every watchInterval the
// facade lists the directory (and, when recursive, the directories below
// it) through the agent and reports what differs from the last listing. The
// cost of polling: a change is seen up to one interval late, changes within
// one interval merge (a file made and removed in between is never seen),
// and a rename shows as a remove of the old name and a create of the new.

// changes is where a watch's events come from. next waits for the next
// batch, at most about keepAlive (then an empty one); an error ends the watch.
type changes interface {
	next(ctx context.Context) ([]*pb.FilesystemEvent, error)
	close()
}

// openWatch watches root through the agent, polling when it cannot watch.
// ctx bounds the watch's life.
func openWatch(ctx context.Context, agent *guest.Client, root string, recursive, includeEntry bool) (changes, error) {
	fi, err := agent.Stat(ctx, root)
	if err == nil && !fi.IsDir {
		err = fmt.Errorf("%s is not a directory: %w", root, errdefs.ErrInvalidArgument)
	}
	if err != nil {
		return nil, err
	}
	dw, err := agent.WatchDir(ctx, root, recursive)
	switch {
	case err == nil:
		return &notified{dw: dw, agent: agent, root: root, includeEntry: includeEntry}, nil
	case errors.Is(err, errdefs.ErrInvalidArgument) && strings.Contains(err.Error(), "unknown operation"):
		return startWatch(ctx, agent, root, recursive, includeEntry)
	}
	return nil, err
}

// notified is a watch the guest reports on.
type notified struct {
	dw           *guest.DirWatch
	agent        *guest.Client
	root         string
	includeEntry bool
}

var watchOps = map[string]pb.EventType{
	guest.WatchCreate: pb.EventType_EVENT_TYPE_CREATE,
	guest.WatchWrite:  pb.EventType_EVENT_TYPE_WRITE,
	guest.WatchRemove: pb.EventType_EVENT_TYPE_REMOVE,
	guest.WatchRename: pb.EventType_EVENT_TYPE_RENAME,
	guest.WatchChmod:  pb.EventType_EVENT_TYPE_CHMOD,
}

func (n *notified) next(ctx context.Context) ([]*pb.FilesystemEvent, error) {
	var batch []guest.WatchEvent
	select {
	case b, ok := <-n.dw.Events():
		if !ok {
			if err := n.dw.Err(); err != nil {
				return nil, err
			}
			return nil, fmt.Errorf("watch of %s ended: %w", n.root, errdefs.ErrUnavailable)
		}
		batch = b
	case <-time.After(keepAlive):
		return nil, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	out := make([]*pb.FilesystemEvent, 0, len(batch))
	for _, ev := range batch {
		t, ok := watchOps[ev.Op]
		if !ok {
			continue
		}
		fe := &pb.FilesystemEvent{Name: ev.Name, Type: t}
		if n.includeEntry && t != pb.EventType_EVENT_TYPE_REMOVE && t != pb.EventType_EVENT_TYPE_RENAME {
			if fi, err := n.agent.StatMeta(ctx, path.Join(n.root, ev.Name)); err == nil {
				fe.Entry = entry(fi)
			}
		}
		out = append(out, fe)
	}
	return out, nil
}

func (n *notified) close() { n.dw.Close() }

// watchInterval is how often a watched directory is listed again.
const watchInterval = 500 * time.Millisecond

// maxWatchEntries bounds what one watch keeps of a tree; a bigger tree is
// refused rather than polled at great cost.
const maxWatchEntries = 10000

// tree is one listing of a watched directory: path relative to it → entry.
type tree map[string]guest.FileInfo

// lister lists one directory (guest.Client.List).
type lister func(ctx context.Context, dir string) ([]guest.FileInfo, error)

// scan lists root, and below it when recursive (symlinks are not followed).
func scan(ctx context.Context, list lister, root string, recursive bool) (tree, error) {
	out := tree{}
	var walk func(dir, rel string, depth int) error
	walk = func(dir, rel string, depth int) error {
		entries, err := list(ctx, dir)
		if err != nil {
			return err
		}
		for _, fi := range entries {
			name := fi.Name
			if name == "" {
				name = path.Base(fi.Path)
			}
			if fi.Path == "" {
				fi.Path = path.Join(dir, name)
			}
			r := path.Join(rel, name)
			out[r] = fi
			if len(out) > maxWatchEntries {
				return fmt.Errorf("%s holds more than %d entries: too many to watch: %w", root, maxWatchEntries, errdefs.ErrInvalidArgument)
			}
			if recursive && fi.IsDir && fi.Symlink == "" && depth < maxListDepth {
				// A directory gone between the listings is seen as removed
				// by the next poll.
				if err := walk(fi.Path, r, depth+1); err != nil && !errors.Is(err, errdefs.ErrFileNotFound) {
					return err
				}
			}
		}
		return nil
	}
	return out, walk(root, "", 1)
}

// diff is what changed from old to cur, in the order of their names:
// created, removed, written (size or time changed) and chmod-ed entries.
func diff(old, cur tree) []*pb.FilesystemEvent {
	var out []*pb.FilesystemEvent
	add := func(name string, t pb.EventType, fi *guest.FileInfo) {
		ev := &pb.FilesystemEvent{Name: name, Type: t}
		if fi != nil {
			ev.Entry = entry(*fi)
		}
		out = append(out, ev)
	}
	for name, fi := range cur {
		was, ok := old[name]
		switch {
		case !ok:
			add(name, pb.EventType_EVENT_TYPE_CREATE, &fi)
		case was.IsDir != fi.IsDir || was.Symlink != fi.Symlink:
			add(name, pb.EventType_EVENT_TYPE_REMOVE, nil)
			add(name, pb.EventType_EVENT_TYPE_CREATE, &fi)
		case !fi.IsDir && (was.Size != fi.Size || !was.ModTime.Equal(fi.ModTime)):
			add(name, pb.EventType_EVENT_TYPE_WRITE, &fi)
		case was.Perm != fi.Perm:
			add(name, pb.EventType_EVENT_TYPE_CHMOD, &fi)
		}
	}
	for name := range old {
		if _, ok := cur[name]; !ok {
			add(name, pb.EventType_EVENT_TYPE_REMOVE, nil)
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// watch is one watched directory.
type watch struct {
	list         lister
	root         string
	recursive    bool
	includeEntry bool
	last         tree
}

// startWatch checks that root is a directory and takes its first listing.
func startWatch(ctx context.Context, agent *guest.Client, root string, recursive, includeEntry bool) (*watch, error) {
	fi, err := agent.Stat(ctx, root)
	if err == nil && !fi.IsDir {
		err = fmt.Errorf("%s is not a directory: %w", root, errdefs.ErrInvalidArgument)
	}
	if err != nil {
		return nil, err
	}
	w := &watch{list: agent.List, root: root, recursive: recursive, includeEntry: includeEntry}
	if w.last, err = scan(ctx, w.list, root, recursive); err != nil {
		return nil, err
	}
	return w, nil
}

// next waits one interval and polls.
func (w *watch) next(ctx context.Context) ([]*pb.FilesystemEvent, error) {
	select {
	case <-time.After(watchInterval):
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return w.poll(ctx)
}

func (w *watch) close() {}

// poll lists the directory again and returns what changed. The watched
// directory itself gone ends the watch (errdefs.ErrFileNotFound).
func (w *watch) poll(ctx context.Context) ([]*pb.FilesystemEvent, error) {
	cur, err := scan(ctx, w.list, w.root, w.recursive)
	if err != nil {
		return nil, err
	}
	evs := diff(w.last, cur)
	w.last = cur
	if !w.includeEntry {
		for _, ev := range evs {
			ev.Entry = nil
		}
	}
	return evs, nil
}

func (s *filesystemService) WatchDir(ctx context.Context, req *connect.Request[pb.WatchDirRequest], stream *connect.ServerStream[pb.WatchDirResponse]) error {
	p, err := s.rpcPath(ctx, req.Header(), req.Msg.GetPath())
	if err != nil {
		return rpcError(err)
	}
	src, err := openWatch(ctx, targetFrom(ctx).agent, p, req.Msg.GetRecursive(), req.Msg.GetIncludeEntry())
	if err != nil {
		return rpcError(err)
	}
	defer src.close()
	if err := stream.Send(&pb.WatchDirResponse{Event: &pb.WatchDirResponse_Start{Start: &pb.WatchDirResponse_StartEvent{}}}); err != nil {
		return err
	}
	lastSent := time.Now()
	for {
		evs, err := src.next(ctx)
		if ctx.Err() != nil {
			return nil
		}
		if err != nil {
			return rpcError(err)
		}
		for _, ev := range evs {
			if err := stream.Send(&pb.WatchDirResponse{Event: &pb.WatchDirResponse_Filesystem{Filesystem: ev}}); err != nil {
				return err
			}
			lastSent = time.Now()
		}
		if time.Since(lastSent) >= keepAlive {
			if err := stream.Send(&pb.WatchDirResponse{Event: &pb.WatchDirResponse_Keepalive{Keepalive: &pb.WatchDirResponse_KeepAlive{}}}); err != nil {
				return err
			}
			lastSent = time.Now()
		}
	}
}

// The polling form of watching: a watcher polls on its own and keeps what
// it saw until GetWatcherEvents takes it. One nobody asks for events for
// watcherIdle is removed, so a client that went away leaves nothing.

const (
	watcherIdle      = 5 * time.Minute
	maxWatcherEvents = 10000
	maxWatchers      = 16 // per sandbox: each holds one of the agent's streams
)

type watcher struct {
	sandbox string
	cancel  context.CancelFunc

	mu     sync.Mutex
	events []*pb.FilesystemEvent
	err    error // why polling stopped
	used   time.Time
}

type watcherTable struct {
	mu sync.Mutex
	m  map[string]*watcher // watcher id → watcher
}

func newWatcherTable() *watcherTable { return &watcherTable{m: map[string]*watcher{}} }

func (t *watcherTable) add(sandboxID string, wr *watcher) (string, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	n := 0
	for _, x := range t.m {
		if x.sandbox == sandboxID {
			n++
		}
	}
	if n >= maxWatchers {
		return "", connect.NewError(connect.CodeResourceExhausted, fmt.Errorf("sandbox %s has %d watchers: remove some first", sandboxID, n))
	}
	b := make([]byte, 12)
	rand.Read(b)
	id := hex.EncodeToString(b)
	t.m[id] = wr
	return id, nil
}

func (t *watcherTable) get(sandboxID, id string) (*watcher, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if wr := t.m[id]; wr != nil && wr.sandbox == sandboxID {
		return wr, nil
	}
	return nil, connect.NewError(connect.CodeNotFound, fmt.Errorf("watcher %q not found", id))
}

func (t *watcherTable) remove(id string) {
	t.mu.Lock()
	wr := t.m[id]
	delete(t.m, id)
	t.mu.Unlock()
	if wr != nil {
		wr.cancel()
	}
}

// run collects events until cancelled or idle for watcherIdle. A failed
// watch stops; the watcher stays, to tell the client why, until it is idle.
func (wr *watcher) run(ctx context.Context, src changes, id string, t *watcherTable) {
	defer t.remove(id)
	defer src.close()
	for {
		wr.mu.Lock()
		idle, failed := time.Since(wr.used) > watcherIdle, wr.err != nil
		wr.mu.Unlock()
		if idle {
			return
		}
		if failed {
			select {
			case <-ctx.Done():
				return
			case <-time.After(watchInterval):
			}
			continue
		}
		evs, err := src.next(ctx)
		if ctx.Err() != nil {
			return
		}
		wr.mu.Lock()
		if err != nil {
			wr.err = err
		} else {
			wr.events = append(wr.events, evs...)
			if len(wr.events) > maxWatcherEvents {
				wr.events = wr.events[len(wr.events)-maxWatcherEvents:]
			}
		}
		wr.mu.Unlock()
	}
}

func (s *filesystemService) CreateWatcher(ctx context.Context, req *connect.Request[pb.CreateWatcherRequest]) (*connect.Response[pb.CreateWatcherResponse], error) {
	p, err := s.rpcPath(ctx, req.Header(), req.Msg.GetPath())
	if err != nil {
		return nil, rpcError(err)
	}
	t := targetFrom(ctx)
	// The watch outlives this call: its context is the facade's.
	wctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	src, err := openWatch(wctx, t.agent, p, req.Msg.GetRecursive(), req.Msg.GetIncludeEntry())
	if err != nil {
		cancel()
		return nil, rpcError(err)
	}
	wr := &watcher{sandbox: t.id, cancel: cancel, used: time.Now()}
	id, err := s.f.watchers.add(t.id, wr)
	if err != nil {
		src.close()
		cancel()
		return nil, err
	}
	go wr.run(wctx, src, id, s.f.watchers)
	return connect.NewResponse(&pb.CreateWatcherResponse{WatcherId: id}), nil
}

func (s *filesystemService) GetWatcherEvents(ctx context.Context, req *connect.Request[pb.GetWatcherEventsRequest]) (*connect.Response[pb.GetWatcherEventsResponse], error) {
	wr, err := s.f.watchers.get(targetFrom(ctx).id, req.Msg.GetWatcherId())
	if err != nil {
		return nil, err
	}
	wr.mu.Lock()
	defer wr.mu.Unlock()
	wr.used = time.Now()
	if len(wr.events) == 0 && wr.err != nil {
		err := wr.err
		go s.f.watchers.remove(req.Msg.GetWatcherId())
		return nil, rpcError(err)
	}
	evs := wr.events
	wr.events = nil
	return connect.NewResponse(&pb.GetWatcherEventsResponse{Events: evs}), nil
}

func (s *filesystemService) RemoveWatcher(ctx context.Context, req *connect.Request[pb.RemoveWatcherRequest]) (*connect.Response[pb.RemoveWatcherResponse], error) {
	id := req.Msg.GetWatcherId()
	if _, err := s.f.watchers.get(targetFrom(ctx).id, id); err != nil {
		return nil, err
	}
	s.f.watchers.remove(id)
	return connect.NewResponse(&pb.RemoveWatcherResponse{}), nil
}
