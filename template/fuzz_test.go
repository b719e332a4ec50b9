package template

import (
	"archive/tar"
	"bytes"
	"io"
	"path"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// Fuzz layers are programs: each op is a type byte, a name made of 1–4
// components from fuzzComps, and a link target from fuzzTargets (some of
// them absolute paths of the test's own folders, outside the root).
var fuzzComps = []string{"a", "b", "etc", "..", ".", "", "x", "hostetc", "sentinel", ".wh..", ".wh...", ".wh.a",
	".wh.etc", ".wh..wh..opq", "d", "up", "lnk", "sub", "target", ".zeish"}

func fuzzTargets(outer string) []string {
	return []string{"/", "..", "../..", "../../..", "../../../..", "/etc", "a", "a/b", "/a/../..", "x/../../..",
		outer, outer + "/hostetc", outer + "/target", outer + "/sentinel", "../../../hostetc", "etc", "/proc/self/root",
		"lnk", "up/..", "/.zeish", outer + "/a/b", "sub/../../.."}
}

const (
	opReg = iota
	opDir
	opSymlink
	opHardlink
	opFifo
	opWhiteout
	opOpaque
	opNextLayer
	opKinds
)

// fuzzLayers turns a program into layers of tar entries.
func fuzzLayers(prog []byte, outer string) [][]tar.Header {
	targets := fuzzTargets(outer)
	layers := [][]tar.Header{nil}
	next := func() int {
		if len(prog) == 0 {
			return 0
		}
		b := prog[0]
		prog = prog[1:]
		return int(b)
	}
	for len(prog) > 0 {
		op := next() % opKinds
		parts := make([]string, next()%4+1)
		for i := range parts {
			parts[i] = fuzzComps[next()%len(fuzzComps)]
		}
		name := strings.Join(parts, "/")
		target := targets[next()%len(targets)]
		h := tar.Header{Name: name, Mode: 0o755, ModTime: time.Unix(1e9, 0), Typeflag: tar.TypeReg}
		switch op {
		case opDir:
			h.Typeflag = tar.TypeDir
		case opSymlink:
			h.Typeflag, h.Linkname = tar.TypeSymlink, target
		case opHardlink:
			h.Typeflag, h.Linkname = tar.TypeLink, target
		case opFifo:
			h.Typeflag = tar.TypeFifo
		case opWhiteout:
			h.Name = path.Join(path.Dir(name), ".wh."+path.Base(name))
		case opOpaque:
			h.Name = path.Join(name, ".wh..wh..opq")
		case opNextLayer:
			layers = append(layers, nil)
			continue
		}
		if h.Typeflag == tar.TypeReg {
			h.Size = 3
		}
		layers[len(layers)-1] = append(layers[len(layers)-1], h)
	}
	return layers
}

func tarOf(t testing.TB, hs []tar.Header) io.Reader {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, h := range hs {
		if tw.WriteHeader(&h) != nil {
			continue // a header archive/tar will not write (a file name ending in /)
		}
		if h.Typeflag == tar.TypeReg {
			io.WriteString(tw, strings.Repeat("x", int(h.Size)))
		}
	}
	tw.Close()
	return &buf
}

// op encodes one program step for seeds.
func op(kind int, target int, comps ...int) []byte {
	b := []byte{byte(kind), byte(len(comps) - 1)}
	for _, c := range comps {
		b = append(b, byte(c))
	}
	return append(b, byte(target))
}

func seedProgram(ops ...[]byte) []byte { return bytes.Join(ops, nil) }

// comp and target indexes, by name, for seeds.
func ci(name string) int {
	for i, c := range fuzzComps {
		if c == name {
			return i
		}
	}
	panic(name)
}

// FuzzUnpackContained: whatever layers an image holds (symlinks absolute
// and relative, to the host's folders too, hard links, whiteouts, opaque
// markers, "..", folders replaced by links in later layers), unpacking
// them, injecting the agent and setting folder times creates, changes or
// removes nothing outside the root: sentinel files around it and the tree
// outside it are the same afterwards.
func FuzzUnpackContained(f *testing.F) {
	const outerT, hostetcT, targetT, sentinelT = 10, 11, 12, 13
	for _, seed := range [][]byte{
		// etc -> <host>/hostetc, then the agent's /etc files.
		seedProgram(op(opSymlink, hostetcT, ci("etc"))),
		// a relative etc behind a symlinked parent.
		seedProgram(op(opSymlink, 0, ci("d"), ci("b"), ci("x")), op(opSymlink, 14, ci("d"), ci("b"), ci("x"), ci("etc"))),
		// ".wh..." at the top, and in a folder.
		seedProgram(op(opReg, 0, ci("a")), op(opNextLayer, 0, 0), op(opReg, 0, ci(".wh..."))),
		seedProgram(op(opReg, 0, ci("sub"), ci("a")), op(opNextLayer, 0, 0), op(opReg, 0, ci("sub"), ci(".wh.."))),
		// a folder replaced by a link to a host folder in a later layer.
		seedProgram(op(opDir, 0, ci("d")), op(opDir, 0, ci("d"), ci("sub")), op(opNextLayer, 0, 0), op(opSymlink, targetT, ci("d"))),
		// writes, links and whiteouts through an absolute link to the host.
		seedProgram(op(opSymlink, outerT, ci("up")), op(opReg, 0, ci("up"), ci("sentinel")),
			op(opHardlink, sentinelT, ci("up"), ci("x")), op(opWhiteout, 0, ci("up"), ci("sentinel")),
			op(opOpaque, 0, ci("up")), op(opFifo, 0, ci("up"), ci("b"))),
		seedProgram(op(opSymlink, 2, ci("a")), op(opSymlink, 4, ci("a"), ci("lnk")), op(opDir, 0, ci("a"), ci("lnk"), ci("x"))),
		seedProgram(op(opSymlink, 0, ci(".zeish"))),
		seedProgram(op(opDir, 0, ci("..")), op(opReg, 0, ci(".."), ci("x"))),
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, prog []byte) {
		if len(prog) > 512 {
			return
		}
		outer, root := sentinelTree(t)
		before := outsideTree(t, outer, root)
		u := newUnpacker(root, 64<<20)
		for _, layer := range fuzzLayers(prog, outer) {
			if err := u.apply(tarOf(t, layer)); err != nil {
				break
			}
		}
		u.finish()
		injectAgent(root, testInputs)
		if d := diffTrees(before, outsideTree(t, outer, root)); len(d) > 0 {
			t.Fatalf("outside the root:\n%s", strings.Join(d, "\n"))
		}
	})
}

// FuzzEntry: one tar entry of any name, type, mode, link and size, applied
// over a root that holds links to the host, changes nothing outside it,
// and fails (if it does) with an error rather than a panic.
func FuzzEntry(f *testing.F) {
	f.Add("etc/hostname", "", byte(tar.TypeReg), int64(0o644), []byte("x"))
	f.Add("up/sentinel", "", byte(tar.TypeReg), int64(0o4755), []byte("x"))
	f.Add("hostlink/.wh.sentinel", "", byte(tar.TypeReg), int64(0), []byte(nil))
	f.Add(".wh...", "", byte(tar.TypeReg), int64(0), []byte(nil))
	f.Add("hostlink/.wh..wh..opq", "", byte(tar.TypeReg), int64(0), []byte(nil))
	f.Add("h", "hostlink/sentinel", byte(tar.TypeLink), int64(0), []byte(nil))
	f.Add("etc", "../../../..", byte(tar.TypeSymlink), int64(0), []byte(nil))
	f.Add("deep/er/l", "../../../../../x", byte(tar.TypeSymlink), int64(0), []byte(nil))
	f.Add("./", "", byte(tar.TypeDir), int64(0o7777), []byte(nil))
	f.Add("hostlink/new/", "", byte(tar.TypeDir), int64(0o755), []byte(nil))
	f.Add("/../fifo", "", byte(tar.TypeFifo), int64(0o644), []byte(nil))
	f.Fuzz(func(t *testing.T, name, link string, typ byte, mode int64, body []byte) {
		if len(body) > 4096 {
			return
		}
		outer, root := sentinelTree(t)
		u := newUnpacker(root, 64<<20)
		base := []tar.Header{
			{Name: "hostlink", Typeflag: tar.TypeSymlink, Linkname: filepath.Join(outer, "a", "b"), Mode: 0o777},
			{Name: "up", Typeflag: tar.TypeSymlink, Linkname: "/", Mode: 0o777},
			{Name: "etc/", Typeflag: tar.TypeDir, Mode: 0o755},
			{Name: "deep/er/", Typeflag: tar.TypeDir, Mode: 0o755},
		}
		if err := u.apply(tarOf(t, base)); err != nil {
			t.Fatal(err)
		}
		before := outsideTree(t, outer, root)
		var buf bytes.Buffer
		tw := tar.NewWriter(&buf)
		h := &tar.Header{Name: name, Linkname: link, Typeflag: typ, Mode: mode & 0o7777, ModTime: time.Unix(1e9, 0)}
		if typ == tar.TypeReg || typ == tar.TypeRegA {
			h.Size = int64(len(body))
		}
		if tw.WriteHeader(h) != nil {
			return // not a header archive/tar writes
		}
		tw.Write(body)
		tw.Close()
		u.apply(&buf)
		u.finish()
		if d := diffTrees(before, outsideTree(t, outer, root)); len(d) > 0 {
			t.Fatalf("entry %q (%c -> %q) changed outside the root:\n%s", name, typ, link, strings.Join(d, "\n"))
		}
	})
}

// FuzzCheckSymlink: a link checkSymlink accepts, resolved lexically from
// where it is, stays inside the root.
func FuzzCheckSymlink(f *testing.F) {
	for _, s := range [][2]string{{"etc", "../x"}, {"a/b/c", "../../x"}, {"a/b/c", "../../../x"}, {"l", "/"},
		{"a/l", "./../../.."}, {"a/l", "b/../../x"}, {"x", ""}, {"a//b/l", "..//../.."}} {
		f.Add(s[0], s[1])
	}
	f.Fuzz(func(t *testing.T, name, target string) {
		rel, err := cleanName(name)
		if err != nil || rel == "" {
			return
		}
		if checkSymlink(rel, target) != nil || path.IsAbs(target) {
			return
		}
		// Ten folders above the root: a link that climbs shows as a
		// path outside it.
		base := "/r0/r1/r2/r3/r4/r5/r6/r7/r8/r9/root"
		deep := strings.Count(rel, "/") + strings.Count(target, "/") + 2
		if deep > 10 {
			base = strings.Repeat("/r", deep) + "/root"
		}
		if got := path.Join(base, path.Dir(rel), target); got != base && !strings.HasPrefix(got, base+"/") {
			t.Fatalf("checkSymlink(%q, %q) accepted a link that lands at %s, outside %s", rel, target, got, base)
		}
	})
}
