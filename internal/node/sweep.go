package node

import (
	"context"
	"os"
	"path/filepath"
	"strings"

	"github.com/zeish/zeish/errdefs"
	"github.com/zeish/zeish/internal/procscan"
)

// The QEMU driver names RAM files in ShmDir zeish-<sandbox id>-<hex>.mem
// (a VM's own) and zeish-img-<image id>.mem (an image's). A crash between
// launch and handle, or inside a capture, leaves such files behind: 2.9 GB
// were seen after a few crashes.

// imageRAMPath is where an image's RAM file lives.
func (n *Node) imageRAMPath(id string) string {
	return filepath.Join(n.opts.ShmDir, "zeish-img-"+id+".mem")
}

// sweepRAM removes RAM files of this node's sandboxes that nothing maps or
// will load: no live process names them, and no handle or image refers to
// them. Files of sandboxes this data dir does not know are another zeishd's
// and stay. Run at recovery, when no operation is in flight.
func (n *Node) sweepRAM(ctx context.Context) {
	entries, err := os.ReadDir(n.opts.ShmDir)
	if err != nil {
		return
	}
	inUse := map[string]bool{}
	for _, p := range procscan.All() {
		for _, a := range p.Args {
			if i := strings.Index(a, "mem-path="); i >= 0 {
				path, _, _ := strings.Cut(a[i+len("mem-path="):], ",")
				inUse[path] = true
			}
		}
	}
	for _, e := range entries {
		name := e.Name()
		rest, ok := strings.CutPrefix(name, "zeish-sbx_")
		if !ok || !strings.HasSuffix(name, ".mem") {
			continue
		}
		id, _, _ := strings.Cut(rest, "-")
		path := filepath.Join(n.opts.ShmDir, name)
		if inUse[path] {
			continue
		}
		r, err := n.opts.Store.GetSandbox(ctx, "sbx_"+id)
		if err != nil {
			if !errdefs.Is(err, errdefs.ClassNotFound) {
				n.log.Warn("sweep ram: read sandbox", "file", name, "err", err)
			}
			continue // not ours, or not known to be
		}
		if h, _ := r.VMHandle(); h != nil && (h.MemFile == path || (h.Spec.From != nil && h.Spec.From.MemFile == path)) {
			continue
		}
		var st os.FileInfo
		if st, err = os.Stat(path); err == nil {
			n.log.Warn("recover: removing orphaned RAM file", logSandbox, r.ID, "file", path, "mib", st.Size()>>20)
			os.Remove(path)
		}
	}
}

// removeRAMFiles removes every RAM file named for a sandbox whose VMs are
// all gone (it is being destroyed): one a VM made before zeishd died and
// before its handle was recorded has no handle to be found by.
func (n *Node) removeRAMFiles(id string) {
	files, _ := filepath.Glob(filepath.Join(n.opts.ShmDir, "zeish-"+id+"-*.mem"))
	for _, f := range files {
		n.log.Info("destroy: removing RAM file", logSandbox, id, "file", f)
		os.Remove(f)
	}
}
