// Package console holds the web console's static files, embedded in zeishd.
//
// dist/ is filled by `make build` (esbuild bundles web/ — TypeScript and
// xterm.js — into it) and is not committed, apart from a placeholder; a
// clean clone therefore builds, vets and tests with plain Go, and serves
// fallback.html ("run make build") at /console until the bundle exists.
package console

import (
	"embed"
	"io/fs"
	"net/http"
	"path"
	"strings"
)

//go:embed all:dist
var dist embed.FS

//go:embed fallback.html
var fallback []byte

// Built reports whether the bundle was built into this binary.
func Built() bool {
	_, err := fs.Stat(dist, "dist/index.html")
	return err == nil
}

// securityHeaders keep the console to its own origin: no external network,
// no framing, no inline script.
func securityHeaders(h http.Header) {
	h.Set("Content-Security-Policy", "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; "+
		"img-src 'self' data: blob:; connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("X-Frame-Options", "DENY")
}

// Handler serves the console under prefix ("/console/"): files of the bundle
// as they are, every other path the single page (the app routes by hash).
func Handler(prefix string) http.Handler {
	sub, _ := fs.Sub(dist, "dist")
	files := http.FileServerFS(sub)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		securityHeaders(w.Header())
		if !Built() {
			w.Header().Set("Content-Type", "text/html; charset=utf-8")
			w.Write(fallback)
			return
		}
		name := strings.TrimPrefix(path.Clean("/"+strings.TrimPrefix(r.URL.Path, prefix)), "/")
		if name == "" || name == "index.html" {
			serveIndex(w, sub)
			return
		}
		if _, err := fs.Stat(sub, name); err != nil {
			serveIndex(w, sub)
			return
		}
		w.Header().Set("Cache-Control", "no-cache")
		r2 := r.Clone(r.Context())
		r2.URL.Path = "/" + name
		files.ServeHTTP(w, r2)
	})
}

func serveIndex(w http.ResponseWriter, sub fs.FS) {
	b, err := fs.ReadFile(sub, "index.html")
	if err != nil {
		http.Error(w, "console index missing", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-cache")
	w.Write(b)
}
