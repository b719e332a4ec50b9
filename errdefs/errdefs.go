// Package errdefs defines the error classes and stable error codes that zeish
// uses everywhere. Errors are wrapped at their source with %w; wire.go maps
// each class to what every wire answers (an HTTP status, a Connect code,
// envd's status) in one table, and the SDK maps a code back to the same
// sentinel, so errors.Is(err, errdefs.ErrNodeFull) works on both sides.
package errdefs

import "errors"

// Class groups codes that share a meaning for callers, and so an answer
// on every wire (wire.go).
type Class int

const (
	// ClassInternal: the server failed; the caller cannot fix it.
	ClassInternal Class = iota
	// ClassInvalid: the request is wrong; sent again unchanged it fails again.
	ClassInvalid
	// ClassUnauthenticated: no credential, or one that is not (or no longer) valid.
	ClassUnauthenticated
	// ClassPermissionDenied: a valid credential that may not do this.
	ClassPermissionDenied
	// ClassNotFound: no such object, or one the caller may not see.
	ClassNotFound
	// ClassConflict: the object, the account or the host is not in a state
	// that allows this now (its state, a limit, a quota, room).
	ClassConflict
	// ClassExists: the name or path is already taken.
	ClassExists
	// ClassRateLimited: too many calls in a short time; retry later.
	ClassRateLimited
	// ClassUnavailable: a dependency is not reachable or did not answer in
	// time; the same call may succeed later.
	ClassUnavailable
	// ClassTooLarge: a request body larger than allowed, or than what the
	// account has left of a quota.
	ClassTooLarge
)

// Error is a sentinel: one stable API code in one class.
type Error struct {
	Code  string
	Class Class
	Doc   string // one line for the API reference
}

func (e *Error) Error() string { return e.Code }

var all []*Error

func def(code string, class Class, doc string) *Error {
	e := &Error{Code: code, Class: class, Doc: doc}
	all = append(all, e)
	return e
}

// The codes the API can return. Keep api/openapi.yaml's ErrorCode enum in step
// (a test checks it).
var (
	ErrInternal        = def("internal", ClassInternal, "An unexpected server error; the server's log has its detail under the request_id.")
	ErrInvalidArgument = def("invalid_argument", ClassInvalid, "The request is malformed: unknown field, bad value or missing field.")
	ErrUnknownTemplate = def("unknown_template", ClassInvalid, "The template named in the request does not exist.")
	ErrInvalidGitRepo  = def("invalid_git_repo", ClassInvalid, "git_repo is not an http://, https:// or git:// URL with a host.")
	ErrGitCredentials  = def("git_credentials_in_url", ClassInvalid, "git_repo holds a user name or password; pass a token in secrets (GIT_TOKEN) instead.")
	ErrInvalidGitRef   = def("invalid_git_ref", ClassInvalid, "git_branch is not a valid branch name, pr_number is not positive, or git_pr_ref lacks {n}.")
	ErrGitRefConflict  = def("git_ref_conflict", ClassInvalid, "git_branch and pr_number name different branches (a pull request is checked out on pr-N).")
	ErrNoGitRepo       = def("no_git_repo", ClassInvalid, "A git field was given without git_repo, or the sandbox has no git_repo.")
	ErrTemplateNoGit   = def("template_lacks_git", ClassInvalid, "The template has no git; use the debian template.")
	ErrLacksFeature    = def("template_lacks_feature", ClassInvalid, "The sandbox asks for browser or desktop and its template does not carry that software; the message names a template that does.")
	ErrInvalidAccel    = def("invalid_accel", ClassInvalid, "accel is not kvm or tcg.")
	ErrUnauthenticated = def("unauthenticated", ClassUnauthenticated, "No API key or token, or one that is not valid.")
	ErrTokenExpired    = def("token_expired", ClassUnauthenticated, "The data-plane token has expired; request a new one with /access.")
	ErrForbidden       = def("forbidden", ClassPermissionDenied, "The credential is valid but may not do this.")
	ErrNotFound        = def("not_found", ClassNotFound, "No such object (or it belongs to another account).")
	ErrFileNotFound    = def("file_not_found", ClassNotFound, "No such file or directory inside the sandbox.")
	ErrInvalidState    = def("invalid_state", ClassConflict, "The object is not in a state that allows this operation.")
	ErrNameTaken       = def("name_taken", ClassExists, "The name is already used.")
	ErrFileExists      = def("file_exists", ClassExists, "A file already exists at that path inside the sandbox.")
	ErrNodeFull        = def("node_full", ClassConflict, "The host has no free memory for this sandbox.")
	ErrLimitReached    = def("limit_reached", ClassConflict, "A per-object limit is reached (for example 20 snapshots per sandbox).")
	ErrRunningSlots    = def("running_slots_full", ClassConflict, "The account has no free running slot.")
	ErrStorageFull     = def("storage_full", ClassConflict, "The host has no room left for this sandbox's memory or disk; delete snapshots or stopped sandboxes.")
	ErrBudgetExhausted = def("budget_exhausted", ClassConflict, "The sandbox's max_cost_micros is reached: it stays stopped; fork it with a new budget.")
	ErrRateLimited     = def("rate_limited", ClassRateLimited, "Too many creates in a short time; retry after Retry-After seconds.")
	ErrDailyCap        = def("daily_cap_reached", ClassRateLimited, "The account's daily create cap is reached.")
	ErrTooManyRequests = def("too_many_requests", ClassRateLimited, "Too many data-plane calls, guest-port requests and TCP forwards in flight on this sandbox; retry when one has finished.")
	ErrAccountCalls    = def("account_calls_full", ClassRateLimited, "Too many data-plane calls, guest-port requests and TCP forwards in flight across the account's sandboxes; retry when one has finished.")
	ErrTimeout         = def("timeout", ClassUnavailable, "The operation did not finish in time.")
	ErrUnavailable     = def("unavailable", ClassUnavailable, "A dependency (the VM, its agent, the store) is not reachable now.")
)

// All returns every defined code, for docs and conformance tests.
func All() []*Error { return append([]*Error(nil), all...) }

// ByCode returns the sentinel for an API code, or nil.
func ByCode(code string) *Error {
	for _, e := range all {
		if e.Code == code {
			return e
		}
	}
	return nil
}

// Of returns the zeish error that err wraps, or ErrInternal.
func Of(err error) *Error {
	var e *Error
	if errors.As(err, &e) {
		return e
	}
	return ErrInternal
}

// Is reports whether err belongs to class c.
func Is(err error, c Class) bool {
	var e *Error
	return errors.As(err, &e) && e.Class == c
}

// Reclass gives err the code as for callers above the layer that made it:
// Of and Is answer as, whatever err wraps, while errors.Is still sees err's
// own chain. A VMM driver that calls a spec invalid is the server's fault,
// not the client's: the node reclasses driver errors so none reaches a
// client as a 400 or 409 of the driver's making.
func Reclass(err error, as *Error) error {
	if err == nil {
		return nil
	}
	return &reclassed{err: err, as: as}
}

type reclassed struct {
	err error
	as  *Error
}

func (r *reclassed) Error() string { return r.err.Error() }
func (r *reclassed) Unwrap() error { return r.err }

// As answers for the class before errors.As looks inside err.
func (r *reclassed) As(target any) bool {
	if p, ok := target.(**Error); ok {
		*p = r.as
		return true
	}
	return false
}
