package e2b

import (
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"mime"
	"mime/multipart"
	"net/http"
	"path"
	"strconv"
	"strings"

	"github.com/zeish/zeish/errdefs"
	"github.com/zeish/zeish/guest"
)

// envd's /files: a file's bytes down (GET) and up (POST), for the user of
// the username query (envd's default when absent).

// readFile is GET /files: the file's bytes, gzip-encoded when the client
// asks for it (Accept-Encoding: gzip), typed by the file's extension.
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
	if err == nil && isDirEntry(fi) {
		err = fmt.Errorf("path '%s' is a directory: %w", p, errdefs.ErrInvalidArgument)
	}
	if errors.Is(err, errdefs.ErrFileNotFound) {
		err = fmt.Errorf("path '%s' does not exist: %w", p, errdefs.ErrFileNotFound)
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
	ctype := mime.TypeByExtension(path.Ext(p))
	if ctype == "" {
		ctype = "application/octet-stream"
	}
	w.Header().Set("Content-Type", ctype)
	w.Header().Set("Content-Disposition", mime.FormatMediaType("inline", map[string]string{"filename": path.Base(p)}))
	w.Header().Set("Last-Modified", fi.ModTime.UTC().Format(http.TimeFormat))
	w.Header().Set("Vary", "Accept-Encoding")
	out := io.Writer(w)
	if acceptsGzip(r.Header.Get("Accept-Encoding")) {
		w.Header().Set("Content-Encoding", "gzip")
		zw := gzip.NewWriter(w)
		defer zw.Close()
		out = zw
	} else {
		w.Header().Set("Content-Length", strconv.FormatInt(fi.Size, 10))
	}
	if _, err := io.Copy(out, rc); err != nil {
		f.log.Debug("e2b: read file", "sandbox", t.id, "err", err)
	}
}

// acceptsGzip says whether an Accept-Encoding header asks for gzip (and does
// not refuse it with q=0).
func acceptsGzip(h string) bool {
	for _, part := range strings.Split(h, ",") {
		enc, params, _ := strings.Cut(strings.TrimSpace(part), ";")
		if strings.EqualFold(strings.TrimSpace(enc), "gzip") {
			q := strings.ReplaceAll(strings.TrimSpace(params), " ", "")
			return q != "q=0" && q != "q=0.0" && q != "q=0.00" && q != "q=0.000"
		}
	}
	return false
}

// metadataHeader is the prefix of the request headers that carry a written
// file's metadata: X-Metadata-<key>: <value>, the key lowercased (HTTP
// headers have no case), as envd reads them.
const metadataHeader = "X-Metadata-"

func uploadMetadata(h http.Header) (map[string]string, error) {
	var md map[string]string
	for name, values := range h {
		key, ok := strings.CutPrefix(name, metadataHeader)
		if !ok || key == "" || len(values) == 0 {
			continue
		}
		if md == nil {
			md = map[string]string{}
		}
		md[strings.ToLower(key)] = values[0]
	}
	if err := guest.CheckMetadata(md); err != nil {
		return nil, fmt.Errorf("invalid metadata: %w", err)
	}
	return md, nil
}

// writeFile is POST /files: a multipart form of parts named "file" (their
// filename is the path when the query has none), or one raw body
// (application/octet-stream, the path in the query). Files and the
// directories made for them belong to the user; X-Metadata-* headers are
// every written file's metadata. The answer lists each file written with
// the metadata it kept.
func (f *Facade) writeFile(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	t := targetFrom(r.Context())
	md, err := uploadMetadata(r.Header)
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	a, err := f.account(r.Context(), t, q.Get("username"))
	if err != nil {
		writeError(w, httpStatus(err), err.Error())
		return
	}
	written := []map[string]any{}
	put := func(name string, body io.Reader) error {
		p, err := resolve(a.home, name)
		if err != nil {
			return err
		}
		for _, done := range written {
			if done["path"] == p {
				return fmt.Errorf("you cannot upload multiple files to the same path '%s' in one upload request: %w", p, errdefs.ErrInvalidArgument)
			}
		}
		if fi, err := t.agent.Stat(r.Context(), p); err == nil && isDirEntry(fi) {
			return fmt.Errorf("path is a directory: %s: %w", p, errdefs.ErrInvalidArgument)
		}
		if err := ensureDir(r.Context(), t.agent, a, path.Dir(p)); err != nil {
			return err
		}
		fi, err := t.agent.WriteFileWith(r.Context(), p, guest.WriteOptions{Perm: 0o644, User: a.name, Metadata: md}, body)
		if err != nil {
			return err
		}
		out := map[string]any{"name": path.Base(p), "type": "file", "path": p}
		if len(fi.Metadata) > 0 {
			out["metadata"] = fi.Metadata
		}
		written = append(written, out)
		return nil
	}
	mt, params, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
	switch {
	case strings.HasPrefix(mt, "multipart/"):
		err = f.writeParts(multipart.NewReader(r.Body, params["boundary"]), q.Get("path"), put)
	case mt == "application/octet-stream":
		if !q.Has("path") {
			err = fmt.Errorf("path query parameter is required for raw body upload: %w", errdefs.ErrInvalidArgument)
			break
		}
		body := io.Reader(r.Body)
		if r.Header.Get("Content-Encoding") == "gzip" {
			var zr *gzip.Reader
			if zr, err = gzip.NewReader(r.Body); err != nil {
				err = fmt.Errorf("error decompressing request body: %v: %w", err, errdefs.ErrInvalidArgument)
				break
			}
			defer zr.Close()
			body = zr
		}
		err = put(q.Get("path"), body)
	default:
		err = fmt.Errorf("unsupported content type: %s, expected multipart/form-data or application/octet-stream: %w", r.Header.Get("Content-Type"), errdefs.ErrInvalidArgument)
	}
	if err != nil {
		writeError(w, writeStatus(err), err.Error())
		return
	}
	writeJSON(w, http.StatusOK, written)
}

// writeStatus is envd's status for a failed upload: no room is 507.
func writeStatus(err error) int {
	if errors.Is(err, errdefs.ErrStorageFull) {
		return http.StatusInsufficientStorage
	}
	return httpStatus(err)
}

func (f *Facade) writeParts(mr *multipart.Reader, dest string, put func(string, io.Reader) error) error {
	for {
		part, err := mr.NextPart()
		if err == io.EOF {
			return nil
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
			_, params, err := mime.ParseMediaType(part.Header.Get("Content-Disposition"))
			file, ok := params["filename"]
			if err != nil || !ok {
				return fmt.Errorf("filename not found in Content-Disposition header: %w", errdefs.ErrInvalidArgument)
			}
			name = file
		}
		if err := put(name, part); err != nil {
			return err
		}
	}
}
