package e2b

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"path"
	"strings"
	"sync"

	"github.com/zeish/zeish/errdefs"
	"github.com/zeish/zeish/guest"
)

// Users. E2B's calls act as a user of the sandbox: the one named (the
// username query of /files, the Basic credentials of an RPC), else envd's
// default, E2B's `user`. zeish sandboxes act as that user when the
// template has the account (the debian template does) and as root when it
// has not (the busybox base template has only root). Homes and shells come
// from the guest's /etc/passwd; the agent switches to the user for
// processes and owns written files to it.

// defaultUser is E2B's default account.
const defaultUser = "user"

// maxPasswd bounds the /etc/passwd read from a guest.
const maxPasswd = 1 << 20

// account is a guest user a call acts as.
type account struct {
	name string
	home string
}

func (a account) root() bool { return a.name == "root" }

var rootAccount = account{name: "root", home: "/root"}

// defaultUsers remembers, per sandbox, who its default user is: whether the
// template has E2B's `user` does not change while the sandbox lives.
type defaultUsers struct {
	mu sync.Mutex
	m  map[string]account
}

// passwdReader reads the guest's /etc/passwd (guest.Client.ReadFile).
type passwdReader func(ctx context.Context, path string) (io.ReadCloser, guest.FileInfo, error)

// lookupAccount finds name in the guest's /etc/passwd.
func lookupAccount(ctx context.Context, read passwdReader, name string) (account, bool, error) {
	rc, _, err := read(ctx, "/etc/passwd")
	if errors.Is(err, errdefs.ErrFileNotFound) {
		return account{}, false, nil
	}
	if err != nil {
		return account{}, false, err
	}
	defer rc.Close()
	sc := bufio.NewScanner(io.LimitReader(rc, maxPasswd))
	for sc.Scan() {
		f := strings.Split(sc.Text(), ":")
		if len(f) >= 7 && f[0] == name {
			home := f[5]
			if home == "" || !path.IsAbs(home) {
				home = "/"
			}
			return account{name: name, home: path.Clean(home)}, true, nil
		}
	}
	return account{}, false, sc.Err()
}

// account resolves who a call of sandbox t acts as.
func (f *Facade) account(ctx context.Context, t target, name string) (account, error) {
	switch name {
	case "root":
		return rootAccount, nil
	case "":
		f.defaults.mu.Lock()
		a, ok := f.defaults.m[t.id]
		f.defaults.mu.Unlock()
		if ok {
			return a, nil
		}
		a, found, err := lookupAccount(ctx, t.agent.ReadFile, defaultUser)
		if err != nil {
			return account{}, err
		}
		if !found {
			a = rootAccount
		}
		f.defaults.mu.Lock()
		if f.defaults.m == nil {
			f.defaults.m = map[string]account{}
		}
		f.defaults.m[t.id] = a
		f.defaults.mu.Unlock()
		return a, nil
	}
	a, found, err := lookupAccount(ctx, t.agent.ReadFile, name)
	if err != nil {
		return account{}, err
	}
	if !found {
		// envd's words and class: an unknown user is an authentication
		// failure (401, the SDK's AuthenticationError).
		return account{}, fmt.Errorf("invalid username: '%s': the sandbox has no such account: %w", name, errdefs.ErrUnauthenticated)
	}
	return a, nil
}

// forget drops what is remembered of a sandbox.
func (d *defaultUsers) forget(id string) {
	d.mu.Lock()
	delete(d.m, id)
	d.mu.Unlock()
}

// asUser runs argv in the guest as a (for file operations that must leave
// the user owning what they make), failing with its stderr.
func asUser(ctx context.Context, agent *guest.Client, a account, what string, argv ...string) error {
	var stderr strings.Builder
	res, err := agent.Exec(ctx, guest.ExecRequest{Argv: argv, User: a.name, Cwd: "/"}, nil, nil, &stderr)
	if err != nil {
		return err
	}
	if res.ExitCode != 0 {
		msg := strings.TrimSpace(stderr.String())
		if strings.Contains(msg, "Permission denied") {
			return fmt.Errorf("%s as %s: %s: %w", what, a.name, msg, errdefs.ErrForbidden)
		}
		return fmt.Errorf("%s as %s: %s: %w", what, a.name, msg, errdefs.ErrInvalidArgument)
	}
	return nil
}

// ensureDir makes dir and its missing parents as a, unless it exists.
func ensureDir(ctx context.Context, agent *guest.Client, a account, dir string) error {
	if _, err := agent.Stat(ctx, dir); !errors.Is(err, errdefs.ErrFileNotFound) {
		return err
	}
	if a.root() {
		_, err := agent.Mkdir(ctx, dir, true)
		return err
	}
	return asUser(ctx, agent, a, "make "+dir, "mkdir", "-p", "--", dir)
}
