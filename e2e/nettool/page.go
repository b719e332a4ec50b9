package main

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
)

// page is a hostile guest's web page: whatever script file holds, at every
// path, with a cookie; at …/toss, a cookie in the name of zeish's console
// session too (asked for last, so the page's other attempts run with the
// viewer's own session). It serves until killed.
func page(port, file string) error {
	html, err := os.ReadFile(file)
	if err != nil {
		return err
	}
	cookies, err := os.OpenFile(file+".cookies", os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	return http.ListenAndServe(":"+port, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(cookies, "%s %s\n", r.URL.Path, r.Header.Get("Cookie"))
		if strings.HasSuffix(r.URL.Path, "/toss") {
			w.Header().Add("Set-Cookie", "zeish_session=from-the-guest; Path=/console")
		}
		w.Header().Add("Set-Cookie", "guest=1; Path=/")
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		w.Write(html)
	}))
}

// silent holds every connection it gets and never writes a byte: a guest
// behind a port that wants to hold whoever calls it.
func silent(port string) error {
	ln, err := net.Listen("tcp", ":"+port)
	if err != nil {
		return err
	}
	for {
		c, err := ln.Accept()
		if err != nil {
			return err
		}
		go func() { io.Copy(io.Discard, c); c.Close() }()
	}
}
