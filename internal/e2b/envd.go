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
		agent, release, err := f.backend.SandboxAgent(r.Context(), id, r.Header.Get("X-Access-Token"))
		if err != nil {
			status := http.StatusBadGateway
			switch errdefs.Of(err).Class {
			case errdefs.ClassUnauthenticated:
				status = http.StatusUnauthorized
			case errdefs.ClassInvalid:
				status = http.StatusBadRequest
			case errdefs.ClassRateLimited:
				status = http.StatusTooManyRequests
				w.Header().Set("Connection", "close")
			}
			writeError(w, status, err.Error())
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

// httpStatus is how envd's HTTP routes answer an error.
func httpStatus(err error) int {
	switch errdefs.Of(err).Class {
	case errdefs.ClassInvalid:
		return http.StatusBadRequest
	case errdefs.ClassUnauthenticated:
		return http.StatusUnauthorized
	case errdefs.ClassPermissionDenied:
		return http.StatusForbidden
	case errdefs.ClassNotFound:
		return http.StatusNotFound
	case errdefs.ClassConflict:
		return http.StatusConflict
	case errdefs.ClassResourceExhausted:
		return http.StatusInsufficientStorage
	case errdefs.ClassUnavailable:
		return http.StatusBadGateway
	}
	return http.StatusInternalServerError
}

// rpcError maps an error onto the Connect code the SDK turns into its classes.
func rpcError(err error) error {
	var ce *connect.Error
	if errors.As(err, &ce) {
		return ce
	}
	code := connect.CodeInternal
	switch errdefs.Of(err).Class {
	case errdefs.ClassInvalid:
		code = connect.CodeInvalidArgument
	case errdefs.ClassUnauthenticated:
		code = connect.CodeUnauthenticated
	case errdefs.ClassPermissionDenied:
		code = connect.CodePermissionDenied
	case errdefs.ClassNotFound:
		code = connect.CodeNotFound
	case errdefs.ClassConflict:
		code = connect.CodeAlreadyExists
	case errdefs.ClassResourceExhausted, errdefs.ClassRateLimited:
		code = connect.CodeResourceExhausted
	case errdefs.ClassUnavailable:
		code = connect.CodeUnavailable
	}
	return connect.NewError(code, err)
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
