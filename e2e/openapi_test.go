package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/http/httptest"
	"sort"
	"strings"
	"sync"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/gorillamux"

	"github.com/zeish/zeish/api"
)

// The OpenAPI document, loaded once for every test of the package.
var openAPI struct {
	once   sync.Once
	doc    *openapi3.T
	router routers.Router
	err    error
}

func openAPIRouter() (*openapi3.T, routers.Router, error) {
	openAPI.once.Do(func() {
		loader := openapi3.NewLoader()
		doc, err := loader.LoadFromData(api.OpenAPI)
		if err == nil {
			err = doc.Validate(loader.Context)
		}
		if err != nil {
			openAPI.err = fmt.Errorf("api/openapi.yaml: %w", err)
			return
		}
		// Match paths only: the test servers listen on random ports, and the
		// data plane may live at any host the access URL names.
		doc.Servers = nil
		openAPI.doc = doc
		openAPI.router, openAPI.err = gorillamux.NewRouter(doc)
	})
	return openAPI.doc, openAPI.router, openAPI.err
}

// validatingTransport holds zeishd to api/openapi.yaml: it finds each
// request's operation in the document, checks the request against it and the
// response (status, headers, content type and, for JSON, the body) against
// what the operation documents. Any mismatch fails t.
//
// A request the document refuses may still be sent on purpose (the tests of
// bad input do): then the server must refuse it too, with a documented 4xx.
// Streaming bodies (exec's NDJSON, file downloads, server-sent events) are
// checked for status and content type only, so they stay streams.
type validatingTransport struct {
	report func(format string, args ...any) // t.Errorf
	seen   *checkedOps
	next   http.RoundTripper
}

// checkedOps counts the exchanges checked per operation, for one test.
type checkedOps struct {
	mu  sync.Mutex
	ops map[string]int
}

func (c *checkedOps) add(op string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.ops[op]++
}

// seenByTest shares one count among the transports of a test and logs it
// when the test ends (shown with -v), so a silent pass can be told from an
// unchecked one.
var seenByTest sync.Map // *testing.T → *checkedOps

func newValidatingTransport(t *testing.T) *validatingTransport {
	t.Helper()
	if _, _, err := openAPIRouter(); err != nil {
		t.Fatal(err)
	}
	seen, loaded := seenByTest.LoadOrStore(t, &checkedOps{ops: map[string]int{}})
	c := seen.(*checkedOps)
	if !loaded {
		t.Cleanup(func() {
			c.mu.Lock()
			defer c.mu.Unlock()
			var ops []string
			total := 0
			for op, n := range c.ops {
				ops = append(ops, fmt.Sprintf("%s×%d", op, n))
				total += n
			}
			sort.Strings(ops)
			t.Logf("openapi: %d exchanges checked against api/openapi.yaml: %s", total, strings.Join(ops, " "))
			seenByTest.Delete(t)
		})
	}
	return &validatingTransport{report: t.Errorf, seen: c, next: http.DefaultTransport}
}

// streamingTypes are response media types whose bodies are not read here.
var streamingTypes = map[string]bool{
	"application/x-ndjson":     true,
	"application/octet-stream": true,
	"text/event-stream":        true,
	"image/png":                true, // a desktop screenshot
}

func (v *validatingTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	// JSON bodies are small (the server caps them at 1 MiB): buffer one so it
	// can be both checked and sent. Uploads stream through unread.
	var body []byte
	bodyRead := false
	ct := mediaType(req.Header.Get("Content-Type"))
	if req.Body != nil && req.Body != http.NoBody && (ct == "" || ct == "application/json") {
		b, err := io.ReadAll(req.Body)
		req.Body.Close()
		if err != nil {
			return nil, err
		}
		body, bodyRead = b, true
		out := req.Clone(req.Context())
		out.Body = io.NopCloser(bytes.NewReader(b))
		out.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b)), nil }
		out.ContentLength = int64(len(b))
		req = out
	}
	resp, err := v.next.RoundTrip(req)
	if err != nil {
		return resp, err
	}
	if resp.StatusCode == http.StatusSwitchingProtocols {
		return resp, nil // an upgraded connection (a WebSocket): its body never ends
	}
	if problem := v.check(req, body, bodyRead, resp); problem != "" {
		v.report("openapi: %s %s → %d: %s", req.Method, req.URL.Path, resp.StatusCode, problem)
	}
	return resp, nil
}

func mediaType(ct string) string {
	mt, _, err := mime.ParseMediaType(ct)
	if err != nil {
		return ct
	}
	return mt
}

// check validates one exchange and says what is wrong, or "".
func (v *validatingTransport) check(req *http.Request, body []byte, bodyRead bool, resp *http.Response) string {
	doc, router, _ := openAPIRouter()
	ctx := context.Background()
	vreq := req.Clone(ctx)
	vreq.Body = io.NopCloser(bytes.NewReader(body))
	if bodyRead && len(body) > 0 && vreq.Header.Get("Content-Type") == "" {
		// The server reads every body as JSON whatever its Content-Type;
		// the raw helper sends none.
		vreq.Header.Set("Content-Type", "application/json")
	}
	respCT := mediaType(resp.Header.Get("Content-Type"))

	route, params, err := router.FindRoute(vreq)
	if v.seen != nil {
		op := "(undocumented)"
		if err == nil {
			op = route.Operation.OperationID
		}
		v.seen.add(op)
	}
	if err != nil {
		// Not an operation of the document: the server must refuse it.
		if resp.StatusCode < 400 {
			return fmt.Sprintf("not documented (%v), yet served", err)
		}
		return v.checkBody(resp, respCT, doc.Components.Schemas["Error"])
	}

	opts := &openapi3filter.Options{
		AuthenticationFunc:    checkBearer,
		SkipSettingDefaults:   true,
		ExcludeRequestBody:    !bodyRead,
		IncludeResponseStatus: true,
		MultiError:            true,
	}
	in := &openapi3filter.RequestValidationInput{Request: vreq, PathParams: params, Route: route, Options: opts}
	reqErr := openapi3filter.ValidateRequest(ctx, in)
	if reqErr != nil && resp.StatusCode < 400 {
		return fmt.Sprintf("the server accepted a request the document refuses: %v", reqErr)
	}
	if !bodyRead && req.Body != nil && req.Body != http.NoBody {
		// An unread (streamed) body must at least be of a documented type.
		if rb := route.Operation.RequestBody; rb == nil || rb.Value.Content.Get(mediaType(req.Header.Get("Content-Type"))) == nil {
			return fmt.Sprintf("request body of type %q is not documented", req.Header.Get("Content-Type"))
		}
	}

	out := &openapi3filter.ResponseValidationInput{
		RequestValidationInput: in,
		Status:                 resp.StatusCode,
		Header:                 resp.Header,
		Options:                opts,
	}
	if resp.StatusCode == http.StatusSwitchingProtocols {
		// A WebSocket: the upgrade must be documented; the body is the socket.
		if route.Operation.Responses.Status(resp.StatusCode) == nil {
			return "WebSocket upgrade (101) not documented"
		}
		return ""
	}
	if streamingTypes[respCT] {
		// Status, headers and content type; the body stays a stream.
		ref := route.Operation.Responses.Status(resp.StatusCode)
		if ref == nil || ref.Value.Content.Get(respCT) == nil {
			return fmt.Sprintf("response %d of type %q is not documented", resp.StatusCode, respCT)
		}
		streamOpts := *opts
		streamOpts.ExcludeResponseBody = true
		out.Options = &streamOpts
		out.Body = http.NoBody
		if err := openapi3filter.ValidateResponse(ctx, out); err != nil {
			return err.Error()
		}
		return ""
	}
	raw, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	resp.Body = io.NopCloser(bytes.NewReader(raw))
	if err != nil {
		return "" // the caller sees the read error itself
	}
	out.SetBodyBytes(raw)
	if err := openapi3filter.ValidateResponse(ctx, out); err != nil {
		return fmt.Sprintf("%v\nbody: %s", err, truncate(raw))
	}
	if ref := route.Operation.Responses.Status(resp.StatusCode); ref != nil && len(ref.Value.Content) == 0 && len(raw) > 0 {
		return fmt.Sprintf("response %d documents no body but has one: %s", resp.StatusCode, truncate(raw))
	}
	return ""
}

// checkBody validates a JSON response body against schema (for routes the
// document does not have, whose answer must still be the error envelope).
func (v *validatingTransport) checkBody(resp *http.Response, respCT string, schema *openapi3.SchemaRef) string {
	raw, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	resp.Body = io.NopCloser(bytes.NewReader(raw))
	if err != nil {
		return ""
	}
	if respCT != "application/json" {
		return fmt.Sprintf("error response of type %q, want application/json", respCT)
	}
	var value any
	if err := json.Unmarshal(raw, &value); err != nil {
		return fmt.Sprintf("error response is not JSON: %v", err)
	}
	if err := schema.Value.VisitJSON(value); err != nil {
		return fmt.Sprintf("error response does not match Error: %v\nbody: %s", err, truncate(raw))
	}
	return ""
}

// checkBearer is the document's two security schemes: API keys (zk_…) for
// the control plane, data-plane tokens (zdp_…) for the data plane.
func checkBearer(_ context.Context, in *openapi3filter.AuthenticationInput) error {
	h := in.RequestValidationInput.Request.Header.Get("Authorization")
	tok, ok := strings.CutPrefix(h, "Bearer ")
	if !ok || tok == "" {
		return errors.New("no Authorization: Bearer header")
	}
	prefix := map[string]string{"apiKey": "zk_", "dataToken": "zdp_"}[in.SecuritySchemeName]
	if !strings.HasPrefix(tok, prefix) {
		return fmt.Errorf("scheme %s wants a %s… credential", in.SecuritySchemeName, prefix)
	}
	return nil
}

func truncate(b []byte) string {
	if len(b) > 2000 {
		return string(b[:2000]) + "…"
	}
	return string(b)
}

// TestValidatingTransport proves the checker itself on a fake server (no
// VM): conforming exchanges pass, and each kind of drift is reported.
func TestValidatingTransport(t *testing.T) {
	const id = "sbx_0123456789abcdefghjk"
	sandboxJSON := func(state string) string {
		return `{"id":"` + id + `","name":"demo","account_id":"acc_admin","state":"` + state + `","template":"base",
			"vcpus":1,"memory_mib":512,"disk_mib":2048,"region":"local","host":"n1","hostname":"demo","address":"10.88.0.2",
			"env":{},"browser":false,"desktop":false,"metadata":{},"cost_micros":0,
			"created_at":"2025-01-02T03:04:05Z","updated_at":"2025-01-02T03:04:05.123456789Z"}`
	}
	const errNotFound = `{"error":{"code":"not_found","message":"no such route"}}`
	cases := []struct {
		name, method, path, auth, body string
		status                         int
		contentType, respBody          string
		wantProblem                    string // "" for none
	}{
		{"valid get", "GET", "/api/v1/public/sandboxes/" + id, "zk_x", "", 200, "application/json", sandboxJSON("running"), ""},
		{"bad state in response", "GET", "/api/v1/public/sandboxes/" + id, "zk_x", "", 200, "application/json", sandboxJSON("sleepy"), "doesn't match"},
		{"missing required field", "GET", "/api/v1/public/sandboxes/" + id, "zk_x", "", 200, "application/json", `{"id":"` + id + `"}`, "doesn't match"},
		{"undocumented status", "GET", "/api/v1/public/sandboxes/" + id, "zk_x", "", 418, "application/json", errNotFound, "status is not supported"},
		{"bad error code", "GET", "/api/v1/public/sandboxes/" + id, "zk_x", "", 404, "application/json", `{"error":{"code":"nope","message":"x"}}`, "doesn't match"},
		{"refused request refused", "POST", "/api/v1/public/sandboxes", "zk_x", `{"colour":"red"}`, 400, "application/json",
			`{"error":{"code":"invalid_argument","message":"unknown field"}}`, ""},
		{"refused request accepted", "POST", "/api/v1/public/sandboxes", "zk_x", `{"colour":"red"}`, 202, "application/json", sandboxJSON("starting"), "accepted a request"},
		{"no key accepted", "GET", "/api/v1/public/sandboxes/" + id, "", "", 200, "application/json", sandboxJSON("running"), "accepted a request"},
		{"unknown route refused", "GET", "/api/v1/public/nothing", "zk_x", "", 404, "application/json", errNotFound, ""},
		{"unknown route served", "GET", "/api/v1/public/nothing", "zk_x", "", 200, "application/json", `{}`, "not documented"},
		{"exec stream", "POST", "/data/v1/sandboxes/" + id + "/exec", "zdp_x", `{"argv":["true"]}`, 200, "application/x-ndjson", `{"type":"exit"}`, ""},
		{"exec wrong type", "POST", "/data/v1/sandboxes/" + id + "/exec", "zdp_x", `{"argv":["true"]}`, 200, "text/plain", `hi`, "Content-Type"},
		{"exec with api key", "POST", "/data/v1/sandboxes/" + id + "/exec", "zk_x", `{"argv":["true"]}`, 200, "application/x-ndjson", `{"type":"exit"}`, "accepted a request"},
		{"no content", "DELETE", "/data/v1/sandboxes/" + id + "/files?path=/tmp/x", "zdp_x", "", 204, "", "", ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				io.Copy(io.Discard, r.Body)
				if c.contentType != "" {
					w.Header().Set("Content-Type", c.contentType)
				}
				w.WriteHeader(c.status)
				io.WriteString(w, c.respBody)
			}))
			defer srv.Close()
			var problems []string
			vt := newValidatingTransport(t)
			vt.report = func(format string, args ...any) { problems = append(problems, fmt.Sprintf(format, args...)) }
			var rd io.Reader
			if c.body != "" {
				rd = strings.NewReader(c.body)
			}
			req, _ := http.NewRequest(c.method, srv.URL+c.path, rd)
			if c.auth != "" {
				req.Header.Set("Authorization", "Bearer "+c.auth)
			}
			resp, err := (&http.Client{Transport: vt}).Do(req)
			if err != nil {
				t.Fatal(err)
			}
			got, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if string(got) != c.respBody {
				t.Errorf("the caller got body %q, want %q untouched", got, c.respBody)
			}
			switch {
			case c.wantProblem == "" && len(problems) > 0:
				t.Errorf("unexpected problems: %v", problems)
			case c.wantProblem != "" && (len(problems) != 1 || !strings.Contains(problems[0], c.wantProblem)):
				t.Errorf("problems %v, want one mentioning %q", problems, c.wantProblem)
			}
		})
	}
}
