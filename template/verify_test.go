package template_test

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/zeish/zeish/internal/testenv"
	"github.com/zeish/zeish/internal/testenv/ociimg"
	"github.com/zeish/zeish/internal/testskip"
	"github.com/zeish/zeish/template"
)

// blobs of an image, as a layout stores them.
type imageBlobs struct {
	manifest, config    []byte
	manifestD, configD  string
	layer               []byte
	layerD, layerDiffID string
}

func blobsOf(t *testing.T, img v1.Image) imageBlobs {
	t.Helper()
	var b imageBlobs
	var err error
	if b.manifest, err = img.RawManifest(); err != nil {
		t.Fatal(err)
	}
	if b.config, err = img.RawConfigFile(); err != nil {
		t.Fatal(err)
	}
	md, _ := img.Digest()
	cd, _ := img.ConfigName()
	b.manifestD, b.configD = md.String(), cd.String()
	layers, _ := img.Layers()
	ld, _ := layers[0].Digest()
	diff, _ := layers[0].DiffID()
	b.layerD, b.layerDiffID = ld.String(), diff.String()
	rc, _ := layers[0].Compressed()
	b.layer, _ = io.ReadAll(rc)
	rc.Close()
	return b
}

// putBlob stores content under digest d in a layout, whatever it hashes to.
func putBlob(t *testing.T, layout, d string, content []byte) {
	t.Helper()
	p := filepath.Join(layout, "blobs", "sha256", strings.TrimPrefix(d, "sha256:"))
	if err := os.WriteFile(p, content, 0o644); err != nil {
		t.Fatal(err)
	}
}

// markerImage is a one-layer image whose /marker and start command say who
// made it.
func markerImage(t *testing.T, who string) v1.Image {
	return ociimg.Image(t, v1.Config{Cmd: []string{"/bin/" + who}}, ociimg.Layer(t, ociimg.Entry{Name: "marker", Body: who + "\n"}))
}

// Every blob of an upload is checked against the digest that names it:
// a tenant who stores a public image's real manifest with its own config
// or layers under that manifest's digests gets a failed build, not a
// template filed under the real image (issue 27, high 1). Each case fails
// on a build that trusted a layout's file names.
func TestBlobsAreCheckedAgainstTheirDigests(t *testing.T) {
	testskip.Short(t, "runs mkfs.ext4")
	testenv.RequireQEMU(t)
	real, evil := markerImage(t, "real"), markerImage(t, "evil")
	rb, eb := blobsOf(t, real), blobsOf(t, evil)
	cases := []struct {
		name   string
		tamper func(t *testing.T, layout string)
		want   string
	}{
		{"config and layer swapped under the real digests", func(t *testing.T, l string) {
			putBlob(t, l, rb.configD, eb.config)
			putBlob(t, l, rb.layerD, eb.layer)
		}, "config " + rb.configD + " does not match its digest"},
		{"layer swapped under its real digest", func(t *testing.T, l string) {
			putBlob(t, l, rb.layerD, eb.layer)
		}, "layer " + rb.layerD},
		{"manifest swapped under its real digest", func(t *testing.T, l string) {
			putBlob(t, l, rb.manifestD, eb.manifest)
			putBlob(t, l, eb.configD, eb.config)
			putBlob(t, l, eb.layerD, eb.layer)
		}, "manifest " + rb.manifestD + " does not match its digest"},
		{"layer whose tar is not the config's diff_id", func(t *testing.T, l string) {
			// A manifest of its own (so every blob matches its name) with
			// the real config over the evil layer: only the config's
			// diff_ids bind them.
			var m map[string]any
			json.Unmarshal(rb.manifest, &m)
			m["layers"].([]any)[0].(map[string]any)["digest"] = eb.layerD
			m["layers"].([]any)[0].(map[string]any)["size"] = len(eb.layer)
			raw, _ := json.Marshal(m)
			putBlob(t, l, digest(raw), raw)
			putBlob(t, l, eb.layerD, eb.layer)
			idx, _ := os.ReadFile(filepath.Join(l, "index.json"))
			idx = bytes.ReplaceAll(idx, []byte(rb.manifestD), []byte(digest(raw)))
			idx = bytes.ReplaceAll(idx, []byte(`"size":`+itoa(len(rb.manifest))), []byte(`"size":`+itoa(len(raw))))
			os.WriteFile(filepath.Join(l, "index.json"), idx, 0o644)
		}, ""},
	}
	for _, c := range cases {
		for _, transport := range []string{"oci", "oci-archive"} {
			t.Run(c.name+"/"+transport, func(t *testing.T) {
				layout := ociimg.WriteLayout(t, real, t.TempDir())
				c.tamper(t, layout)
				ref := layout
				if transport == "oci-archive" {
					ref = ociimg.TarFolder(t, layout, filepath.Join(t.TempDir(), "archive.tar"))
				}
				cache := t.TempDir()
				a, err := template.BuildOCI(context.Background(), template.OCIOptions{
					Base: template.BaseOptions{CacheDir: cache, SandboxdPath: agentCopy(t)}, DiskMiB: 64,
					Source: template.Source{Transport: transport, Ref: ref}})
				if c.want == "" {
					// The diff_id case: the real config over the evil layer.
					if err == nil || !errors.Is(err, template.ErrBadImage) || !strings.Contains(err.Error(), "diff_id") {
						t.Fatalf("build: %v (%+v), want a diff_id mismatch", err, a)
					}
				} else if err == nil || !errors.Is(err, template.ErrBadImage) || !strings.Contains(err.Error(), c.want) {
					t.Fatalf("build: %v (%+v), want ErrBadImage with %q", err, a, c.want)
				}
				entries, _ := os.ReadDir(cache)
				for _, e := range entries {
					if !strings.HasPrefix(e.Name(), ".lock") {
						t.Errorf("a failed build left %s in the cache", e.Name())
					}
				}
			})
		}
	}
	// A docker archive has no manifest: its layers are bound to its config
	// by diff_id.
	t.Run("docker archive layer not its diff_id", func(t *testing.T) {
		dir := t.TempDir()
		archive := ociimg.WriteDockerArchive(t, real, dir)
		swapped := filepath.Join(dir, "swapped.tar")
		rewriteTar(t, archive, swapped, func(name string, body []byte) []byte {
			if strings.HasSuffix(name, ".tar.gz") || strings.HasSuffix(name, "layer.tar") {
				return eb.layer
			}
			return body
		})
		_, err := template.BuildOCI(context.Background(), template.OCIOptions{
			Base: template.BaseOptions{CacheDir: t.TempDir(), SandboxdPath: agentCopy(t)}, DiskMiB: 64,
			Source: template.Source{Transport: "docker-archive", Ref: swapped}})
		if err == nil || !errors.Is(err, template.ErrBadImage) || !strings.Contains(err.Error(), "diff_id") {
			t.Fatalf("build: %v, want a diff_id mismatch", err)
		}
	})
}

// rewriteTar copies the tar in to out, each file's body through edit.
func rewriteTar(t *testing.T, in, out string, edit func(name string, body []byte) []byte) {
	t.Helper()
	src, err := os.Open(in)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	dst, err := os.Create(out)
	if err != nil {
		t.Fatal(err)
	}
	defer dst.Close()
	tr, tw := tar.NewReader(src), tar.NewWriter(dst)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(tr)
		body = edit(h.Name, body)
		h.Size = int64(len(body))
		tw.WriteHeader(h)
		tw.Write(body)
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
}

// Metadata is read within caps: an index, a manifest or a config larger
// than its cap fails the build with a clear error instead of being read
// whole (a 6 MB index.json took 907 MiB of heap), from a registry too.
func TestImageMetadataIsCapped(t *testing.T) {
	testskip.Short(t, "runs mkfs.ext4")
	testenv.RequireQEMU(t)
	img := markerImage(t, "real")
	bigEnv := make([]string, 0, 80000)
	for i := 0; i < 80000; i++ {
		bigEnv = append(bigEnv, "PADDING_VARIABLE_NUMBER_XXXXXXXXXXXXXXXXXXXXX="+itoa(i))
	}
	bigConfig := ociimg.Image(t, v1.Config{Env: bigEnv}, ociimg.Layer(t, ociimg.Entry{Name: "marker", Body: "x"}))
	// 1001 layers: the real manifest with its layer listed over and over
	// (the cap is on the list, before any layer is read).
	manyLayers := func(t *testing.T) string {
		l := ociimg.WriteLayout(t, img, t.TempDir())
		b := blobsOf(t, img)
		var m map[string]any
		json.Unmarshal(b.manifest, &m)
		layer := m["layers"].([]any)[0]
		many := make([]any, 1001)
		for i := range many {
			many[i] = layer
		}
		m["layers"] = many
		raw, _ := json.Marshal(m)
		putBlob(t, l, digest(raw), raw)
		idx, _ := os.ReadFile(filepath.Join(l, "index.json"))
		idx = bytes.ReplaceAll(idx, []byte(b.manifestD), []byte(digest(raw)))
		idx = bytes.ReplaceAll(idx, []byte(`"size":`+itoa(len(b.manifest))), []byte(`"size":`+itoa(len(raw))))
		os.WriteFile(filepath.Join(l, "index.json"), idx, 0o644)
		return l
	}
	bigIndex := func(t *testing.T) string {
		l := ociimg.WriteLayout(t, img, t.TempDir())
		idx, _ := os.ReadFile(filepath.Join(l, "index.json"))
		// 6 MB of whitespace keeps it valid JSON: only its size is wrong.
		idx = append(idx[:len(idx)-1], append(bytes.Repeat([]byte(" "), 6<<20), '}')...)
		os.WriteFile(filepath.Join(l, "index.json"), idx, 0o644)
		return l
	}
	host := ociimg.Registry(t, "", "")
	cases := []struct {
		name string
		src  func(t *testing.T) template.Source
		want string
	}{
		{"index.json", func(t *testing.T) template.Source { return template.Source{Transport: "oci", Ref: bigIndex(t)} }, "index.json is"},
		{"index.json in an archive", func(t *testing.T) template.Source {
			return template.Source{Transport: "oci-archive", Ref: ociimg.TarFolder(t, bigIndex(t), filepath.Join(t.TempDir(), "archive.tar"))}
		}, "index.json is"},
		{"config", func(t *testing.T) template.Source {
			return template.Source{Transport: "oci", Ref: ociimg.WriteLayout(t, bigConfig, t.TempDir())}
		}, "cap"},
		{"docker archive config", func(t *testing.T) template.Source {
			return template.Source{Transport: "docker-archive", Ref: ociimg.WriteDockerArchive(t, bigConfig, t.TempDir())}
		}, "cap"},
		{"layers", func(t *testing.T) template.Source {
			return template.Source{Transport: "oci", Ref: manyLayers(t)}
		}, "more than 1000 layers"},
		{"registry config", func(t *testing.T) template.Source {
			return template.Source{Transport: "registry", Ref: ociimg.Push(t, bigConfig, host, "big/config", "", "")}
		}, "cap"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := template.BuildOCI(context.Background(), template.OCIOptions{
				Base: template.BaseOptions{CacheDir: t.TempDir(), SandboxdPath: agentCopy(t)}, DiskMiB: 64,
				Source: c.src(t), RegistryGuard: loopbackGuard(t)})
			if err == nil || !errors.Is(err, template.ErrBadImage) || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("build: %v, want ErrBadImage with %q", err, c.want)
			}
		})
	}
	// A registry manifest past the cap is cut as it arrives.
	t.Run("registry manifest", func(t *testing.T) {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if strings.Contains(r.URL.Path, "/manifests/") {
				w.Header().Set("Content-Type", "application/vnd.oci.image.manifest.v1+json")
				w.Write([]byte(`{"schemaVersion":2,"layers":[]` + strings.Repeat(" ", 6<<20) + `}`))
				return
			}
			w.WriteHeader(http.StatusOK) // /v2/
		}))
		defer srv.Close()
		_, err := template.BuildOCI(context.Background(), template.OCIOptions{
			Base: template.BaseOptions{CacheDir: t.TempDir(), SandboxdPath: agentCopy(t)}, DiskMiB: 64,
			Source: template.Source{Transport: "registry", Ref: strings.TrimPrefix(srv.URL, "http://") + "/big/manifest:latest"}, RegistryGuard: loopbackGuard(t)})
		if err == nil || !strings.Contains(err.Error(), "cap") {
			t.Fatalf("build: %v, want the manifest cap", err)
		}
	})
}

func digest(b []byte) string { return v1.Hash{Algorithm: "sha256", Hex: sha256hex(b)}.String() }

func sha256hex(b []byte) string {
	h, _, _ := v1.SHA256(bytes.NewReader(b))
	return h.Hex
}

func itoa(i int) string { return strconv.Itoa(i) }
