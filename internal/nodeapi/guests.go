package nodeapi

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"connectrpc.com/connect"

	"github.com/zeish/zeish/api"
	"github.com/zeish/zeish/errdefs"
	"github.com/zeish/zeish/internal/catalog"
	"github.com/zeish/zeish/internal/guestports"
	"github.com/zeish/zeish/internal/guestread"
	"github.com/zeish/zeish/internal/nodeapi/nodev2"
	"github.com/zeish/zeish/internal/store"
	"github.com/zeish/zeish/sandbox"
)

// The calls of protocol 2.1: what the public API reads of a guest, and
// template builds, which a control plane once sent to a second HTTP server
// on the node as forwarded requests. Each is a typed call now, on the
// control plane's call key like every other.

// Templates is what a node builds templates with (its catalog).
type Templates interface {
	Build(ctx context.Context, req catalog.BuildRequest) (sandbox.Template, error)
	Delete(ctx context.Context, accountID, ref string) (sandbox.Template, error)
	Follow(ctx context.Context, id string, from int, fn func(catalog.Event) error) error
}

// MaxUpload bounds a template upload a node takes, as the public API does.
const MaxUpload = 32 << 30

// uploadChunk is how much of an upload one message carries.
const uploadChunk = 256 << 10

// streaming are the node protocol's streamed calls: their bodies and
// answers last as long as an upload or a build (the public API bounds
// the upload), so the per-request deadlines of the node's HTTP server do
// not apply to them.
var streaming = map[string]bool{
	"/zeish.node.v2.Node/BuildTemplate":  true,
	"/zeish.node.v2.Node/TemplateEvents": true,
}

// undeadlined lifts the HTTP server's deadlines for streamed calls.
func undeadlined(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if streaming[r.URL.Path] {
			rc := http.NewResponseController(w)
			rc.SetReadDeadline(time.Time{})
			rc.SetWriteDeadline(time.Time{})
		}
		h.ServeHTTP(w, r)
	})
}

// record is the node's record of sandbox id, which the guest reads need.
func (s *Server) record(ctx context.Context, id string) (*store.SandboxRecord, error) {
	if s.secrets == nil {
		return nil, fmt.Errorf("this node keeps no store: %w", errdefs.ErrUnavailable)
	}
	return s.secrets.GetSandbox(ctx, id)
}

func (s *Server) guests() guestread.Reads { return guestread.Local{Node: s.node} }

func (s *Server) ListeningPorts(ctx context.Context, req *connect.Request[nodev2.SandboxRef]) (*connect.Response[nodev2.ListeningPortsReply], error) {
	r, err := s.record(ctx, req.Msg.SandboxId)
	if err != nil {
		return nil, ToWire(err)
	}
	ls, err := s.guests().ListeningPorts(ctx, r)
	if err != nil {
		return nil, ToWire(err)
	}
	rep := &nodev2.ListeningPortsReply{}
	for _, l := range ls {
		rep.Ports = append(rep.Ports, &nodev2.ListeningPort{Port: int32(l.Port), Loopback: l.Loopback})
	}
	return connect.NewResponse(rep), nil
}

func (s *Server) GitStatus(ctx context.Context, req *connect.Request[nodev2.SandboxRef]) (*connect.Response[nodev2.GitStatusReply], error) {
	r, err := s.record(ctx, req.Msg.SandboxId)
	if err != nil {
		return nil, ToWire(err)
	}
	st, err := s.guests().GitStatus(ctx, r)
	if err != nil {
		return nil, ToWire(err)
	}
	return connect.NewResponse(GitStatusToWire(st)), nil
}

func (s *Server) BrowserVersion(ctx context.Context, req *connect.Request[nodev2.SandboxRef]) (*connect.Response[nodev2.BrowserVersionReply], error) {
	r, err := s.record(ctx, req.Msg.SandboxId)
	if err != nil {
		return nil, ToWire(err)
	}
	v, err := s.guests().BrowserVersion(ctx, r)
	if err != nil {
		return nil, ToWire(err)
	}
	return connect.NewResponse(&nodev2.BrowserVersionReply{Browser: v.Browser, ProtocolVersion: v.ProtocolVersion,
		UserAgent: v.UserAgent, WebsocketUrl: v.WebSocketURL}), nil
}

func (s *Server) DesktopStatus(ctx context.Context, req *connect.Request[nodev2.SandboxRef]) (*connect.Response[nodev2.DesktopStatusReply], error) {
	r, err := s.record(ctx, req.Msg.SandboxId)
	if err != nil {
		return nil, ToWire(err)
	}
	st, err := s.guests().DesktopStatus(ctx, r)
	if err != nil {
		return nil, ToWire(err)
	}
	return connect.NewResponse(DesktopToWire(st)), nil
}

// noTemplates answers a node that builds no templates.
var noTemplates = fmt.Errorf("this node builds no templates: %w", errdefs.ErrUnavailable)

// BuildTemplate builds the template the first message describes, its
// upload read from the messages that follow as they come.
func (s *Server) BuildTemplate(ctx context.Context, stream *connect.ClientStream[nodev2.BuildTemplateRequest]) (*connect.Response[nodev2.TemplateReply], error) {
	if s.templates == nil {
		return nil, ToWire(noTemplates)
	}
	if !stream.Receive() {
		return nil, ToWire(fmt.Errorf("a template build without its spec: %v: %w", stream.Err(), errdefs.ErrInvalidArgument))
	}
	spec := stream.Msg().GetSpec()
	if spec == nil {
		return nil, ToWire(fmt.Errorf("a template build's first message is its spec: %w", errdefs.ErrInvalidArgument))
	}
	req := BuildSpecFromWire(spec)
	if spec.Upload {
		pr, pw := io.Pipe()
		defer pr.Close()
		go func() { pw.CloseWithError(readUpload(stream, pw)) }()
		req.Upload = pr
	}
	t, err := s.templates.Build(ctx, req)
	if err != nil {
		return nil, ToWire(err)
	}
	return connect.NewResponse(&nodev2.TemplateReply{Template: TemplateToWire(t)}), nil
}

// readUpload copies the chunks of an upload to w, up to MaxUpload, until
// its end; a stream that stops before it is an error.
func readUpload(stream *connect.ClientStream[nodev2.BuildTemplateRequest], w io.Writer) error {
	var n int64
	for stream.Receive() {
		switch part := stream.Msg().Part.(type) {
		case *nodev2.BuildTemplateRequest_Chunk:
			if n += int64(len(part.Chunk)); n > MaxUpload {
				return fmt.Errorf("upload larger than %d GiB: %w", MaxUpload>>30, errdefs.ErrUploadTooLarge)
			}
			if _, err := w.Write(part.Chunk); err != nil {
				return err
			}
		case *nodev2.BuildTemplateRequest_End:
			if part.End.Bytes != n {
				return fmt.Errorf("upload of %d bytes ended at %d: %w", part.End.Bytes, n, errdefs.ErrInvalidArgument)
			}
			return nil
		default:
			return fmt.Errorf("a template build sent a second spec: %w", errdefs.ErrInvalidArgument)
		}
	}
	if err := stream.Err(); err != nil {
		return err
	}
	return fmt.Errorf("the upload stopped after %d bytes, before its end: %w", n, errdefs.ErrInvalidArgument)
}

func (s *Server) DeleteTemplate(ctx context.Context, req *connect.Request[nodev2.DeleteTemplateRequest]) (*connect.Response[nodev2.TemplateReply], error) {
	if s.templates == nil {
		return nil, ToWire(noTemplates)
	}
	t, err := s.templates.Delete(ctx, req.Msg.AccountId, req.Msg.Template)
	if err != nil {
		return nil, ToWire(err)
	}
	return connect.NewResponse(&nodev2.TemplateReply{Template: TemplateToWire(t)}), nil
}

func (s *Server) TemplateEvents(ctx context.Context, req *connect.Request[nodev2.TemplateEventsRequest], stream *connect.ServerStream[nodev2.TemplateEvent]) error {
	if s.templates == nil {
		return ToWire(noTemplates)
	}
	return ToWire(s.templates.Follow(ctx, req.Msg.TemplateId, int(req.Msg.From), func(e catalog.Event) error {
		return stream.Send(EventToWire(e))
	}))
}

// ListeningPorts asks the node which ports sandbox id's guest listens on.
func (n *RemoteNode) ListeningPorts(ctx context.Context, id string) ([]guestports.Listener, error) {
	if err := needs(n.id, n.minor, MinorGuestReads, "listing a sandbox's ports"); err != nil {
		return nil, err
	}
	rep, err := n.c.ListeningPorts(ctx, connect.NewRequest(&nodev2.SandboxRef{SandboxId: id}))
	if err != nil {
		return nil, FromWire(n.id, err)
	}
	out := make([]guestports.Listener, 0, len(rep.Msg.Ports))
	for _, p := range rep.Msg.Ports {
		out = append(out, guestports.Listener{Port: int(p.Port), Loopback: p.Loopback})
	}
	return out, nil
}

// GitStatus asks the node for sandbox id's clone's status.
func (n *RemoteNode) GitStatus(ctx context.Context, id string) (api.GitStatus, error) {
	if err := needs(n.id, n.minor, MinorGuestReads, "a git status"); err != nil {
		return api.GitStatus{}, err
	}
	rep, err := n.c.GitStatus(ctx, connect.NewRequest(&nodev2.SandboxRef{SandboxId: id}))
	if err != nil {
		return api.GitStatus{}, FromWire(n.id, err)
	}
	return GitStatusFromWire(rep.Msg), nil
}

// BrowserVersion asks the node for sandbox id's browser's version.
func (n *RemoteNode) BrowserVersion(ctx context.Context, id string) (guestread.BrowserVersion, error) {
	if err := needs(n.id, n.minor, MinorGuestReads, "a sandbox's browser"); err != nil {
		return guestread.BrowserVersion{}, err
	}
	rep, err := n.c.BrowserVersion(ctx, connect.NewRequest(&nodev2.SandboxRef{SandboxId: id}))
	if err != nil {
		return guestread.BrowserVersion{}, FromWire(n.id, err)
	}
	m := rep.Msg
	return guestread.BrowserVersion{Browser: m.Browser, ProtocolVersion: m.ProtocolVersion, UserAgent: m.UserAgent, WebSocketURL: m.WebsocketUrl}, nil
}

// DesktopStatus asks the node for sandbox id's desktop's status.
func (n *RemoteNode) DesktopStatus(ctx context.Context, id string) (api.DesktopStatus, error) {
	if err := needs(n.id, n.minor, MinorGuestReads, "a desktop's status"); err != nil {
		return api.DesktopStatus{}, err
	}
	rep, err := n.c.DesktopStatus(ctx, connect.NewRequest(&nodev2.SandboxRef{SandboxId: id}))
	if err != nil {
		return api.DesktopStatus{}, FromWire(n.id, err)
	}
	return DesktopFromWire(rep.Msg), nil
}

// BuildTemplate has the node build req, its upload streamed as it is read.
func (n *RemoteNode) BuildTemplate(ctx context.Context, req catalog.BuildRequest) (sandbox.Template, error) {
	if err := needs(n.id, n.minor, MinorGuestReads, "a template build"); err != nil {
		return sandbox.Template{}, err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream := n.c.BuildTemplate(ctx)
	send := func(m *nodev2.BuildTemplateRequest) error {
		if err := stream.Send(m); err != nil && !errors.Is(err, io.EOF) {
			return err
		}
		return nil // io.EOF: the node answered early; CloseAndReceive says why
	}
	err := send(&nodev2.BuildTemplateRequest{Part: &nodev2.BuildTemplateRequest_Spec{Spec: BuildSpecToWire(req)}})
	if err == nil && req.Upload != nil {
		var sent int64
		err = sendUpload(req.Upload, func(chunk []byte) error {
			sent += int64(len(chunk))
			return send(&nodev2.BuildTemplateRequest{Part: &nodev2.BuildTemplateRequest_Chunk{Chunk: chunk}})
		})
		if err == nil {
			err = send(&nodev2.BuildTemplateRequest{Part: &nodev2.BuildTemplateRequest_End{End: &nodev2.UploadEnd{Bytes: sent}}})
		}
	}
	if err != nil {
		// The upload could not be read to its end (the client went, or
		// sent too much): the call is cancelled, so the node reads an
		// error, never a short upload that looks whole.
		cancel()
		stream.CloseAndReceive()
		return sandbox.Template{}, err
	}
	rep, err := stream.CloseAndReceive()
	if err != nil {
		return sandbox.Template{}, FromWire(n.id, err)
	}
	return TemplateFromWire(rep.Msg.Template), nil
}

// sendUpload reads r to its end in chunks, each handed to send.
func sendUpload(r io.Reader, send func([]byte) error) error {
	buf := make([]byte, uploadChunk)
	for {
		k, err := io.ReadFull(r, buf)
		if k > 0 {
			if serr := send(buf[:k]); serr != nil {
				return serr
			}
		}
		switch {
		case err == io.EOF || err == io.ErrUnexpectedEOF:
			return nil
		case err != nil:
			return err
		}
	}
}

// DeleteTemplate has the node delete the account's template ref.
func (n *RemoteNode) DeleteTemplate(ctx context.Context, accountID, ref string) (sandbox.Template, error) {
	if err := needs(n.id, n.minor, MinorGuestReads, "a template delete"); err != nil {
		return sandbox.Template{}, err
	}
	rep, err := n.c.DeleteTemplate(ctx, connect.NewRequest(&nodev2.DeleteTemplateRequest{AccountId: accountID, Template: ref}))
	if err != nil {
		return sandbox.Template{}, FromWire(n.id, err)
	}
	return TemplateFromWire(rep.Msg.Template), nil
}

// FollowTemplate calls fn with template id's build log from event from on,
// until the build ends or ctx does.
func (n *RemoteNode) FollowTemplate(ctx context.Context, id string, from int, fn func(catalog.Event) error) error {
	if err := needs(n.id, n.minor, MinorGuestReads, "a template's build log"); err != nil {
		return err
	}
	stream, err := n.c.TemplateEvents(ctx, connect.NewRequest(&nodev2.TemplateEventsRequest{TemplateId: id, From: int32(from)}))
	if err != nil {
		return FromWire(n.id, err)
	}
	defer stream.Close()
	for stream.Receive() {
		if err := fn(EventFromWire(stream.Msg())); err != nil {
			return err
		}
	}
	return FromWire(n.id, stream.Err())
}
