package main

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"github.com/zeish/zeish/internal/config"
	"net/http"
	"net/url"
	"os"
	"strings"
)

// hostTLS is how zeishd talks to other hosts of a cluster and serves them:
// ZEISH_TLS_CERT and ZEISH_TLS_KEY make any role's listener serve HTTPS;
// ZEISH_CLUSTER_CA is the CA bundle a control plane verifies its nodes'
// certificates with and a node its control plane's (none: the system's
// roots); ZEISH_CLUSTER_ALLOW_HTTP=on lets node and control URLs be plain
// http:// (a private network, the tests), which is refused otherwise: the
// credentials of both directions and the data plane's tokens would cross
// the wire in the clear.
type hostTLS struct {
	certFile, keyFile string
	roots             *x509.CertPool // nil: the system's
	allowHTTP         bool
}

func loadHostTLS(cfg *config.Config) (hostTLS, error) {
	// Both or neither: internal/config checked.
	h := hostTLS{certFile: cfg.TLSCert, keyFile: cfg.TLSKey, allowHTTP: cfg.ClusterAllowHTTP}
	if h.certFile != "" {
		if _, err := tls.LoadX509KeyPair(h.certFile, h.keyFile); err != nil {
			return h, fmt.Errorf("ZEISH_TLS_CERT/ZEISH_TLS_KEY: %w", err)
		}
	}
	if ca := cfg.ClusterCA; ca != "" {
		b, err := os.ReadFile(ca)
		if err != nil {
			return h, fmt.Errorf("ZEISH_CLUSTER_CA: %w", err)
		}
		h.roots = x509.NewCertPool()
		if !h.roots.AppendCertsFromPEM(b) {
			return h, fmt.Errorf("ZEISH_CLUSTER_CA=%s: no PEM certificate in it", ca)
		}
	}
	return h, nil
}

// serves reports whether the listener serves HTTPS.
func (h hostTLS) serves() bool { return h.certFile != "" }

// scheme is the scheme of this process's own URL.
func (h hostTLS) scheme() string {
	if h.serves() {
		return "https"
	}
	return "http"
}

// checkPeer refuses a URL of another host (what setting names it) that
// would carry credentials in the clear.
func (h hostTLS) checkPeer(setting, raw string) error {
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
		return fmt.Errorf("%s: %q is not an https://host:port URL", setting, raw)
	}
	if u.Scheme == "http" && !h.allowHTTP {
		return fmt.Errorf("%s=%s: plain http sends the cluster's credentials in the clear; use https:// (ZEISH_TLS_CERT on that host, ZEISH_CLUSTER_CA here), or set ZEISH_CLUSTER_ALLOW_HTTP=on on a private network", setting, raw)
	}
	return nil
}

// rpcClient is the HTTP client of the node protocol's calls to other
// hosts: TLS verified against ZEISH_CLUSTER_CA, HTTP/2 (over TLS, or over
// plain TCP where http:// is allowed), so streamed calls work both ways.
func (h hostTLS) rpcClient() *http.Client {
	t := h.transport()
	t.Protocols = new(http.Protocols)
	t.Protocols.SetHTTP2(true)
	if h.allowHTTP {
		t.Protocols.SetUnencryptedHTTP2(true)
	}
	return &http.Client{Transport: t}
}

// proxyTransport carries the data plane a control plane hands on to a
// node (guest ports, WebSocket upgrades, raw TCP): HTTP/1.1, which
// upgrades need.
func (h hostTLS) proxyTransport() *http.Transport {
	t := h.transport()
	t.Protocols = new(http.Protocols)
	t.Protocols.SetHTTP1(true)
	return t
}

func (h hostTLS) transport() *http.Transport {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.TLSClientConfig = &tls.Config{RootCAs: h.roots, MinVersion: tls.VersionTLS12}
	return t
}

// serverProtocols are what the listener speaks: HTTP/1.1 and HTTP/2 (over
// TLS; over plain TCP only where http:// between hosts is allowed).
func (h hostTLS) serverProtocols() *http.Protocols {
	p := new(http.Protocols)
	p.SetHTTP1(true)
	p.SetHTTP2(true)
	if h.allowHTTP {
		p.SetUnencryptedHTTP2(true)
	}
	return p
}

// urls splits a comma-separated list of URLs.
func urls(s string) []string {
	var out []string
	for _, u := range strings.Split(s, ",") {
		if u = strings.TrimSuffix(strings.TrimSpace(u), "/"); u != "" {
			out = append(out, u)
		}
	}
	return out
}
