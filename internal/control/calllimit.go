package control

import (
	"errors"
	"fmt"
	"sync"

	"github.com/zeish/zeish/errdefs"
)

// CallLimits bound the data plane's work in flight: calls (exec, files,
// terminals, E2B's envd), guest-port requests and TCP forwards. 0: no
// limit.
type CallLimits struct {
	// PerSandbox bounds one sandbox's: each holds a guest stream, a
	// goroutine and buffers on the host, so one client (or one busy guest)
	// cannot take the host's memory; past it a call gets 429
	// too_many_requests at once instead of queueing.
	PerSandbox int
	// PerAccount bounds the same across all of an account's sandboxes, so
	// one tenant (or the public traffic to its ports) cannot take all of
	// the server's connections (ZEISH_MAX_CONNECTIONS): past it a call gets
	// 429 account_calls_full.
	PerAccount int
}

// DefaultCalls are the limits when the configuration names none.
var DefaultCalls = CallLimits{PerSandbox: 32, PerAccount: 128}

func (o Options) callLimits() CallLimits {
	if o.Calls == nil {
		return DefaultCalls
	}
	return *o.Calls
}

// callLimiter counts the data plane's work in flight: calls (exec, files,
// terminals, E2B's envd), requests to guest ports and TCP splices, by
// sandbox and by the account that owns it. A request to a public port
// without a token counts against the sandbox's owner: it holds the owner's
// guest, whoever sent it.
type callLimiter struct {
	mu         sync.Mutex
	perSandbox int
	perAccount int
	sandboxes  map[string]int
	accounts   map[string]int
}

func newCallLimiter(l CallLimits) *callLimiter {
	return &callLimiter{perSandbox: l.PerSandbox, perAccount: l.PerAccount, sandboxes: map[string]int{}, accounts: map[string]int{}}
}

// acquire takes a slot of sandbox id and of its account; call the returned
// func when done (more than once is harmless). A limit of 0 or less is no
// limit.
func (l *callLimiter) acquire(id, account string) (func(), error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.perSandbox > 0 && l.sandboxes[id] >= l.perSandbox {
		return nil, fmt.Errorf("sandbox %s has %d data-plane calls and port connections in flight, the most it may: %w", id, l.perSandbox, errdefs.ErrTooManyRequests)
	}
	if l.perAccount > 0 && l.accounts[account] >= l.perAccount {
		return nil, fmt.Errorf("the account of sandbox %s has %d data-plane calls and port connections in flight across its sandboxes, the most it may: %w", id, l.perAccount, errdefs.ErrAccountCalls)
	}
	l.sandboxes[id]++
	l.accounts[account]++
	var once sync.Once
	return func() {
		once.Do(func() {
			l.mu.Lock()
			defer l.mu.Unlock()
			drop(l.sandboxes, id)
			drop(l.accounts, account)
		})
	}, nil
}

// Busy reports whether err is the data plane's budget refusing a call
// (too_many_requests, account_calls_full): a front end closes the refused
// client's connection, so it keeps none either, and has it retry in a
// second.
func Busy(err error) bool {
	return errors.Is(err, errdefs.ErrTooManyRequests) || errors.Is(err, errdefs.ErrAccountCalls)
}

// CallsInFlight is what sandbox id and account hold of the data plane's
// budget now (for the front ends' tests).
func (c *Control) CallsInFlight(id, account string) (sandbox, acct int) {
	return c.calls.inFlight(id, account)
}

// inFlight is what sandbox id and its account hold now.
func (l *callLimiter) inFlight(id, account string) (sandbox, acct int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.sandboxes[id], l.accounts[account]
}

func drop(m map[string]int, k string) {
	if m[k]--; m[k] <= 0 {
		delete(m, k)
	}
}
