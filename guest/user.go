//go:build linux

package guest

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/zeish/zeish/errdefs"
)

// execUser is who an exec runs as.
type execUser struct {
	name     string
	uid, gid uint32
	groups   []uint32 // supplementary groups from /etc/group
	home     string
	shell    string // login shell from /etc/passwd; "" when unknown
}

// loginShell is the user's shell, or /bin/sh when that is a nologin
// placeholder or missing (nobody's /bin/false would end at once).
func (u execUser) loginShell() string {
	base := filepath.Base(u.shell)
	if u.shell == "" || base == "false" || base == "nologin" || checkExecutable(u.shell) != nil {
		return "/bin/sh"
	}
	return u.shell
}

// Where lookupUser reads accounts; tests point them elsewhere.
var (
	passwdFile = "/etc/passwd"
	groupFile  = "/etc/group"
)

// lookupUser resolves "name", "uid", "name:group" or "uid:gid" (as an image
// config's User) in the guest's /etc/passwd and /etc/group. "" is root. A
// numeric uid without a passwd entry is allowed (as in containers): it gets
// gid = uid unless given, and / as home.
func lookupUser(spec string) (execUser, error) {
	if spec == "" {
		spec = "root"
	}
	userPart, groupPart, hasGroup := strings.Cut(spec, ":")
	u := execUser{name: userPart, home: "/"}
	found := false
	forEachLine(passwdFile, func(f []string) bool {
		if len(f) < 7 || (f[0] != userPart && f[2] != userPart) {
			return true
		}
		uid, err1 := strconv.ParseUint(f[2], 10, 32)
		gid, err2 := strconv.ParseUint(f[3], 10, 32)
		if err1 != nil || err2 != nil {
			return true
		}
		u.name, u.uid, u.gid, u.home, u.shell, found = f[0], uint32(uid), uint32(gid), f[5], f[6], true
		return false
	})
	if !found {
		uid, err := strconv.ParseUint(userPart, 10, 32)
		if err != nil {
			if userPart == "root" {
				return execUser{name: "root", home: "/root"}, nil
			}
			return execUser{}, fmt.Errorf("exec: no user %q in the guest's /etc/passwd: %w", userPart, errdefs.ErrInvalidArgument)
		}
		u.uid, u.gid = uint32(uid), uint32(uid)
	}
	if hasGroup {
		gid, ok := lookupGroup(groupPart)
		if !ok {
			return execUser{}, fmt.Errorf("exec: no group %q in the guest's /etc/group: %w", groupPart, errdefs.ErrInvalidArgument)
		}
		u.gid = gid
	}
	forEachLine(groupFile, func(f []string) bool {
		if len(f) < 4 {
			return true
		}
		for _, m := range strings.Split(f[3], ",") {
			if m == u.name {
				if gid, err := strconv.ParseUint(f[2], 10, 32); err == nil {
					u.groups = append(u.groups, uint32(gid))
				}
			}
		}
		return true
	})
	return u, nil
}

func lookupGroup(spec string) (uint32, bool) {
	gid, found := uint32(0), false
	forEachLine(groupFile, func(f []string) bool {
		if len(f) >= 3 && (f[0] == spec || f[2] == spec) {
			if n, err := strconv.ParseUint(f[2], 10, 32); err == nil {
				gid, found = uint32(n), true
				return false
			}
		}
		return true
	})
	if !found {
		if n, err := strconv.ParseUint(spec, 10, 32); err == nil {
			return uint32(n), true
		}
	}
	return gid, found
}

// forEachLine calls fn with the colon-separated fields of each line until
// it returns false. A missing file has no lines.
func forEachLine(file string, fn func([]string) bool) {
	f, err := os.Open(file)
	if err != nil {
		return
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if line := sc.Text(); line != "" && !strings.HasPrefix(line, "#") && !fn(strings.Split(line, ":")) {
			return
		}
	}
}
