package sandbox

import (
	"strings"
	"unicode"
	"unicode/utf8"
)

// The codes a sandbox in state error carries in error_code. They are part
// of the API: never rename one.
const (
	// ErrBootFailed: the VM did not come up (QEMU refused to start it, or
	// the guest died before its agent answered); the message holds QEMU's
	// words or the last lines of the guest console.
	ErrBootFailed = "boot_failed"
	// ErrBootTimeout: the guest agent did not answer within the boot bound.
	ErrBootTimeout = "boot_timeout"
	// ErrTemplateUnavailable: the template could not be built or found.
	ErrTemplateUnavailable = "template_unavailable"
	// ErrVMExited: the sandbox's VM ended while zeish did not stop it.
	ErrVMExited = "vm_exited"
	// ErrAgentSilent: the VM runs but its guest agent stopped answering (found
	// so after a zeishd restart); the VM is kept, paused, until deleted.
	ErrAgentSilent = "agent_silent"
	// ErrInterrupted: zeishd stopped while the sandbox was starting.
	ErrInterrupted = "interrupted"
	// ErrCaptureFailed: a fork, snapshot or stop lost the VM mid-way.
	ErrCaptureFailed = "capture_failed"
	// ErrRestoreFailed: a snapshot restore or a start could not bring the VM back.
	ErrRestoreFailed = "restore_failed"
	// ErrDeleteFailed: a delete could not remove the VM or its files.
	ErrDeleteFailed = "delete_failed"
	// ErrNodeLost: the sandbox's node stopped answering (no heartbeat for
	// ZEISH_NODE_LOST_AFTER); billing stopped. Nothing was deleted: when the
	// node comes back with the VM still running, the sandbox is usable again.
	ErrNodeLost = "node_lost"
	// ErrInternal: anything else; the message says what.
	ErrInternal = "internal"
)

// ErrorCodes lists every error_code, for the API document and its test.
var ErrorCodes = []string{ErrBootFailed, ErrBootTimeout, ErrTemplateUnavailable, ErrVMExited, ErrAgentSilent, ErrInterrupted,
	ErrCaptureFailed, ErrRestoreFailed, ErrDeleteFailed, ErrNodeLost, ErrInternal, ErrGitCloneFailed}

// maxErrorMessage bounds error_message: console text is the guest's.
const maxErrorMessage = 4096

// CleanMessage makes text that a guest may control (its console, its agent's
// words) safe to store and show: control characters and escape sequences
// out (newlines and tabs kept), invalid UTF-8 replaced, at most 4 KiB kept
// (the end, where a boot failure's cause is).
func CleanMessage(s string) string {
	var b strings.Builder
	for len(s) > 0 {
		r, size := utf8.DecodeRuneInString(s)
		s = s[size:]
		switch {
		case r == utf8.RuneError && size == 1:
			b.WriteRune('\uFFFD')
		case r == '\x1b':
			// Drop a CSI sequence (ESC [ … final byte) whole.
			if len(s) > 0 && s[0] == '[' {
				i := 1
				for i < len(s) && (s[i] < 0x40 || s[i] > 0x7e) {
					i++
				}
				s = s[min(i+1, len(s)):]
			}
		case r == '\n' || r == '\t':
			b.WriteRune(r)
		case r == '\r':
		case unicode.IsControl(r):
		default:
			b.WriteRune(r)
		}
	}
	out := strings.TrimSpace(b.String())
	if len(out) > maxErrorMessage {
		out = out[len(out)-maxErrorMessage:]
		// Start at a rune boundary.
		for len(out) > 0 && !utf8.RuneStart(out[0]) {
			out = out[1:]
		}
		out = "…" + out
	}
	return out
}
