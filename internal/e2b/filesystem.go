package e2b

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"path"
	"strings"

	"connectrpc.com/connect"

	"github.com/zeish/zeish/errdefs"
	"github.com/zeish/zeish/guest"
	pb "github.com/zeish/zeish/internal/e2b/envdpb/filesystem"
)

// The filesystem service, over the agent's file operations (watching is in
// watch.go).

type filesystemService struct{ f *Facade }

// maxListDepth bounds ListDir's recursion.
const maxListDepth = 16

// rpcPath resolves a request's path for its user.
func (s *filesystemService) rpcPath(ctx context.Context, h http.Header, p string) (string, error) {
	_, out, err := s.rpcAccountPath(ctx, h, p)
	return out, err
}

// rpcAccountPath is the request's user and its path resolved for them.
func (s *filesystemService) rpcAccountPath(ctx context.Context, h http.Header, p string) (account, string, error) {
	a, err := s.f.rpcAccount(ctx, h)
	if err != nil {
		return account{}, "", err
	}
	out, err := resolve(a.home, p)
	return a, out, err
}

func (s *filesystemService) Stat(ctx context.Context, req *connect.Request[pb.StatRequest]) (*connect.Response[pb.StatResponse], error) {
	p, err := s.rpcPath(ctx, req.Header(), req.Msg.GetPath())
	if err != nil {
		return nil, rpcError(err)
	}
	fi, err := targetFrom(ctx).agent.StatMeta(ctx, p)
	if err != nil {
		return nil, rpcError(err)
	}
	return connect.NewResponse(&pb.StatResponse{Entry: entry(fi)}), nil
}

func (s *filesystemService) MakeDir(ctx context.Context, req *connect.Request[pb.MakeDirRequest]) (*connect.Response[pb.MakeDirResponse], error) {
	a, p, err := s.rpcAccountPath(ctx, req.Header(), req.Msg.GetPath())
	if err != nil {
		return nil, rpcError(err)
	}
	agent := targetFrom(ctx).agent
	if fi, err := agent.Stat(ctx, p); err == nil {
		// As envd: an existing directory (or a link to one) is no error
		// the SDK shows (makeDir returns false), anything else in its
		// place is.
		if isDirEntry(fi) {
			return nil, connect.NewError(connect.CodeAlreadyExists, fmt.Errorf("directory already exists: %s", p))
		}
		return nil, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("path already exists but it is not a directory: %s", p))
	}
	if err := ensureDir(ctx, agent, a, p); err != nil {
		return nil, rpcError(err)
	}
	fi, err := agent.StatMeta(ctx, p)
	if err != nil {
		return nil, rpcError(err)
	}
	return connect.NewResponse(&pb.MakeDirResponse{Entry: entry(fi)}), nil
}

// Move renames with the guest's mv, as the user: the agent has no rename of
// its own. The destination's missing folders are made first, as envd does.
func (s *filesystemService) Move(ctx context.Context, req *connect.Request[pb.MoveRequest]) (*connect.Response[pb.MoveResponse], error) {
	a, src, err := s.rpcAccountPath(ctx, req.Header(), req.Msg.GetSource())
	if err != nil {
		return nil, rpcError(err)
	}
	dst, err := s.rpcPath(ctx, req.Header(), req.Msg.GetDestination())
	if err != nil {
		return nil, rpcError(err)
	}
	agent := targetFrom(ctx).agent
	if _, err := agent.Stat(ctx, src); err != nil {
		return nil, rpcError(err)
	}
	if err := ensureDir(ctx, agent, a, path.Dir(dst)); err != nil {
		return nil, rpcError(err)
	}
	var stderr strings.Builder
	res, err := agent.Exec(ctx, guest.ExecRequest{Argv: []string{"mv", "-f", "--", src, dst}, User: a.name}, nil, nil, &stderr)
	if err == nil && res.ExitCode != 0 {
		err = fmt.Errorf("move %s to %s: %s: %w", src, dst, strings.TrimSpace(stderr.String()), errdefs.ErrInvalidArgument)
	}
	if err != nil {
		return nil, rpcError(err)
	}
	fi, err := agent.StatMeta(ctx, dst)
	if err != nil {
		return nil, rpcError(err)
	}
	return connect.NewResponse(&pb.MoveResponse{Entry: entry(fi)}), nil
}

func (s *filesystemService) ListDir(ctx context.Context, req *connect.Request[pb.ListDirRequest]) (*connect.Response[pb.ListDirResponse], error) {
	p, err := s.rpcPath(ctx, req.Header(), req.Msg.GetPath())
	if err != nil {
		return nil, rpcError(err)
	}
	depth := int(req.Msg.GetDepth())
	if depth == 0 {
		depth = 1
	}
	if depth > maxListDepth {
		return nil, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("depth %d: at most %d", depth, maxListDepth))
	}
	agent := targetFrom(ctx).agent
	fi, err := agent.Stat(ctx, p)
	if err != nil {
		return nil, rpcError(err)
	}
	// A link to a directory is listed as the directory, its entries named
	// below the path asked for (as envd does).
	dir := p
	if fi.Target != nil && isDirEntry(fi) {
		dir = fi.Target.Path
	} else if !fi.IsDir {
		return nil, rpcError(fmt.Errorf("path is not a directory: %s: %w", p, errdefs.ErrInvalidArgument))
	}
	out := &pb.ListDirResponse{}
	var walk func(dir, shown string, left int) error
	walk = func(dir, shown string, left int) error {
		list, err := agent.ListMeta(ctx, dir)
		if err != nil {
			return err
		}
		for _, fi := range list {
			if fi.Name == "" {
				fi.Name = path.Base(fi.Path)
			}
			real := path.Join(dir, fi.Name)
			fi.Path = path.Join(shown, fi.Name)
			out.Entries = append(out.Entries, entry(fi))
			// Links are not followed below the top.
			if fi.IsDir && fi.Target == nil && fi.Symlink == "" && left > 1 {
				if err := walk(real, fi.Path, left-1); err != nil && !errors.Is(err, errdefs.ErrFileNotFound) {
					return err
				}
			}
		}
		return nil
	}
	if err := walk(dir, p, depth); err != nil {
		return nil, rpcError(err)
	}
	return connect.NewResponse(out), nil
}

func (s *filesystemService) Remove(ctx context.Context, req *connect.Request[pb.RemoveRequest]) (*connect.Response[pb.RemoveResponse], error) {
	p, err := s.rpcPath(ctx, req.Header(), req.Msg.GetPath())
	if err != nil {
		return nil, rpcError(err)
	}
	// As envd's (os.RemoveAll): removing what is not there succeeds.
	if err := targetFrom(ctx).agent.Remove(ctx, p, true); err != nil && !errors.Is(err, errdefs.ErrFileNotFound) {
		return nil, rpcError(err)
	}
	return connect.NewResponse(&pb.RemoveResponse{}), nil
}
