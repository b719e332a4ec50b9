package sandbox

// Recovery after a zeishd restart (docs/sandboxes.md, Restarts: nothing is
// lost; zeishd finds its VMs again or marks them clearly): what a
// node does with a sandbox, given its recorded state and what it finds of
// its VM. The node carries the action out and records the outcome with the
// Op the action names.

// Found is what a restarted node finds of a sandbox's VM.
type Found struct {
	HasVM       bool // a VM handle is recorded
	Alive       bool // that VM's process runs
	ResumeImage bool // a complete image to resume from is recorded (a stop finished)
	// NoSuspendImage: the node looked for an image an interrupted stop
	// wrote and found none (see RecoverAdoptSuspend).
	NoSuspendImage bool
}

// Recovery is what to do with one sandbox after a restart.
type Recovery int

const (
	// RecoverNothing: the record is the truth (stopped, error, destroyed).
	RecoverNothing Recovery = iota
	// RecoverFinishDelete: a delete was under way; finish it.
	RecoverFinishDelete
	// RecoverReattach: the VM runs; connect to its agent (OpReattached), or
	// mark the sandbox OpAgentSilent / OpVMLost when that fails.
	RecoverReattach
	// RecoverKeepPaused: a paused sandbox's VM is there; nothing to do.
	RecoverKeepPaused
	// RecoverAdoptSuspend: a stop was under way and no resume image is
	// recorded; if the stop's image is on disk, adopt it (OpSettled).
	// Otherwise ask again with Found.NoSuspendImage set.
	RecoverAdoptSuspend
	// RecoverBackToStopped: a stop completed, or a start never got its VM
	// going; the resume image stays (OpSettled).
	RecoverBackToStopped
	// RecoverVMLost: the VM is gone (OpVMLost); the disk is kept.
	RecoverVMLost
	// RecoverInterrupted: a boot never got a VM (OpInterrupted).
	RecoverInterrupted
)

// Recover decides what a restarted node does with a sandbox in state st.
func Recover(st State, f Found) Recovery {
	alive := f.HasVM && f.Alive
	switch {
	case st == StateDeleting:
		return RecoverFinishDelete
	case alive && Allows(st, OpReattached):
		// A VM that runs is the truth: an interrupted boot, start, restore
		// or fork finishes; an interrupted stop never captured it.
		return RecoverReattach
	case alive && st == StatePaused:
		return RecoverKeepPaused
	case !alive && !f.ResumeImage && st == StateStopping && !f.NoSuspendImage:
		return RecoverAdoptSuspend
	case !alive && f.ResumeImage && Allows(st, OpSettled):
		return RecoverBackToStopped
	case f.HasVM && !alive && Allows(st, OpVMLost) && st != StateStopped:
		return RecoverVMLost
	case !f.HasVM && st == StateStarting:
		return RecoverInterrupted
	}
	return RecoverNothing
}
