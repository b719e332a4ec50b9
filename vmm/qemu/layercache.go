package qemu

import (
	"bytes"
	"encoding/json"
)

// Why disk layers are opened with drop-cache off: a live capture completes
// a migration, and QEMU hands a migrated VM's disks over to the destination
// by inactivating every node of their graph at the switch-over; the source's
// cont activates them again, inside its pause. For each qcow2 layer of the
// chain that means dropping the file's page cache (file-posix's drop-cache,
// meant for a destination on another host reading shared storage) and
// reading its header, L1 and refcount tables again, from disk now, one
// request at a time through QEMU's I/O threads. The chain grows by one layer
// per capture of a sandbox and of each of its ancestors, so the pause grew
// with fork depth. Measured here (QEMU trace of a capture of a VM with 7
// layers): 35 ms of a 45 ms pause went to that activation, one layer after
// the other. The source and every reader of a layer share this host's page
// cache, which is never stale, so dropping it only costs: new layers name
// their backing file with drop-cache off (a json: backing reference), and a
// live capture opens its next overlay the same way. Only the top overlay of
// a VM's launch command line still drops its cache.

// backingRef is how a new overlay names its backing layer at path.
func (d *Driver) backingRef(path string) string {
	if d.dropLayerCache {
		return path
	}
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(map[string]any{"file": fileNode(path, d.dropLayerCache)})
	return "json:" + string(bytes.TrimSpace(b.Bytes()))
}

// fileNode is the blockdev options of the file node under a layer at path.
func fileNode(path string, dropCache bool) map[string]any {
	return map[string]any{"driver": "file", "filename": path, "drop-cache": dropCache}
}
