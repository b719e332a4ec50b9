package e2b

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/zeish/zeish/errdefs"
)

// Signed URLs. sbx.downloadUrl(path) and uploadUrl(path) hand out a /files
// URL that works without the access token header: it carries
// signature=v1_<sha256 of "path:operation:user:token[:expiry]"> (base64,
// unpadded) and, with useSignatureExpiration, signature_expiration (unix
// seconds). envd checks the hash against its one access token; a zeish
// sandbox has had a token per create and connect, so the facade gives its
// tokens expiries on a grid of tokenStep and checks a signature against
// every token that could be live now (Backend.SandboxTokens): one per live
// API key of the account and per grid point in the tokens' lifetime.

// tokenStep is the grid tokens expire on: a token lasts between tokenTTL
// less tokenStep and tokenTTL, never longer (tokenTTL is the native API's
// longest), and a signature is checked against tokenTTL/tokenStep+1
// expiries of each key.
const tokenStep = 5 * time.Minute

// tokenExpiry is when a token issued at now expires: the last grid point
// at most tokenTTL away.
func tokenExpiry(now time.Time) time.Time {
	return now.Add(tokenTTL - tokenStep).Truncate(tokenStep).Add(tokenStep)
}

// liveExpiries are the expiries of every token tokenExpiry may have given
// that has not expired at now.
func liveExpiries(now time.Time) []time.Time {
	var out []time.Time
	for exp := now.Truncate(tokenStep).Add(tokenStep); !exp.After(tokenExpiry(now)); exp = exp.Add(tokenStep) {
		out = append(out, exp)
	}
	return out
}

// The operations a signature is for.
const (
	signRead  = "read"
	signWrite = "write"
)

// signature is what the SDK computes for a URL (expiry 0: none).
func signature(path, op, user, token string, expiry int64) string {
	raw := path + ":" + op + ":" + user + ":" + token
	if expiry != 0 {
		raw += ":" + strconv.FormatInt(expiry, 10)
	}
	sum := sha256.Sum256([]byte(raw))
	return "v1_" + strings.TrimRight(base64.StdEncoding.EncodeToString(sum[:]), "=")
}

// withSignature lets a /files request in on its signature when it has no
// access token: the token it was signed with is found and set on the
// request, which then goes on as any other (the token's key still live, the
// sandbox running). Its errors are envd's: 401 with its words.
func (f *Facade) withSignature(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		op := signRead
		if r.Method == http.MethodPost {
			op = signWrite
		}
		id := r.Header.Get("E2b-Sandbox-Id")
		if r.URL.Path != "/files" || (r.Method != http.MethodGet && r.Method != http.MethodPost) ||
			r.Header.Get("X-Access-Token") != "" || id == "" {
			h.ServeHTTP(w, r)
			return
		}
		q := r.URL.Query()
		if !q.Has("signature") {
			writeError(w, http.StatusUnauthorized, "missing signature query parameter")
			return
		}
		var expiry int64
		if v := q.Get("signature_expiration"); v != "" {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				writeError(w, http.StatusBadRequest, "Invalid format for parameter signature_expiration: "+err.Error())
				return
			}
			expiry = n
		}
		token, err := f.signedWith(r.Context(), id, q.Get("path"), op, q.Get("username"), q.Get("signature"), expiry)
		if err != nil {
			if errdefs.Is(err, errdefs.ClassNotFound) {
				// As for a token: a sandbox that is gone answers 502.
				writeError(w, http.StatusBadGateway, "sandbox "+id+" not found")
				return
			}
			writeError(w, httpStatus(err), err.Error())
			return
		}
		if token == "" {
			writeError(w, http.StatusUnauthorized, "invalid signature")
			return
		}
		if expiry != 0 && expiry < time.Now().Unix() {
			writeError(w, http.StatusUnauthorized, "signature is already expired")
			return
		}
		r = r.Clone(r.Context())
		r.Header.Set("X-Access-Token", token)
		h.ServeHTTP(w, r)
	})
}

// signedWith finds the live token of sandbox id that sig was made with, or
// "" when none was.
func (f *Facade) signedWith(ctx context.Context, id, path, op, user, sig string, expiry int64) (string, error) {
	tokens, err := f.app.SandboxTokens(ctx, id, liveExpiries(time.Now()))
	if err != nil {
		return "", err
	}
	found := ""
	for _, tok := range tokens {
		// Every candidate is compared, in constant time each, so the time
		// taken says nothing of which one matched.
		if subtle.ConstantTimeCompare([]byte(signature(path, op, user, tok, expiry)), []byte(sig)) == 1 {
			found = tok
		}
	}
	return found, nil
}
