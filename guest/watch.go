package guest

// Watching a directory: the guest reports changes below it as they happen
// (inotify), until the host closes the call.

// WatchEvent is one change in a watched directory.
type WatchEvent struct {
	// Name is the changed entry's path relative to the watched directory.
	Name string `json:"name"`
	Op   string `json:"op"` // one of the Watch* operations
	// Dir says the entry is a directory.
	Dir bool `json:"dir,omitempty"`
}

// The changes a watch reports.
const (
	WatchCreate = "create" // made, or moved in
	WatchWrite  = "write"  // its contents changed
	WatchRemove = "remove"
	WatchRename = "rename" // moved away (the new name, if watched, comes as a create)
	WatchChmod  = "chmod"  // its metadata changed
)

// MaxWatchDirs bounds the directories one recursive watch follows (each is
// an inotify watch in the guest kernel).
const MaxWatchDirs = 8192
