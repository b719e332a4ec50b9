package mcp

import (
	"context"
	"fmt"
	"time"

	sdkmcp "github.com/modelcontextprotocol/go-sdk/mcp"

	zeish "github.com/zeish/zeish/sdk/go"
)

const (
	// maxStreamBytes is how much of each of stdout and stderr exec returns:
	// more would flood the agent's context. The start and the end are kept,
	// the middle dropped, since errors tend to sit at either end.
	maxStreamBytes = 64 << 10
	// defaultExecTimeout stops a command an agent forgot about; an agent that
	// means a longer run says so.
	defaultExecTimeout = 10 * time.Minute
	maxExecTimeout     = time.Hour
	// execGrace is how long past the guest-side timeout the call itself may
	// take: the kill and the last output still have to arrive.
	execGrace = 30 * time.Second
)

type ExecInput struct {
	SandboxID      string            `json:"sandbox_id" jsonschema:"sandbox to run in (its id sbx_… or its name)"`
	Command        string            `json:"command,omitempty" jsonschema:"shell command line, run with sh -c (pipes, redirections and && work); give this or argv"`
	Argv           []string          `json:"argv,omitempty" jsonschema:"program and arguments, run without a shell; give this or command"`
	Cwd            string            `json:"cwd,omitempty" jsonschema:"working directory; default the template's (else the user's home)"`
	User           string            `json:"user,omitempty" jsonschema:"guest user to run as (name or uid); default the template's, else root"`
	Env            map[string]string `json:"env,omitempty" jsonschema:"extra environment variables for this command"`
	TimeoutSeconds float64           `json:"timeout_seconds,omitempty" jsonschema:"kill the command after this many seconds (timed_out is then true); default 600, at most 3600"`
	Stdin          string            `json:"stdin,omitempty" jsonschema:"text sent to the command's standard input"`
}

type ExecOutput struct {
	Stdout          string `json:"stdout" jsonschema:"standard output (UTF-8; invalid bytes replaced)"`
	Stderr          string `json:"stderr" jsonschema:"standard error (UTF-8; invalid bytes replaced)"`
	ExitCode        int    `json:"exit_code" jsonschema:"exit status; -1 when a signal ended the process"`
	Signal          string `json:"signal,omitempty" jsonschema:"the signal that ended the process, if any"`
	TimedOut        bool   `json:"timed_out" jsonschema:"true when timeout_seconds ran out and the command was killed"`
	DurationMS      int64  `json:"duration_ms" jsonschema:"how long the command ran, in milliseconds"`
	StdoutTruncated bool   `json:"stdout_truncated,omitempty" jsonschema:"stdout was longer than 64 KiB: only its start and end are returned, with a marker where bytes were dropped; redirect to a file and use read_file for all of it"`
	StderrTruncated bool   `json:"stderr_truncated,omitempty" jsonschema:"stderr was longer than 64 KiB: only its start and end are returned"`
}

func (t *tools) addExecTool(s *sdkmcp.Server) {
	add(s, &sdkmcp.Tool{
		Name:  "exec",
		Title: "Run a command in a sandbox",
		Description: "Run a command in a running sandbox and return its stdout, stderr and exit code once it ends. " +
			"Give either command (a shell line run with sh -c) or argv (no shell). A non-zero exit code is a normal " +
			"result, not a tool error. Each stream is capped at 64 KiB (start and end kept; *_truncated says so). " +
			"Commands run as root; the filesystem persists between calls, but each call is a fresh process " +
			"(use cwd and env rather than cd/export across calls).",
		Annotations: &sdkmcp.ToolAnnotations{DestructiveHint: ptr(true), OpenWorldHint: ptr(true)},
	}, t.exec)
}

func (t *tools) exec(ctx context.Context, in ExecInput) (ExecOutput, error) {
	var argv []string
	switch {
	case in.Command != "" && len(in.Argv) > 0:
		return ExecOutput{}, invalidArgf("give command or argv, not both")
	case in.Command != "":
		argv = []string{"sh", "-c", in.Command}
	case len(in.Argv) > 0:
		argv = in.Argv
	default:
		return ExecOutput{}, invalidArgf("give command (a shell line) or argv (a program and its arguments)")
	}
	timeout := defaultExecTimeout
	if in.TimeoutSeconds < 0 {
		return ExecOutput{}, invalidArgf("timeout_seconds must be positive, not %v", in.TimeoutSeconds)
	}
	if in.TimeoutSeconds > 0 {
		timeout = time.Duration(in.TimeoutSeconds * float64(time.Second))
	}
	if timeout > maxExecTimeout {
		return ExecOutput{}, invalidArgf("timeout_seconds must be at most %d", int(maxExecTimeout.Seconds()))
	}
	ctx, cancel := context.WithTimeout(ctx, timeout+execGrace)
	defer cancel()
	conn, err := t.client.Connect(ctx, in.SandboxID)
	if err != nil {
		return ExecOutput{}, err
	}
	req := zeish.ExecRequest{Argv: argv, Env: in.Env, Cwd: in.Cwd, User: in.User, TimeoutSeconds: timeout.Seconds()}
	if in.Stdin != "" {
		req.Stdin = []byte(in.Stdin)
	}
	stdout, stderr := newCappedBuffer(maxStreamBytes), newCappedBuffer(maxStreamBytes)
	res, err := conn.Exec(ctx, req, stdout, stderr)
	if err != nil {
		return ExecOutput{}, err
	}
	return ExecOutput{
		Stdout: stdout.String(), Stderr: stderr.String(),
		ExitCode: res.ExitCode, Signal: res.Signal, TimedOut: res.TimedOut, DurationMS: res.DurationMS,
		StdoutTruncated: stdout.Truncated(), StderrTruncated: stderr.Truncated(),
	}, nil
}

// cappedBuffer keeps the first and the last limit/2 bytes written to it and
// counts what it dropped between them.
type cappedBuffer struct {
	half    int
	head    []byte
	tail    []byte // the most recent bytes past head, at most 2*half before trimming
	dropped int64
}

func newCappedBuffer(limit int) *cappedBuffer { return &cappedBuffer{half: limit / 2} }

func (b *cappedBuffer) Write(p []byte) (int, error) {
	n := len(p)
	if room := b.half - len(b.head); room > 0 {
		take := min(room, len(p))
		b.head = append(b.head, p[:take]...)
		p = p[take:]
	}
	b.tail = append(b.tail, p...)
	// Trim only when tail has grown to twice its cap, so copying is amortised.
	if len(b.tail) > 2*b.half {
		cut := len(b.tail) - b.half
		b.dropped += int64(cut)
		b.tail = append(b.tail[:0], b.tail[cut:]...)
	}
	return n, nil
}

func (b *cappedBuffer) Truncated() bool { return b.dropped > 0 || len(b.tail) > b.half }

func (b *cappedBuffer) String() string {
	if !b.Truncated() {
		return string(b.head) + string(b.tail)
	}
	tail := b.tail[len(b.tail)-b.half:]
	dropped := b.dropped + int64(len(b.tail)-b.half)
	return fmt.Sprintf("%s\n[… %d bytes omitted …]\n%s", b.head, dropped, tail)
}
