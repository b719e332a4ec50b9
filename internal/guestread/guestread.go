// Package guestread is what the public API reads of a sandbox's guest: the
// ports it listens on, its git clone's status, its browser's version and
// its desktop's status. Only the node that runs the VM reaches the guest's
// agent, so these run there: in one zeishd, called by the HTTP handlers;
// in a cluster, by the node agent for the control plane's typed calls
// (internal/nodeapi, protocol 2.1).
package guestread

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/zeish/zeish/api"
	"github.com/zeish/zeish/errdefs"
	"github.com/zeish/zeish/guest"
	"github.com/zeish/zeish/internal/gitws"
	"github.com/zeish/zeish/internal/guestports"
	"github.com/zeish/zeish/internal/store"
	"github.com/zeish/zeish/sandbox"
)

// Node is what the reads need of the node that runs the sandbox.
type Node interface {
	Agent(ctx context.Context, r *store.SandboxRecord) (*guest.Client, error)
	PortAddr(r *store.SandboxRecord, port int) (string, error)
}

// Reads are the guest reads of the public API, however they reach the
// guest: Local on the node itself, the cluster's router over the node
// protocol.
type Reads interface {
	ListeningPorts(ctx context.Context, r *store.SandboxRecord) ([]guestports.Listener, error)
	GitStatus(ctx context.Context, r *store.SandboxRecord) (api.GitStatus, error)
	BrowserVersion(ctx context.Context, r *store.SandboxRecord) (BrowserVersion, error)
	DesktopStatus(ctx context.Context, r *store.SandboxRecord) (api.DesktopStatus, error)
}

// BrowserVersion is what Chromium's /json/version answers.
type BrowserVersion struct {
	Browser         string `json:"Browser"`
	ProtocolVersion string `json:"Protocol-Version"`
	UserAgent       string `json:"User-Agent"`
	WebSocketURL    string `json:"webSocketDebuggerUrl"`
}

// Local reads the guests of the sandboxes of this host.
type Local struct{ Node Node }

var _ Reads = Local{}

// ListeningPorts reads the guest's listening TCP ports from its kernel's
// tables through the agent.
func (l Local) ListeningPorts(ctx context.Context, r *store.SandboxRecord) ([]guestports.Listener, error) {
	agent, err := l.Node.Agent(ctx, r)
	if err != nil {
		return nil, err
	}
	return guestports.Listening(ctx, agent)
}

// GitStatus runs git status in the guest, as the clone's owner. A clone the
// guest's processes removed or broke is invalid_state.
func (l Local) GitStatus(ctx context.Context, r *store.SandboxRecord) (api.GitStatus, error) {
	agent, err := l.Node.Agent(ctx, r)
	if err != nil {
		return api.GitStatus{}, err
	}
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	st, err := gitws.Status(ctx, agent, r.Sandbox)
	if gerr := (*gitws.Error)(nil); errors.As(err, &gerr) || errors.Is(err, gitws.NoGit) {
		err = fmt.Errorf("in %s: %v: %w", r.GitPath, err, errdefs.ErrInvalidState)
	}
	return st, err
}

var browserClient = &http.Client{Timeout: 15 * time.Second}

// BrowserVersion asks the guest's Chromium for its version and DevTools URL.
func (l Local) BrowserVersion(ctx context.Context, r *store.SandboxRecord) (BrowserVersion, error) {
	var v BrowserVersion
	addr, err := l.Node.PortAddr(r, sandbox.BrowserPort)
	if err != nil {
		return v, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/json/version", nil)
	if err == nil {
		v, err = fetchVersion(req)
	}
	if err != nil {
		return v, fmt.Errorf("the browser of sandbox %s does not answer: %v: %w", r.ID, err, errdefs.ErrUnavailable)
	}
	return v, nil
}

func fetchVersion(req *http.Request) (BrowserVersion, error) {
	var v BrowserVersion
	resp, err := browserClient.Do(req)
	if err != nil {
		return v, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return v, fmt.Errorf("/json/version: %s", resp.Status)
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&v); err != nil {
		return v, fmt.Errorf("/json/version: %w", err)
	}
	return v, nil
}

// DesktopStatus asks the guest's agent for its X display and size.
func (l Local) DesktopStatus(ctx context.Context, r *store.SandboxRecord) (api.DesktopStatus, error) {
	agent, err := l.Node.Agent(ctx, r)
	if err != nil {
		return api.DesktopStatus{}, err
	}
	return agent.DesktopStatus(ctx)
}
