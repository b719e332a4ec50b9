package catalog

import "github.com/zeish/zeish/sandbox"

// HasGit reports whether sandboxes of t can clone a repository: git, and
// the account (sandbox.GitUser) that owns the clone, are known to be there
// only in the built-in debian template. An image's template may carry
// both, but nothing records it, so it is refused rather than failing after
// its boot.
func HasGit(t sandbox.Template) bool {
	return t.Builtin && t.Name == DebianName
}
