package errdefs

import (
	"net/http"
	"strings"
)

// The one table of what each class of error is on each of zeish's wires.
// Every front end answers through it: the REST API and the console
// (internal/server), the E2B facade's control plane and envd
// (internal/e2b), the node protocol (internal/nodeapi); the SDK reads it
// backwards for an answer without a code (FromHTTPStatus).

// RPCCode is a Connect (and gRPC) status code. The numbers are the
// protocol's, so connect.Code(c) is the same code; errdefs's test checks
// them against connect's constants (the package itself imports nothing,
// for the SDK's sake).
type RPCCode uint32

// The Connect codes the table uses.
const (
	RPCInvalidArgument    RPCCode = 3
	RPCNotFound           RPCCode = 5
	RPCAlreadyExists      RPCCode = 6
	RPCPermissionDenied   RPCCode = 7
	RPCResourceExhausted  RPCCode = 8
	RPCFailedPrecondition RPCCode = 9
	RPCInternal           RPCCode = 13
	RPCUnavailable        RPCCode = 14
	RPCUnauthenticated    RPCCode = 16
)

// Wire is how one class of error is answered on each wire.
type Wire struct {
	// HTTP is the status of zeish's REST API and of the E2B facade's
	// control plane.
	HTTP int
	// RPC is the Connect code of the node protocol and of envd's RPC
	// services (E2B's SDK turns it into its error classes).
	RPC RPCCode
	// Envd is the status of envd's HTTP routes (/files, /health). It is
	// HTTP's but for Unavailable: E2B's SDK reads 502, what E2B's proxy
	// answers for a sandbox that is gone, as "not running".
	Envd int
	// Generic is the class's code when nothing more is known (an answer
	// that carries only its status).
	Generic *Error
}

var wires = [...]Wire{
	ClassInternal:         {http.StatusInternalServerError, RPCInternal, http.StatusInternalServerError, ErrInternal},
	ClassInvalid:          {http.StatusBadRequest, RPCInvalidArgument, http.StatusBadRequest, ErrInvalidArgument},
	ClassUnauthenticated:  {http.StatusUnauthorized, RPCUnauthenticated, http.StatusUnauthorized, ErrUnauthenticated},
	ClassPermissionDenied: {http.StatusForbidden, RPCPermissionDenied, http.StatusForbidden, ErrForbidden},
	ClassNotFound:         {http.StatusNotFound, RPCNotFound, http.StatusNotFound, ErrNotFound},
	ClassConflict:         {http.StatusConflict, RPCFailedPrecondition, http.StatusConflict, ErrInvalidState},
	ClassExists:           {http.StatusConflict, RPCAlreadyExists, http.StatusConflict, ErrNameTaken},
	ClassRateLimited:      {http.StatusTooManyRequests, RPCResourceExhausted, http.StatusTooManyRequests, ErrRateLimited},
	ClassUnavailable:      {http.StatusServiceUnavailable, RPCUnavailable, http.StatusBadGateway, ErrUnavailable},
	ClassTooLarge:         {http.StatusRequestEntityTooLarge, RPCResourceExhausted, http.StatusRequestEntityTooLarge, ErrUploadTooLarge},
}

// WireOf is class c's row of the table.
func WireOf(c Class) Wire {
	if c < 0 || int(c) >= len(wires) {
		return wires[ClassInternal]
	}
	return wires[c]
}

// Classes lists every class, in the table's order.
func Classes() []Class {
	out := make([]Class, len(wires))
	for i := range wires {
		out[i] = Class(i)
	}
	return out
}

// HTTPStatus is the REST status of err.
func HTTPStatus(err error) int { return WireOf(Of(err).Class).HTTP }

// EnvdStatus is the status of err on envd's HTTP routes.
func EnvdStatus(err error) int { return WireOf(Of(err).Class).Envd }

// RPC is the Connect code of err.
func RPC(err error) RPCCode { return WireOf(Of(err).Class).RPC }

// FromHTTPStatus is the code an answer with this status and no code of
// its own stands for: the table read backwards (the first class with that
// status), and the statuses a proxy between a client and zeishd answers.
func FromHTTPStatus(status int) *Error {
	switch status {
	case http.StatusBadGateway:
		return ErrUnavailable
	case http.StatusGatewayTimeout:
		return ErrTimeout
	}
	for _, w := range wires {
		if w.HTTP == status {
			return w.Generic
		}
	}
	return ErrInternal
}

// serverMessages are what a client reads of an error the server answers
// with a 5xx: a fixed sentence per code, never the error's own text
// (QEMU's words, paths, addresses, SQL); the server's log has that.
var serverMessages = map[*Error]string{
	ErrInternal:    "an internal error occurred; the server's log has the detail under this request_id",
	ErrUnavailable: "a dependency (the sandbox's VM or agent, or the store) is not reachable now; retry later",
	ErrTimeout:     "the operation did not finish in time; read the object to see where it is",
}

// Public is what a client may read of err: its code, and its message when
// the caller is at fault (a 4xx), else a fixed sentence (serverMessages,
// or the code's doc line). Which it is says ServerFault.
func Public(err error) (code, message string) {
	e := Of(err)
	if ServerFault(err) {
		if msg := serverMessages[e]; msg != "" {
			return e.Code, msg
		}
		return e.Code, e.Doc
	}
	// The sentinel's code closes every wrapped message; drop it from the text.
	msg := strings.TrimSuffix(strings.TrimSuffix(err.Error(), e.Code), ": ")
	return e.Code, msg
}

// ServerFault reports whether err is the server's to answer for (a 5xx):
// its text stays in the server's log.
func ServerFault(err error) bool { return HTTPStatus(err) >= 500 }
