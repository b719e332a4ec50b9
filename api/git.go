package api

// GitStatus is GET /public/sandboxes/{id}/git: the sandbox's clone as git
// sees it now.
type GitStatus struct {
	Repo     string `json:"repo"`
	Path     string `json:"path"`
	Branch   string `json:"branch"`   // "" when HEAD is detached
	Head     string `json:"head"`     // the commit HEAD names; "" before the first commit
	Detached bool   `json:"detached"` // HEAD is not on a branch
	// Dirty lists the files that differ from HEAD (changed, staged, new
	// or in conflict), at most MaxGitDirty of them.
	Dirty     []GitFile `json:"dirty"`
	Truncated bool      `json:"truncated,omitempty"` // more than MaxGitDirty were dirty
}

// GitFile is one dirty file: its path in the repository and git's two
// status letters (index, work tree), as git status --short shows them:
// " M" changed, "M " staged, "??" new and untracked, "UU" in conflict.
type GitFile struct {
	Path   string `json:"path"`
	Status string `json:"status"`
}

// MaxGitDirty bounds GitStatus.Dirty.
const MaxGitDirty = 1000
