package qemu

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/zeish/zeish/errdefs"
	"github.com/zeish/zeish/internal/sparsecopy"
	"github.com/zeish/zeish/vmm"
)

// Merged layers. Every capture freezes the overlay a VM writes and puts a
// new one on top, so a sandbox forked again and again, or a child of a
// child, stands on a chain that grows by a layer each time. At the
// switch-over of the next capture QEMU inactivates every layer of the chain
// and reactivates (reopens) each at cont, ~1–2 ms per layer inside the
// guest's pause. The node keeps chains short by merging the frozen layers
// into one (MergeLayers, in the background) and moving the running VM onto
// the merge (Rebase, a graph change with no pause).

// layerLinkPrefix names a merged layer's second name inside the VM's folder,
// from where the chrooted VMM opens it. It stays while the VM runs, as the
// next overlays do (nextDiskPrefix): QEMU may reopen a layer by name.
const layerLinkPrefix = "layer-"

// qcow2Magic starts every qcow2 file ("QFI\xfb").
const qcow2Magic = 0x514649fb

// DiskBacking reads the backing file name from a qcow2 header.
func (d *Driver) DiskBacking(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", fmt.Errorf("disk backing: %w", err)
	}
	defer f.Close()
	return qcow2Backing(f)
}

// qcow2Backing parses the backing file name out of a qcow2 header: the
// big-endian magic, version, then the name's offset (8 bytes) and length
// (4 bytes).
func qcow2Backing(r io.ReaderAt) (string, error) {
	var hdr [20]byte
	if _, err := r.ReadAt(hdr[:], 0); err != nil {
		return "", fmt.Errorf("qcow2 header: %w", err)
	}
	if binary.BigEndian.Uint32(hdr[0:4]) != qcow2Magic {
		return "", fmt.Errorf("qcow2 header: %w: not a qcow2 file", errdefs.ErrInvalidArgument)
	}
	off, size := binary.BigEndian.Uint64(hdr[8:16]), binary.BigEndian.Uint32(hdr[16:20])
	if off == 0 || size == 0 {
		return "", nil
	}
	if size > 1023 { // QEMU's own limit on a backing file name
		return "", fmt.Errorf("qcow2 header: %w: backing name of %d bytes", errdefs.ErrInvalidArgument, size)
	}
	name := make([]byte, size)
	if _, err := r.ReadAt(name, int64(off)); err != nil {
		return "", fmt.Errorf("qcow2 backing name: %w", err)
	}
	return string(name), nil
}

// MergeLayers copies top (sparse) and rebases the copy onto base, which
// makes qemu-img copy into it every cluster the layers between them hold.
func (d *Driver) MergeLayers(ctx context.Context, top, base, out string) error {
	if _, err := os.Lstat(out); err == nil {
		return fmt.Errorf("merge layers: %w: %s exists", errdefs.ErrInvalidState, out)
	}
	if !d.inChain(top, base) {
		return fmt.Errorf("merge layers: %w: %s is not under %s", errdefs.ErrInvalidArgument, base, top)
	}
	tmp := filepath.Join(filepath.Dir(out), ".merge-"+randomHex(4)+".qcow2")
	defer os.Remove(tmp)
	if err := copyFile(tmp, top); err != nil {
		return fmt.Errorf("merge layers: %w", err)
	}
	// -U: the layers are frozen but running VMs hold them open.
	out2, err := exec.CommandContext(ctx, d.qemuImgPath, "rebase", "-q", "-U", "-f", "qcow2",
		"-b", base, "-F", "qcow2", tmp).CombinedOutput()
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return fmt.Errorf("qemu-img rebase: %w: %s", err, tail(string(out2), 1024))
	}
	if err := syncFile(tmp); err != nil {
		return err
	}
	if err := d.confine.own(tmp); err != nil {
		return err
	}
	if err := os.Chmod(tmp, 0o400); err != nil {
		return err
	}
	return os.Rename(tmp, out)
}

// Relink changes the backing file name in path's header and nothing else
// (qemu-img rebase -u): backing is a copy of the layer the old name meant.
func (d *Driver) Relink(ctx context.Context, path, backing string) error {
	out, err := exec.CommandContext(ctx, d.qemuImgPath, "rebase", "-q", "-u", "-f", "qcow2",
		"-b", backing, "-F", "qcow2", path).CombinedOutput()
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return fmt.Errorf("qemu-img rebase -u: %w: %s", err, tail(string(out), 1024))
	}
	return nil
}

// inChain reports whether base is in top's backing chain.
func (d *Driver) inChain(top, base string) bool {
	for p, i := top, 0; p != "" && i < 1000; i++ {
		next, err := d.DiskBacking(p)
		if err != nil {
			return false
		}
		if next == base {
			return true
		}
		p = next
	}
	return false
}

// copyFile copies src into a new file dst, keeping src's holes.
func copyFile(dst, src string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	if _, err := sparsecopy.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

func syncFile(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	return f.Sync()
}

// protocolFile is the file a format node reads: QEMU names a node whose
// backing was attached at run time (blockdev-snapshot) by a "json:" of its
// options.
func protocolFile(name string) string {
	spec, ok := strings.CutPrefix(name, "json:")
	if !ok {
		return name
	}
	var opts struct {
		File struct {
			Filename string `json:"filename"`
		} `json:"file"`
	}
	if json.Unmarshal([]byte(spec), &opts) != nil {
		return name
	}
	return opts.File.Filename
}

// blockNode is the part of query-named-block-nodes' answer Rebase needs.
type blockNode struct {
	NodeName string `json:"node-name"`
	Driver   string `json:"drv"`
	File     string `json:"file"`
}

// Rebase opens layer in h's VMM over the node of its backing (which the VM
// has open: layer is a merge of the chain above it), makes it the backing
// of the overlay the guest writes, and records it in that overlay's header.
// The old layers close. The guest does not stop: the switch happens between
// two requests of the block layer.
func (d *Driver) Rebase(ctx context.Context, h *vmm.Handle, layer string) error {
	base, err := d.DiskBacking(layer)
	if err != nil {
		return err
	}
	if base == "" {
		return fmt.Errorf("rebase: %w: %s has no backing", errdefs.ErrInvalidArgument, layer)
	}
	link := filepath.Join(h.Spec.Dir, layerLinkPrefix+randomHex(4)+".qcow2")
	if err := os.Link(layer, link); err != nil {
		return fmt.Errorf("rebase: link layer: %w", err)
	}
	node := nextNodeName(link)
	switched := false
	err = d.withMonitor(ctx, h.QMPSocket, func(m *monitor) error {
		top, topFile, err := activeDisk(ctx, m)
		if err != nil {
			return err
		}
		var nodes []blockNode
		if err := m.execute(ctx, "query-named-block-nodes", map[string]any{"flat": true}, &nodes); err != nil {
			return err
		}
		baseNode, fileNode, topFile := "", "", protocolFile(topFile)
		for _, n := range nodes {
			switch {
			case n.Driver == "qcow2" && n.File == base:
				baseNode = n.NodeName
			case n.Driver == "file" && (n.NodeName == top+fileNodeSuffix || fileNode == "" && n.File == topFile):
				fileNode = n.NodeName
			}
		}
		if baseNode == "" || fileNode == "" {
			return fmt.Errorf("rebase: %w: the VM has no node for %s (base %q, overlay file %q)",
				errdefs.ErrInvalidState, base, baseNode, fileNode)
		}
		if err := m.execute(ctx, "blockdev-add", map[string]any{
			"driver": "qcow2", "node-name": node, "read-only": true, "backing": baseNode,
			"file": d.fileNode(map[string]any{"driver": "file", "node-name": node + fileNodeSuffix, "filename": d.guestPath(h, link),
				"read-only": true})}, nil); err != nil {
			return fmt.Errorf("open merged layer: %w", err)
		}
		// Every option the overlay was opened with, and the new backing.
		if err := m.execute(ctx, "blockdev-reopen", map[string]any{"options": []map[string]any{{
			"driver": "qcow2", "node-name": top, "file": fileNode, "backing": node}}}, nil); err != nil {
			_ = m.execute(context.WithoutCancel(ctx), "blockdev-del", map[string]any{"node-name": node}, nil)
			return fmt.Errorf("switch backing: %w", err)
		}
		switched = true
		// The header next: a VMM that opens this overlay later (a stop and
		// start, a child of its frozen layer) follows it. Should this fail,
		// the header names the old chain, which holds the same.
		if err := m.execute(ctx, "change-backing-file", map[string]any{
			"device": top, "image-node-name": top, "backing-file": layer}, nil); err != nil {
			return fmt.Errorf("record backing: %w", err)
		}
		return nil
	})
	if !switched {
		os.Remove(link) // the VMM holds it only once it is the backing
		return err
	}
	// The layers under the old backing are closed now, earlier merges
	// included: their names would only keep their files on disk.
	if olds, _ := filepath.Glob(filepath.Join(h.Spec.Dir, layerLinkPrefix+"*.qcow2")); len(olds) > 0 {
		for _, p := range olds {
			if p != link {
				os.Remove(p)
			}
		}
	}
	return err
}
