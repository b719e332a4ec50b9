package ocisource

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"io"
	"path"
	"strings"
	"testing"

	"github.com/klauspost/compress/zstd"
)

func tarBytes(t testing.TB, entries ...tar.Header) []byte {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, h := range entries {
		body := strings.Repeat("z", int(h.Size))
		if h.Typeflag == tar.TypeReg && h.Size == 0 {
			body = h.Name // a body that names its entry
			h.Size = int64(len(body))
		}
		if err := tw.WriteHeader(&h); err != nil {
			t.Fatal(err)
		}
		io.WriteString(tw, body)
	}
	tw.Close()
	return buf.Bytes()
}

// FuzzIndexArchive (the successor of untarLayout: archives are read in
// place, not unpacked): whatever bytes an upload holds, indexing never
// panics, and every file it finds reads back exactly what a tar reader
// gives for the last entry of that name.
func FuzzIndexArchive(f *testing.F) {
	long := strings.Repeat("d/", 60) + "file"
	f.Add(tarBytes(f, tar.Header{Name: "index.json", Typeflag: tar.TypeReg}, tar.Header{Name: "blobs/sha256/" + strings.Repeat("a", 64), Typeflag: tar.TypeReg}))
	f.Add(tarBytes(f, tar.Header{Name: "manifest.json", Typeflag: tar.TypeReg}, tar.Header{Name: "x/layer.tar", Typeflag: tar.TypeSymlink, Linkname: "../y/layer.tar"},
		tar.Header{Name: "y/layer.tar", Typeflag: tar.TypeReg}, tar.Header{Name: "y/layer.tar", Typeflag: tar.TypeReg, Size: 700}))
	f.Add(tarBytes(f, tar.Header{Name: long, Typeflag: tar.TypeReg, Format: tar.FormatPAX, PAXRecords: map[string]string{"user.x": "y"}},
		tar.Header{Name: "./a/../b", Typeflag: tar.TypeReg}, tar.Header{Name: "/abs", Typeflag: tar.TypeReg}))
	f.Add(tarBytes(f, tar.Header{Name: "long", Typeflag: tar.TypeReg, Format: tar.FormatGNU, Size: 1025}, tar.Header{Name: "dir/", Typeflag: tar.TypeDir}))
	f.Add([]byte("this is not a tar"))
	f.Fuzz(func(t *testing.T, data []byte) {
		files, err := indexArchive(context.Background(), bytes.NewReader(data))
		if err != nil {
			return
		}
		want := map[string][]byte{}
		tr := tar.NewReader(bytes.NewReader(data))
		for {
			h, err := tr.Next()
			if err != nil {
				break
			}
			name := path.Clean(strings.TrimPrefix(h.Name, "/"))
			if h.Typeflag == tar.TypeReg && !sparse(h) {
				b, err := io.ReadAll(tr)
				if err != nil {
					break
				}
				want[name] = b
			} else {
				delete(want, name)
			}
		}
		a := &archive{r: bytes.NewReader(data), files: files}
		for name, e := range files {
			if e.link != "" {
				continue
			}
			if e.off < 0 || e.size < 0 || e.off+e.size > int64(len(data)) {
				t.Fatalf("%s: section %d+%d outside the %d-byte archive", name, e.off, e.size, len(data))
			}
			rc, _, err := a.open(name)
			if err != nil {
				t.Fatal(err)
			}
			got, _ := io.ReadAll(rc)
			if w, ok := want[name]; ok && !bytes.Equal(got, w) {
				t.Fatalf("%s: read %q in place, %q through tar", name, got, w)
			}
		}
	})
}

// FuzzDecompress: any bytes decompress or fail without a panic, and what
// was compressed with gzip or zstd, or not at all, comes back as it was.
func FuzzDecompress(f *testing.F) {
	for _, s := range []string{"", "plain", "\x1f\x8b", "\x28\xb5\x2f\xfd", "\x1f\x8b\x08\x00\x00\x00\x00\x00"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		if rc, err := decompress(bytes.NewReader(data)); err == nil {
			io.Copy(io.Discard, io.LimitReader(rc, 16<<20))
			rc.Close()
		}
		var gz bytes.Buffer
		w := gzip.NewWriter(&gz)
		w.Write(data)
		w.Close()
		enc, _ := zstd.NewWriter(nil)
		zs := enc.EncodeAll(data, nil)
		enc.Close()
		forms := [][]byte{gz.Bytes(), zs}
		if !bytes.HasPrefix(data, []byte{0x1f, 0x8b}) && !bytes.HasPrefix(data, []byte{0x28, 0xb5, 0x2f, 0xfd}) {
			forms = append(forms, data)
		}
		for i, c := range forms {
			rc, err := decompress(bytes.NewReader(c))
			if err != nil {
				t.Fatalf("form %d: %v", i, err)
			}
			got, err := io.ReadAll(rc)
			rc.Close()
			if err != nil || !bytes.Equal(got, data) {
				t.Fatalf("form %d: %q, %v; want %q", i, got, err, data)
			}
		}
	})
}

// FuzzParseManifest: any document decodes or fails as ErrBadImage-wrapped
// words, never a panic, and never with lists past their caps.
func FuzzParseManifest(f *testing.F) {
	for _, s := range []string{
		`{"schemaVersion":2,"mediaType":"application/vnd.oci.image.index.v1+json","manifests":[{"mediaType":"application/vnd.oci.image.manifest.v1+json","digest":"sha256:` + strings.Repeat("a", 64) + `","size":7,"platform":{"os":"linux","architecture":"amd64"}}]}`,
		`{"schemaVersion":2,"config":{"digest":"sha256:x","size":1},"layers":[{},{}],"annotations":{"a":[1,{"b":null}]}}`,
		`{"manifests":null}`, `[]`, `{"layers":{}}`, `{} {}`, `{"layers":[` + strings.Repeat(`{},`, 1000) + `{}]}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		m, err := parseManifest(raw)
		if err != nil {
			return
		}
		if len(m.Layers) > MaxLayers || len(m.Manifests) > MaxIndexEntries {
			t.Fatalf("%d layers, %d manifests: past the caps", len(m.Layers), len(m.Manifests))
		}
		m.isManifest()
	})
}
