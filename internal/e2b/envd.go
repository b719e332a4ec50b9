package e2b

import (
	"compress/gzip"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"mime"
	"mime/multipart"
	"net/http"
	"path"
	"strconv"
	"strings"

	"connectrpc.com/connect"

	"github.com/zeish/zeish/errdefs"
	"github.com/zeish/zeish/guest"
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
		agent, err := f.app.OpenEnvd(r.Context(), r.Header.Get("X-Access-Token"), id)
		if err != nil {
			writeError(w, errdefs.EnvdStatus(unreachable(err)), err.Error())
			return
		}
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
// "~" being that home.
func resolve(home, p string) (string, error) {
	switch {
	case p == "":
		return "", fmt.Errorf("path is required: %w", errdefs.ErrInvalidArgument)
	case p == "~":
		p = home
	case strings.HasPrefix(p, "~/"):
		p = path.Join(home, p[2:])
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
	if errdefs.Is(err, errdefs.ClassUnauthenticated) || errdefs.Is(err, errdefs.ClassInvalid) {
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

// readFile is GET /files: the file's bytes.
func (f *Facade) readFile(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	t := targetFrom(r.Context())
	a, err := f.account(r.Context(), t, q.Get("username"))
	if err != nil {
		writeError(w, httpStatus(err), err.Error())
		return
	}
	p, err := resolve(a.home, q.Get("path"))
	if err != nil {
		writeError(w, httpStatus(err), err.Error())
		return
	}
	fi, err := t.agent.Stat(r.Context(), p)
	if err == nil && fi.IsDir {
		err = fmt.Errorf("%s is a directory: %w", p, errdefs.ErrInvalidArgument)
	}
	if err != nil {
		writeError(w, httpStatus(err), err.Error())
		return
	}
	rc, fi, err := t.agent.ReadFile(r.Context(), p)
	if err != nil {
		writeError(w, httpStatus(err), err.Error())
		return
	}
	defer rc.Close()
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("Content-Disposition", mime.FormatMediaType("inline", map[string]string{"filename": path.Base(p)}))
	w.Header().Set("Content-Length", strconv.FormatInt(fi.Size, 10))
	if _, err := io.Copy(w, rc); err != nil {
		f.log.Debug("e2b: read file", "sandbox", t.id, "err", err)
	}
}

// writeFile is POST /files: a multipart form of parts named "file" (their
// filename is the path when the query has none), or one raw body. Files and
// the directories made for them belong to the user.
func (f *Facade) writeFile(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	t := targetFrom(r.Context())
	a, err := f.account(r.Context(), t, q.Get("username"))
	if err != nil {
		writeError(w, httpStatus(err), err.Error())
		return
	}
	var written []map[string]any
	put := func(name string, body io.Reader) error {
		p, err := resolve(a.home, name)
		if err != nil {
			return err
		}
		if err := ensureDir(r.Context(), t.agent, a, path.Dir(p)); err != nil {
			return err
		}
		fi, err := t.agent.WriteFileAs(r.Context(), p, 0o644, a.name, body)
		if err != nil {
			return err
		}
		written = append(written, map[string]any{"name": path.Base(fi.Path), "type": "file", "path": p})
		return nil
	}
	mt, params, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
	switch {
	case mt == "multipart/form-data":
		err = f.writeParts(multipart.NewReader(r.Body, params["boundary"]), q.Get("path"), put)
	default:
		body := io.Reader(r.Body)
		if r.Header.Get("Content-Encoding") == "gzip" {
			var zr *gzip.Reader
			if zr, err = gzip.NewReader(r.Body); err == nil {
				defer zr.Close()
				body = zr
			}
		}
		if err == nil {
			err = put(q.Get("path"), body)
		}
	}
	if err != nil {
		writeError(w, httpStatus(err), err.Error())
		return
	}
	writeJSON(w, http.StatusOK, written)
}

func (f *Facade) writeParts(mr *multipart.Reader, dest string, put func(string, io.Reader) error) error {
	n := 0
	for {
		part, err := mr.NextPart()
		if err == io.EOF {
			break
		}
		if err != nil {
			return fmt.Errorf("multipart body: %v: %w", err, errdefs.ErrInvalidArgument)
		}
		if part.FormName() != "file" {
			continue
		}
		name := dest
		if name == "" {
			// Not part.FileName(): that keeps only the base name, and
			// a batch write names whole paths.
			_, params, _ := mime.ParseMediaType(part.Header.Get("Content-Disposition"))
			name = params["filename"]
		}
		if err := put(name, part); err != nil {
			return err
		}
		n++
	}
	if n == 0 {
		return fmt.Errorf("no part named \"file\" in the form: %w", errdefs.ErrInvalidArgument)
	}
	return nil
}
