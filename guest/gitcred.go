package guest

import (
	"bufio"
	"io"
	"net"
	"strings"
	"time"
)

// git asks for credentials through a credential helper (gitcredentials(7)):
// it runs "HELPER get" with key=value lines on stdin and reads the same
// from stdout. zeish's helper is sandboxd itself, configured in the clone as
//
//	credential.helper = /.zeish/sandboxd git-credential
//
// It forwards git's request over GitCredentialSocket to the agent, which
// holds the token in memory (Config.Git) and answers only the clone's user
// and only for the repository's host. So the token is never in a file of
// the guest, in git's config, or in an argv.

// GitCredentialSocket is where the agent answers credential requests.
const GitCredentialSocket = "/run/zeish/git-credential.sock"

// credentialSocket is GitCredentialSocket unless a test moves it.
var credentialSocket = GitCredentialSocket

// GitHelperCommand is the credential.helper value that reaches the agent.
const GitHelperCommand = "/.zeish/sandboxd git-credential"

// maxCredentialRequest bounds what either side reads.
const maxCredentialRequest = 64 << 10

// parseCredential reads git's key=value lines up to a blank line or EOF.
func parseCredential(r io.Reader) map[string]string {
	out := map[string]string{}
	sc := bufio.NewScanner(io.LimitReader(r, maxCredentialRequest))
	for sc.Scan() {
		line := sc.Text()
		if line == "" {
			break
		}
		if k, v, ok := strings.Cut(line, "="); ok {
			out[k] = v
		}
	}
	return out
}

// answerCredential is the reply to request req under auth: the user name
// and password when req is for auth's protocol and host, else nothing (git
// then tries its next helper or fails).
func answerCredential(auth *GitAuth, req map[string]string) string {
	if auth == nil || req["protocol"] != auth.Protocol || !strings.EqualFold(req["host"], auth.Host) {
		return ""
	}
	if strings.ContainsAny(auth.Username+auth.Password, "\n\x00") {
		return ""
	}
	return "username=" + auth.Username + "\npassword=" + auth.Password + "\n"
}

// RunGitCredential is "sandboxd git-credential ACTION": the helper side.
// Only get is answered; store and erase have nothing to do (the agent's
// credential is the host's to change). It always exits 0: a helper that
// has no answer says nothing.
func RunGitCredential(args []string, stdin io.Reader, stdout io.Writer) int {
	if len(args) != 1 || args[0] != "get" {
		io.Copy(io.Discard, stdin)
		return 0
	}
	req := parseCredential(stdin)
	conn, err := net.DialTimeout("unix", credentialSocket, 5*time.Second)
	if err != nil {
		return 0
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(10 * time.Second))
	var b strings.Builder
	for k, v := range req {
		if strings.ContainsAny(k+v, "\n\x00") {
			continue
		}
		b.WriteString(k + "=" + v + "\n")
	}
	b.WriteString("\n")
	if _, err := io.WriteString(conn, b.String()); err != nil {
		return 0
	}
	io.Copy(stdout, io.LimitReader(conn, maxCredentialRequest))
	return 0
}
