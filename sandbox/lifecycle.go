package sandbox

import (
	"fmt"
	"slices"
	"strings"

	"github.com/zeish/zeish/errdefs"
)

// The lifecycle (docs/sandboxes.md, States: starting → running ⇄ paused,
// running → stopping → stopped → starting, error; deleting ends in
// destroyed) as one table: for each operation, the states it is allowed in and the state it
// leads to. Every package that moves a sandbox, refuses an operation or
// describes one (the server, the node, recovery, the CLI's help) asks here;
// none keeps a list of states of its own (a test in this package checks).

// Op is something done to a sandbox: a client's call, or the outcome of
// background work the node records.
type Op string

// A client's calls.
const (
	OpStart    Op = "start"
	OpStop     Op = "stop"
	OpPause    Op = "pause"
	OpResume   Op = "resume"
	OpDelete   Op = "delete"
	OpClone    Op = "clone"
	OpSnapshot Op = "snapshot"
	OpRestore  Op = "restore"
	// OpAccess is the data plane: a token, exec, files, terminals, ports.
	OpAccess     Op = "access"
	OpSetTimeout Op = "timeout"
	// OpSetNetwork changes the egress policy or a port's visibility.
	OpSetNetwork Op = "network"
)

// Outcomes of background work (the node records them; clients never ask).
const (
	// OpReady: a boot, start, restore or fork child has its agent answering.
	OpReady Op = "ready"
	// OpBootFailed: a new sandbox (created or forked) or a restore did not come up.
	OpBootFailed Op = "boot-failed"
	// OpStartFailed: a start of a stopped sandbox failed; nothing of it changed.
	OpStartFailed Op = "start-failed"
	OpStopped     Op = "stopped"
	// OpStopFailed: the suspend failed; the capture leaves the guest running.
	OpStopFailed   Op = "stop-failed"
	OpDestroyed    Op = "destroyed"
	OpDeleteFailed Op = "delete-failed"
	// OpCaptureLost: a capture lost the VM and the image is incomplete.
	OpCaptureLost Op = "capture-lost"
	// OpStranded: a capture's continuation did not start; the sandbox is
	// stopped on the image it was captured into.
	OpStranded Op = "stranded"
	// OpVMExited: the VM of a sandbox that should run ended on its own.
	OpVMExited Op = "vm-exited"
	// Recovery after a zeishd restart (Recover tells which applies).
	OpReattached  Op = "reattached"
	OpSettled     Op = "settled-stopped"
	OpVMLost      Op = "vm-lost"
	OpAgentSilent Op = "agent-silent"
	OpInterrupted Op = "interrupted"
	// OpRewind is a restore of a stopped sandbox as the node carries it
	// out, as the sandbox's next operation: it must still be stopped.
	OpRewind Op = "rewind"
	// OpNodeLost: the sandbox's node stopped heartbeating (the control
	// plane records it; nothing on the node is touched). A stopped sandbox
	// has no VM to lose and stays stopped.
	OpNodeLost Op = "node-lost"
	// OpRejoined and OpRejoinedPaused: the node came back and the VM of a
	// sandbox lost with it still runs; it is usable again as it was
	// (RejoinOp says which).
	OpRejoined       Op = "rejoined"
	OpRejoinedPaused Op = "rejoined-paused"
)

// stay marks an operation that leaves the state as it is.
const stay State = ""

// notDeleted: states whose outcome a background operation may still
// replace; a delete that arrived meanwhile must win, or the sandbox is
// never destroyed.
var notDeleted = []State{StateStarting, StateRunning, StatePaused, StateStopping, StateStopped, StateError}

// rule is one row of the table.
type rule struct {
	from []State
	to   State // stay: unchanged
	// to2 overrides to for particular from states (restore of a stopped
	// sandbox leaves it stopped).
	to2 map[State]State
	// words describe the operation in a refusal ("data-plane access").
	words string
}

var table = map[Op]rule{
	OpStart:      {from: []State{StateStopped}, to: StateStarting},
	OpStop:       {from: []State{StateRunning, StatePaused}, to: StateStopping},
	OpPause:      {from: []State{StateRunning}, to: StatePaused},
	OpResume:     {from: []State{StatePaused}, to: StateRunning},
	OpDelete:     {from: []State{StateStarting, StateRunning, StatePaused, StateStopping, StateStopped, StateError, StateDeleting}, to: StateDeleting},
	OpClone:      {from: []State{StateRunning, StatePaused, StateStopped}, to: stay, words: "a fork"},
	OpSnapshot:   {from: []State{StateRunning, StatePaused, StateStopped}, to: stay, words: "a snapshot"},
	OpRestore:    {from: []State{StateRunning, StatePaused, StateStopped, StateError}, to: StateStarting, to2: map[State]State{StateStopped: StateStopped}},
	OpAccess:     {from: []State{StateRunning}, to: stay, words: "data-plane access"},
	OpSetTimeout: {from: []State{StateStarting, StateRunning, StatePaused, StateStopping, StateStopped}, to: stay, words: "a timeout"},
	OpSetNetwork: {from: []State{StateStarting, StateRunning, StatePaused, StateStopping, StateStopped, StateError}, to: stay, words: "a network change"},

	OpReady:        {from: []State{StateStarting}, to: StateRunning},
	OpBootFailed:   {from: []State{StateStarting}, to: StateError},
	OpStartFailed:  {from: []State{StateStarting}, to: StateStopped},
	OpStopped:      {from: []State{StateStopping}, to: StateStopped},
	OpStopFailed:   {from: []State{StateStopping}, to: StateRunning},
	OpDestroyed:    {from: []State{StateDeleting}, to: StateDestroyed},
	OpDeleteFailed: {from: []State{StateDeleting}, to: StateError},
	OpCaptureLost:  {from: notDeleted, to: StateError},
	OpStranded:     {from: notDeleted, to: StateStopped},
	OpVMExited:     {from: []State{StateRunning, StatePaused}, to: StateError},
	OpReattached:   {from: []State{StateStarting, StateRunning, StateStopping}, to: StateRunning},
	OpSettled:      {from: []State{StateStarting, StateStopping}, to: StateStopped},
	OpVMLost:       {from: []State{StateStarting, StateRunning, StatePaused, StateStopping, StateStopped}, to: StateError},
	OpAgentSilent:  {from: []State{StateStarting, StateRunning, StatePaused, StateStopping}, to: StateError},
	OpInterrupted:  {from: []State{StateStarting}, to: StateError},
	OpRewind:       {from: []State{StateStopped}, to: stay, words: "a restore in place"},

	OpNodeLost:       {from: []State{StateStarting, StateRunning, StatePaused, StateStopping}, to: StateError},
	OpRejoined:       {from: []State{StateError}, to: StateRunning},
	OpRejoinedPaused: {from: []State{StateError}, to: StatePaused},
}

// RejoinOp is the operation that makes a sandbox lost with its node (in
// state from when it was lost) usable again once its VM is found running:
// a paused one stays paused, any other runs (an interrupted boot or stop
// left a running VM, which is the truth).
func RejoinOp(from State) Op {
	if from == StatePaused {
		return OpRejoinedPaused
	}
	return OpRejoined
}

// States lists every state, in lifecycle order.
var States = []State{StateStarting, StateRunning, StatePaused, StateStopping, StateStopped, StateDeleting, StateDestroyed, StateError}

// Valid reports whether s is a state.
func (s State) Valid() bool { return slices.Contains(States, s) }

// ClientOps lists the operations clients call, for help texts and tests.
var ClientOps = []Op{OpStart, OpStop, OpPause, OpResume, OpDelete, OpClone, OpSnapshot, OpRestore, OpAccess, OpSetTimeout, OpSetNetwork}

// Next returns the state op leads a sandbox in state from to, or a
// *Refusal (errdefs.ErrInvalidState; not_found for a delete of a destroyed
// sandbox).
func Next(from State, op Op) (State, error) {
	return NextFor("", from, op)
}

// NextFor is Next for sandbox id, whose id the refusal names.
func NextFor(id string, from State, op Op) (State, error) {
	r, ok := table[op]
	if !ok {
		panic(fmt.Sprintf("sandbox: unknown operation %q", op))
	}
	if !slices.Contains(r.from, from) {
		return "", &Refusal{ID: id, Op: op, State: from, Needs: r.from}
	}
	if to, ok := r.to2[from]; ok {
		return to, nil
	}
	if r.to == stay {
		return from, nil
	}
	return r.to, nil
}

// Allows reports whether op may be done to a sandbox in state from.
func Allows(from State, op Op) bool {
	_, err := Next(from, op)
	return err == nil
}

// Needs lists the states op is allowed in.
func Needs(op Op) []State { return slices.Clone(table[op].from) }

// Describe says, for a help text, which states op needs and where it leads.
func Describe(op Op) string {
	r := table[op]
	s := fmt.Sprintf("Needs the sandbox %s", orList(r.from))
	if !slices.ContainsFunc(LiveStates, func(st State) bool { return !slices.Contains(r.from, st) }) {
		s = "Any sandbox not destroyed"
	}
	switch {
	case r.to == stay:
		s += "; its state does not change."
	case len(r.to2) > 0:
		s += fmt.Sprintf("; it becomes %s", r.to)
		for _, from := range r.from {
			if to, ok := r.to2[from]; ok {
				s += fmt.Sprintf(" (%s stays %s)", from, to)
			}
		}
		s += "."
	default:
		s += fmt.Sprintf("; it becomes %s.", r.to)
	}
	return s
}

// Refusal is an operation the lifecycle does not allow in the sandbox's
// state. It is errdefs.ErrInvalidState, except a delete of a destroyed
// sandbox, which is not found: it is history, and deleted already.
type Refusal struct {
	ID    string // may be empty
	Op    Op
	State State
	Needs []State
}

func (e *Refusal) sentinel() *errdefs.Error {
	if e.State == StateDestroyed && e.Op == OpDelete {
		return errdefs.ErrNotFound
	}
	return errdefs.ErrInvalidState
}

func (e *Refusal) Error() string {
	who := "the sandbox"
	if e.ID != "" {
		who = "sandbox " + e.ID
	}
	if e.sentinel() == errdefs.ErrNotFound {
		return fmt.Sprintf("%s is already destroyed: %s", who, e.sentinel().Code)
	}
	what := table[e.Op].words
	if what == "" {
		what = string(e.Op)
	}
	return fmt.Sprintf("%s is %s; %s needs it %s: %s", who, e.State, what, orList(e.Needs), e.sentinel().Code)
}

func (e *Refusal) Unwrap() error { return e.sentinel() }

// orList writes states as "running, paused or stopped".
func orList(states []State) string {
	words := make([]string, len(states))
	for i, s := range states {
		words[i] = string(s)
	}
	if len(words) <= 1 {
		return strings.Join(words, "")
	}
	return strings.Join(words[:len(words)-1], ", ") + " or " + words[len(words)-1]
}
