package imagestore_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/zeish/zeish/internal/imagestore"
	"github.com/zeish/zeish/internal/imagestore/imagestoretest"
	"github.com/zeish/zeish/internal/testenv"
)

// The benchmarks measure what docs/images.md reports, against versitygw on
// loopback (and, for the first two, a folder): a fresh 256 MiB RAM image's
// upload, a re-fork's upload against its parent (bytes uploaded beside
// its private pages), and a fetch. Run them with
//   go test -run '^$' -bench . -benchtime 3x ./internal/imagestore/

const benchRAM = 256 << 20

// benchStores gives, for each backend to measure on, a maker of empty
// stores of that kind.
func benchStores(b *testing.B) map[string]func() string {
	srv := testenv.StartS3(b)
	bucket, creds := srv.NewBucket(b), srv.CredentialsFile(b, false)
	n := 0
	return map[string]func() string{
		"folder": func() string { return "file://" + b.TempDir() },
		"s3": func() string {
			n++
			return fmt.Sprintf("s3://%s/images%d?endpoint=%s&credentials=%s", bucket, n, srv.Endpoint, creds)
		},
	}
}

func benchStore(b *testing.B, url string, o imagestore.Options) *imagestore.Store {
	backend, err := imagestore.OpenBackend(context.Background(), url)
	if err != nil {
		b.Fatal(err)
	}
	return imagestore.New(backend, o)
}

// shmDir is a folder in /dev/shm, where guest RAM files live.
func shmDir(b *testing.B) string {
	dir, err := os.MkdirTemp("/dev/shm", "zeish-bench-")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

func BenchmarkUploadFresh(b *testing.B) {
	mem := filepath.Join(shmDir(b), "mem")
	data := imagestoretest.RAMFile(b, mem, benchRAM, 21)
	for name, fresh := range benchStores(b) {
		b.Run(name, func(b *testing.B) {
			b.SetBytes(benchRAM)
			var p imagestore.Progress
			for range b.N {
				b.StopTimer()
				s := benchStore(b, fresh(), imagestore.Options{}) // an empty store each time
				b.StartTimer()
				u := s.StartUpload(context.Background(), imagestore.UploadSpec{ID: "img_fresh", Files: []imagestore.SourceFile{{Name: "mem", Path: mem}}})
				if _, err := u.Wait(); err != nil {
					b.Fatal(err)
				}
				p = u.Progress()
			}
			b.ReportMetric(float64(data)/(1<<20), "data-MiB")
			b.ReportMetric(float64(p.Uploaded+p.Manifest)/(1<<20), "uploaded-MiB")
		})
	}
}

func BenchmarkUploadRefork(b *testing.B) {
	dir := shmDir(b)
	parent, child := filepath.Join(dir, "parent"), filepath.Join(dir, "child")
	imagestoretest.RAMFile(b, parent, benchRAM, 22)
	// 16 MiB of pages written at random (an idle child writes ~28 MiB;
	// capture by private pages takes up to 32).
	private := imagestoretest.ChildFile(b, parent, child, 4500, 23)
	for name, fresh := range benchStores(b) {
		b.Run(name, func(b *testing.B) {
			url := fresh()
			s := benchStore(b, url, imagestore.Options{})
			if _, err := s.Upload(context.Background(), imagestore.UploadSpec{ID: "img_parent", Files: []imagestore.SourceFile{{Name: "mem", Path: parent}}}); err != nil {
				b.Fatal(err)
			}
			var p imagestore.Progress
			b.ResetTimer()
			for i := range b.N {
				// A new id each time; from the second on, the child's chunks
				// are in the store already (as for a re-upload after a crash).
				id := fmt.Sprintf("img_child_%d", i)
				u := s.StartUpload(context.Background(), imagestore.UploadSpec{ID: id, Parent: "img_parent",
					Files: []imagestore.SourceFile{{Name: "mem", Path: child, ParentPath: parent}}})
				if _, err := u.Wait(); err != nil {
					b.Fatal(err)
				}
				if i == 0 {
					p = u.Progress()
				}
			}
			b.ReportMetric(float64(private)/(1<<20), "private-MiB")
			b.ReportMetric(float64(p.Uploaded+p.Manifest)/(1<<20), "uploaded-MiB")
			b.ReportMetric(float64(p.Manifest)/(1<<10), "manifest-KiB")
			b.ReportMetric(float64(p.Uploaded+p.Manifest)/float64(private), "uploaded/private")
		})
	}
}

func BenchmarkFetch(b *testing.B) {
	mem := filepath.Join(shmDir(b), "mem")
	imagestoretest.RAMFile(b, mem, benchRAM, 24)
	for name, fresh := range benchStores(b) {
		b.Run(name, func(b *testing.B) {
			s := benchStore(b, fresh(), imagestore.Options{})
			m, err := s.Upload(context.Background(), imagestore.UploadSpec{ID: "img_fetch", Files: []imagestore.SourceFile{{Name: "mem", Path: mem}}})
			if err != nil {
				b.Fatal(err)
			}
			out := filepath.Join(shmDir(b), "out")
			b.SetBytes(benchRAM)
			b.ResetTimer()
			for range b.N {
				if err := s.FetchFile(context.Background(), m, "mem", out); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			b.ReportMetric(float64(m.StoredBytes())/(1<<20)/b.Elapsed().Seconds()*float64(b.N), "stored-MiB/s")
		})
	}
}

// BenchmarkSweep measures one sweep of a store of 400 images in chains of
// four, half of the chains named by the records (their heads) and half by
// nothing: the sweep reads the records, the claims, the manifests' list
// and the kept chains' manifests, and deletes 200. Run it with
//
//	go test -run '^$' -bench Sweep -benchtime 1x ./internal/imagestore/
func BenchmarkSweep(b *testing.B) {
	const images, chain = 400, 4
	needs := func(m *imagestore.Manifest) ([]string, error) {
		var meta struct{ Needs []string }
		if len(m.Meta) == 0 {
			return nil, nil
		}
		err := json.Unmarshal(m.Meta, &meta)
		return meta.Needs, err
	}
	for name, fresh := range benchStores(b) {
		b.Run(name, func(b *testing.B) {
			for range b.N {
				b.StopTimer()
				s := benchStore(b, fresh(), imagestore.Options{SweepGrace: time.Nanosecond, Needs: needs})
				dir := b.TempDir()
				refs := map[string]bool{}
				g := new(errgroup.Group)
				g.SetLimit(8)
				for i := range images {
					id := fmt.Sprintf("img_%04d", i)
					var meta []byte
					if i%chain > 0 {
						meta, _ = json.Marshal(map[string]any{"needs": []string{fmt.Sprintf("img_%04d", i-1)}})
					}
					if i%chain == chain-1 && (i/chain)%2 == 0 {
						refs[id] = true // the head of every other chain
					}
					path := filepath.Join(dir, id)
					if err := os.WriteFile(path, []byte("image "+id), 0o600); err != nil {
						b.Fatal(err)
					}
					g.Go(func() error {
						_, err := s.Upload(context.Background(), imagestore.UploadSpec{ID: id, Meta: meta, Files: []imagestore.SourceFile{{Name: "disk", Path: path}}})
						return err
					})
				}
				if err := g.Wait(); err != nil {
					b.Fatal(err)
				}
				time.Sleep(3200 * time.Millisecond) // past the grace and the slack
				b.StartTimer()
				began := time.Now()
				st, err := s.Sweep(context.Background(), func(context.Context) (map[string]bool, error) { return refs, nil })
				took := time.Since(began)
				b.StopTimer()
				if err != nil || st.Swept != images/2 || st.Referenced != images/2 {
					b.Fatalf("sweep: %+v, %v; want %d swept, %d kept", st, err, images/2, images/2)
				}
				b.ReportMetric(float64(took.Milliseconds()), "ms/sweep")
				b.ReportMetric(float64(took.Microseconds())/images, "µs/image")
			}
		})
	}
}
