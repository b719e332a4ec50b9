package sandbox

import (
	"errors"
	"strings"
	"testing"

	"github.com/zeish/zeish/errdefs"
)

// TestLifecycle checks the table row by row against the rule of docs/ each
// row comes from. refused: the operation is refused in that state (with
// invalid_state, or not_found for a delete of a destroyed sandbox).
func TestLifecycle(t *testing.T) {
	const refused State = "(refused)"
	cases := []struct {
		rule string // what the row checks, in the words of docs/
		op   Op
		from State
		want State
	}{
		// docs/sandboxes.md, States: starting → running ⇄ paused.
		{"running ⇄ paused", OpPause, StateRunning, StatePaused},
		{"running ⇄ paused", OpResume, StatePaused, StateRunning},
		{"only a running sandbox pauses", OpPause, StatePaused, refused},
		{"only a running sandbox pauses", OpPause, StateStopped, refused},
		{"only a running sandbox pauses", OpPause, StateStarting, refused},
		{"only a paused sandbox resumes", OpResume, StateRunning, refused},
		{"only a paused sandbox resumes", OpResume, StateStopped, refused},
		{"starting → running", OpReady, StateStarting, StateRunning},
		{"a late boot does not revive a deleted sandbox", OpReady, StateDeleting, refused},
		{"a late boot does not revive a deleted sandbox", OpReady, StateDestroyed, refused},
		// docs/sandboxes.md, States: running, paused → stopping → stopped →
		// starting; The lifecycle: a stop keeps memory and disk.
		{"running → stopping", OpStop, StateRunning, StateStopping},
		{"a paused sandbox stops too", OpStop, StatePaused, StateStopping},
		{"stopping → stopped", OpStopped, StateStopping, StateStopped},
		{"a failed suspend leaves the guest running", OpStopFailed, StateStopping, StateRunning},
		{"stopped → starting", OpStart, StateStopped, StateStarting},
		{"a failed start changes nothing of the stopped sandbox", OpStartFailed, StateStarting, StateStopped},
		{"stop twice is refused", OpStop, StateStopped, refused},
		{"stop while starting is refused", OpStop, StateStarting, refused},
		{"start needs stopped", OpStart, StateRunning, refused},
		{"start needs stopped", OpStart, StatePaused, refused},
		{"an error is not started; delete it", OpStart, StateError, refused},
		// docs/sandboxes.md, Errors on sandboxes: work that fails leaves the
		// sandbox in error, with error_code and error_message.
		{"a boot that fails is error", OpBootFailed, StateStarting, StateError},
		{"a delete wins over a late failure", OpBootFailed, StateDeleting, refused},
		{"an interrupted boot is error", OpInterrupted, StateStarting, StateError},
		{"a lost VM is error", OpVMLost, StateRunning, StateError},
		{"a lost VM is error", OpVMLost, StateStopped, StateError},
		{"a destroyed sandbox stays destroyed", OpVMLost, StateDestroyed, refused},
		{"a silent agent is error", OpAgentSilent, StatePaused, StateError},
		{"the VM watcher acts on running sandboxes", OpVMExited, StateRunning, StateError},
		{"the VM watcher leaves operations in flight alone", OpVMExited, StateStopping, refused},
		// Issue 17: a lost node's sandboxes are error (billing stops), a
		// stopped one has no VM to lose; nothing is deleted.
		{"a lost node's running sandbox is error", OpNodeLost, StateRunning, StateError},
		{"a lost node's paused sandbox is error", OpNodeLost, StatePaused, StateError},
		{"a lost node's stopped sandbox stays stopped", OpNodeLost, StateStopped, refused},
		{"a lost node does not undo a delete", OpNodeLost, StateDeleting, refused},
		{"the node is back: its live VM runs again", RejoinOp(StateRunning), StateError, StateRunning},
		{"the node is back: a paused VM stays paused", RejoinOp(StatePaused), StateError, StatePaused},
		{"only an error rejoins", RejoinOp(StateRunning), StateRunning, refused},
		// docs/sandboxes.md, States: deleting ends in destroyed.
		{"delete from running", OpDelete, StateRunning, StateDeleting},
		{"delete from error", OpDelete, StateError, StateDeleting},
		{"delete from starting cancels the boot", OpDelete, StateStarting, StateDeleting},
		{"delete is idempotent while under way", OpDelete, StateDeleting, StateDeleting},
		{"a destroyed sandbox is history", OpDelete, StateDestroyed, refused},
		{"deleting ends in destroyed", OpDestroyed, StateDeleting, StateDestroyed},
		{"a failed delete is error, files kept", OpDeleteFailed, StateDeleting, StateError},
		// docs/clone.md, rule 3: a running parent pauses only for a moment; a
		// paused or stopped parent can be forked too.
		{"fork a running parent", OpClone, StateRunning, StateRunning},
		{"fork a paused parent", OpClone, StatePaused, StatePaused},
		{"fork a stopped parent", OpClone, StateStopped, StateStopped},
		{"no fork of a starting sandbox", OpClone, StateStarting, refused},
		{"no fork of an error", OpClone, StateError, refused},
		// docs/snapshots.md, rule 1: a running sandbox pauses only for a moment.
		{"snapshot a running sandbox", OpSnapshot, StateRunning, StateRunning},
		{"snapshot a stopped sandbox", OpSnapshot, StateStopped, StateStopped},
		{"no snapshot while stopping", OpSnapshot, StateStopping, refused},
		// docs/snapshots.md, rule 4: running → starting → running from the
		// snapshot; a stopped sandbox stays stopped.
		{"restore a running sandbox", OpRestore, StateRunning, StateStarting},
		{"restore a paused sandbox", OpRestore, StatePaused, StateStarting},
		{"restore a stopped sandbox in place", OpRestore, StateStopped, StateStopped},
		{"the in-place restore needs it still stopped", OpRewind, StateStarting, refused},
		{"restore of an error brings it back from the snapshot (its node lost, say)", OpRestore, StateError, StateStarting},
		// docs/sandboxes.md, States: the data plane reaches a running sandbox only.
		{"data plane on a running sandbox", OpAccess, StateRunning, StateRunning},
		{"no data plane on a paused sandbox", OpAccess, StatePaused, refused},
		// docs/sandboxes.md, The lifecycle: a deadline can be moved.
		{"timeout on a stopped sandbox", OpSetTimeout, StateStopped, StateStopped},
		{"no timeout on an error", OpSetTimeout, StateError, refused},
		{"no timeout while deleting", OpSetTimeout, StateDeleting, refused},
		{"no timeout once destroyed", OpSetTimeout, StateDestroyed, refused},
		// docs/network.md: the egress policy changes live.
		{"network change on a stopped sandbox", OpSetNetwork, StateStopped, StateStopped},
		{"no network change while deleting", OpSetNetwork, StateDeleting, refused},
		// Captures: a delete that arrived meanwhile wins.
		{"a stranded capture leaves the sandbox stopped", OpStranded, StateRunning, StateStopped},
		{"a stranded capture does not undo a delete", OpStranded, StateDeleting, refused},
		{"a lost capture is error", OpCaptureLost, StatePaused, StateError},
		// docs/sandboxes.md, Restarts: nothing is lost across a restart.
		{"a VM found running is running", OpReattached, StateStopping, StateRunning},
		{"a finished stop found after a restart", OpSettled, StateStopping, StateStopped},
	}
	for _, c := range cases {
		t.Run(string(c.op)+"/"+string(c.from)+"/"+c.rule, func(t *testing.T) {
			got, err := Next(c.from, c.op)
			if c.want == refused {
				var ref *Refusal
				if !errors.As(err, &ref) || ref.Op != c.op || ref.State != c.from {
					t.Fatalf("Next(%s, %s) = %s, %v; want a Refusal", c.from, c.op, got, err)
				}
				want := errdefs.ErrInvalidState
				if c.from == StateDestroyed && c.op == OpDelete {
					want = errdefs.ErrNotFound
				}
				if !errors.Is(err, want) {
					t.Fatalf("refusal %v is not %s", err, want.Code)
				}
				if Allows(c.from, c.op) {
					t.Fatal("Allows disagrees with Next")
				}
				return
			}
			if err != nil || got != c.want {
				t.Fatalf("Next(%s, %s) = %s, %v; want %s", c.from, c.op, got, err, c.want)
			}
		})
	}
}

// TestLifecycleTotal checks every operation answers for every state (a
// state or a refusal, never a panic) and leads only to states.
func TestLifecycleTotal(t *testing.T) {
	for op := range table {
		if len(Needs(op)) == 0 {
			t.Errorf("%s is allowed in no state", op)
		}
		for _, from := range States {
			got, err := Next(from, op)
			if err == nil && !got.Valid() {
				t.Errorf("Next(%s, %s) = %q, not a state", from, op, got)
			}
		}
	}
	for _, op := range ClientOps {
		if _, ok := table[op]; !ok {
			t.Errorf("client op %s has no row", op)
		}
	}
}

func TestRefusalMessage(t *testing.T) {
	cases := []struct {
		id   string
		from State
		op   Op
		want string
	}{
		{"sbx_1", StatePaused, OpAccess, "sandbox sbx_1 is paused; data-plane access needs it running"},
		{"", StateStarting, OpStop, "the sandbox is starting; stop needs it running or paused"},
		{"sbx_1", StateError, OpClone, "sandbox sbx_1 is error; a fork needs it running, paused or stopped"},
		{"sbx_1", StateDestroyed, OpStart, "sandbox sbx_1 is destroyed; start needs it stopped"},
		{"sbx_1", StateDestroyed, OpDelete, "sandbox sbx_1 is already destroyed"},
	}
	for _, c := range cases {
		_, err := NextFor(c.id, c.from, c.op)
		// The HTTP layer drops the closing ": <code>", as for every %w error.
		msg := err.Error()
		msg = msg[:strings.LastIndex(msg, ": ")]
		if msg != c.want {
			t.Errorf("got %q, want %q", msg, c.want)
		}
	}
}

func TestDescribe(t *testing.T) {
	cases := map[Op]string{
		OpDelete:  "Any sandbox not destroyed; it becomes deleting.",
		OpStop:    "Needs the sandbox running or paused; it becomes stopping.",
		OpClone:   "Needs the sandbox running, paused or stopped; its state does not change.",
		OpRestore: "Needs the sandbox running, paused, stopped or error; it becomes starting (stopped stays stopped).",
	}
	for op, want := range cases {
		if got := Describe(op); got != want {
			t.Errorf("Describe(%s) = %q, want %q", op, got, want)
		}
	}
}

func TestWaitOver(t *testing.T) {
	cases := []struct {
		cur, want State
		over      bool
	}{
		{StateStarting, "", false},
		{StateRunning, "", true},
		{StateStopping, StateStopped, false},
		{StateStopped, StateStopped, true},
		{StateStarting, StateStarting, true},
		{StateRunning, StateStopped, false}, // a stop may come
		{StateError, StateRunning, true},    // never will
		{StateDestroyed, StateRunning, true},
	}
	for _, c := range cases {
		if got := WaitOver(c.cur, c.want); got != c.over {
			t.Errorf("WaitOver(%s, %q) = %v, want %v", c.cur, c.want, got, c.over)
		}
	}
}

// docs/quotas.md: running slots; Billing: compute while running.
func TestStateSets(t *testing.T) {
	for _, s := range States {
		holds := false
		for _, x := range SlotStates {
			holds = holds || x == s
		}
		// A slot is held exactly while the sandbox may use compute without
		// a start: starting, running, paused.
		if want := s == StateStarting || s == StateRunning || s == StatePaused; holds != want {
			t.Errorf("%s holds a slot: %v, want %v", s, holds, want)
		}
		if s.Billed() != (s == StateRunning) {
			t.Errorf("%s billed: %v", s, s.Billed())
		}
		// Only a running guest surely has its identity; a starting one
		// (an interrupted boot, start, restore or fork) may not yet.
		if s.Configured() != (s == StateRunning) {
			t.Errorf("%s configured: %v", s, s.Configured())
		}
	}
	for _, s := range LiveStates {
		if s == StateDestroyed {
			t.Error("destroyed counted live")
		}
	}
	if len(LiveStates) != len(States)-1 {
		t.Errorf("LiveStates = %v", LiveStates)
	}
}

func TestRecover(t *testing.T) {
	cases := []struct {
		name  string
		st    State
		found Found
		want  Recovery
	}{
		{"a delete under way finishes", StateDeleting, Found{HasVM: true, Alive: true}, RecoverFinishDelete},
		{"a running VM is re-attached", StateRunning, Found{HasVM: true, Alive: true}, RecoverReattach},
		{"an interrupted boot with a VM finishes", StateStarting, Found{HasVM: true, Alive: true}, RecoverReattach},
		{"an interrupted stop that never captured runs on", StateStopping, Found{HasVM: true, Alive: true}, RecoverReattach},
		{"a paused VM stays paused", StatePaused, Found{HasVM: true, Alive: true}, RecoverKeepPaused},
		{"a stop whose image is unrecorded looks for it", StateStopping, Found{HasVM: true}, RecoverAdoptSuspend},
		{"…and without it the VM is lost", StateStopping, Found{HasVM: true, NoSuspendImage: true}, RecoverVMLost},
		{"…and without a VM nothing is known", StateStopping, Found{NoSuspendImage: true}, RecoverNothing},
		{"a completed stop is stopped", StateStopping, Found{ResumeImage: true}, RecoverBackToStopped},
		{"a start that never ran is stopped", StateStarting, Found{HasVM: true, ResumeImage: true}, RecoverBackToStopped},
		{"a dead VM is lost", StateRunning, Found{HasVM: true}, RecoverVMLost},
		{"a dead paused VM is lost", StatePaused, Found{HasVM: true}, RecoverVMLost},
		{"a boot without a VM is interrupted", StateStarting, Found{}, RecoverInterrupted},
		{"stopped is the truth", StateStopped, Found{ResumeImage: true}, RecoverNothing},
		{"error is kept", StateError, Found{HasVM: true}, RecoverNothing},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := Recover(c.st, c.found); got != c.want {
				t.Fatalf("Recover(%s, %+v) = %d, want %d", c.st, c.found, got, c.want)
			}
		})
	}
}
