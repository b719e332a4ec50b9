package e2b

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"path"
	"strings"

	"connectrpc.com/connect"

	"github.com/zeish/zeish/errdefs"
	"github.com/zeish/zeish/guest"
	"github.com/zeish/zeish/internal/control"
)

// The envd-compatible data plane: which sandbox, which user, which path.

type agentCtx struct{}

type target struct {
	id    string
	agent *guest.Client
}

func targetFrom(ctx context.Context) target {
	t, _ := ctx.Value(agentCtx{}).(target)
	return t
}

// withSandbox finds the sandbox by E2B's E2b-Sandbox-Id header, checks the
// X-Access-Token issued at create or connect, and hands on its agent. A
// sandbox that is gone or not running answers 502, as E2B's proxy does: the
// SDK reads that as "not running" (isRunning false, TimeoutError).
func (f *Facade) withSandbox(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id := r.Header.Get("E2b-Sandbox-Id")
		if id == "" {
			writeError(w, http.StatusBadRequest, "missing E2b-Sandbox-Id header")
			return
		}
		if p := r.Header.Get("E2b-Sandbox-Port"); p != "" && p != envdPort {
			writeError(w, http.StatusBadGateway, "port "+p+" of sandbox "+id+" is not served here: only envd's "+envdPort)
			return
		}
		agent, release, err := f.sandboxAgent(r.Context(), id, r.Header.Get("X-Access-Token"))
		if err != nil {
			if control.Busy(err) {
				w.Header().Set("Connection", "close") // a refused client keeps no connection
			}
			writeError(w, errdefs.EnvdStatus(unreachable(err)), err.Error())
			return
		}
		defer release()
		h.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), agentCtx{}, target{id: id, agent: agent})))
	})
}

// envdPort is the port E2B's SDK addresses envd on.
const envdPort = "49983"

func (f *Facade) health(w http.ResponseWriter, r *http.Request) {
	w.WriteHeader(http.StatusNoContent)
}

// rpcAccount is who an RPC acts as: the user of "Authorization: Basic
// base64(user:)", else the sandbox's default.
func (f *Facade) rpcAccount(ctx context.Context, h http.Header) (account, error) {
	name, err := rpcUserName(h.Get("Authorization"))
	if err != nil {
		return account{}, err
	}
	return f.account(ctx, targetFrom(ctx), name)
}

func rpcUserName(authorization string) (string, error) {
	v, ok := strings.CutPrefix(authorization, "Basic ")
	if !ok {
		return "", nil
	}
	b, err := base64.StdEncoding.DecodeString(v)
	if err != nil {
		return "", fmt.Errorf("authorization is not base64: %w", errdefs.ErrInvalidArgument)
	}
	name, _, _ := strings.Cut(string(b), ":")
	return name, nil
}

// resolve makes p absolute the way envd does: relative to the user's home,
// "~" (and "") being that home; another user's "~name" is refused.
func resolve(home, p string) (string, error) {
	switch {
	case p == "" || p == "~":
		p = home
	case strings.HasPrefix(p, "~/"):
		p = path.Join(home, p[2:])
	case strings.HasPrefix(p, "~"):
		return "", fmt.Errorf("cannot expand user-specific home dir in %q: %w", p, errdefs.ErrInvalidArgument)
	case !path.IsAbs(p):
		p = path.Join(home, p)
	}
	return path.Clean(p), nil
}

// unreachable is how envd's answer classes an error finding a sandbox's
// agent: a bad request or credential says so; anything else (gone, not
// running, its node or agent not answering) is a sandbox that cannot be
// reached, which E2B's proxy answers 502 and the SDK reads as "not
// running".
func unreachable(err error) error {
	if errdefs.Is(err, errdefs.ClassUnauthenticated) || errdefs.Is(err, errdefs.ClassInvalid) || control.Busy(err) {
		return err
	}
	return errdefs.Reclass(err, errdefs.ErrUnavailable)
}

// httpStatus is how envd's HTTP routes answer an error (errdefs's table).
func httpStatus(err error) int { return errdefs.EnvdStatus(err) }

// rpcError maps an error onto the Connect code the SDK turns into its
// classes (errdefs's table); a Connect error keeps its own.
func rpcError(err error) error {
	var ce *connect.Error
	if errors.As(err, &ce) {
		return ce
	}
	return connect.NewError(connect.Code(errdefs.RPC(err)), err)
}
