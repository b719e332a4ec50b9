package main

import (
	"archive/tar"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/zeish/zeish/sandbox"
	zeish "github.com/zeish/zeish/sdk/go"
)

func init() {
	register(section{
		name: "templates",
		about: "template builds from an uploaded docker archive (MiB of layers per second) next to tar + mkfs.ext4 -d " +
			"of the same layers; create → first exec from a warm image template next to the same image cold, and base",
		run: runTemplates,
	})
}

// benchLayerMiB is the size of each of the bench image's data layers: random
// bytes (incompressible, like binaries and wheels), three layers.
const (
	benchLayerMiB = 32
	benchLayers   = 3
)

// benchImage writes a docker archive of a busybox layer plus random data
// layers; salt makes each run's digest new, so no build is a cache hit.
func benchImage(dir string) (path string, layerBytes int64, err error) {
	bb, err := os.ReadFile("/bin/busybox")
	if err != nil {
		return "", 0, err
	}
	layers := []v1.Layer{}
	mk := func(write func(tw *tar.Writer) error) error {
		p := filepath.Join(dir, fmt.Sprintf("layer-%d.tar", len(layers)))
		f, err := os.Create(p)
		if err != nil {
			return err
		}
		tw := tar.NewWriter(f)
		err = write(tw)
		if cerr := tw.Close(); err == nil {
			err = cerr
		}
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return err
		}
		l, err := tarball.LayerFromFile(p, tarball.WithMediaType(types.OCILayer))
		if err != nil {
			return err
		}
		layers = append(layers, l)
		return nil
	}
	err = mk(func(tw *tar.Writer) error {
		tw.WriteHeader(&tar.Header{Name: "bin/", Typeflag: tar.TypeDir, Mode: 0o755})
		tw.WriteHeader(&tar.Header{Name: "bin/busybox", Mode: 0o755, Size: int64(len(bb))})
		tw.Write(bb)
		for _, a := range []string{"sh", "true"} {
			tw.WriteHeader(&tar.Header{Name: "bin/" + a, Typeflag: tar.TypeSymlink, Linkname: "busybox"})
		}
		return nil
	})
	for i := 0; err == nil && i < benchLayers; i++ {
		err = mk(func(tw *tar.Writer) error {
			for j := 0; j < 8; j++ { // a few files per layer, as real layers have
				size := int64(benchLayerMiB<<20) / 8
				if err := tw.WriteHeader(&tar.Header{Name: fmt.Sprintf("data/l%d/f%d", i, j), Mode: 0o644, Size: size}); err != nil {
					return err
				}
				if _, err := io.CopyN(tw, rand.Reader, size); err != nil {
					return err
				}
			}
			return nil
		})
	}
	if err != nil {
		return "", 0, err
	}
	// OCI media types throughout: umoci takes nothing else.
	base := mutate.MediaType(mutate.ConfigMediaType(empty.Image, types.OCIConfigJSON), types.OCIManifestSchema1)
	img, err := mutate.AppendLayers(base, layers...)
	if err != nil {
		return "", 0, err
	}
	cf, _ := img.ConfigFile()
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = "linux", "amd64"
	if img, err = mutate.ConfigFile(img, cf); err != nil {
		return "", 0, err
	}
	for _, l := range layers {
		n, _ := l.Size()
		layerBytes += n
	}
	// The same image as an OCI layout, for umoci (the reference).
	lp, err := layout.Write(filepath.Join(dir, "oci"), empty.Index)
	if err != nil {
		return "", 0, err
	}
	if err := lp.AppendImage(img, layout.WithAnnotations(map[string]string{"org.opencontainers.image.ref.name": "latest"})); err != nil {
		return "", 0, err
	}
	tag, _ := name.NewTag("zeish.bench/img:latest")
	path = filepath.Join(dir, "image.tar")
	return path, layerBytes, tarball.WriteToFile(path, tag, img)
}

// umociReference is the job done by umoci, the OCI tool: `umoci raw unpack`
// of the image's OCI layout into a folder (whiteouts and all), then
// mkfs.ext4 -d as our build does. 0 without umoci.
func umociReference(ctx context.Context, dir string, diskMiB int) (time.Duration, error) {
	if _, err := exec.LookPath("umoci"); err != nil {
		return 0, nil
	}
	root := filepath.Join(dir, "umoci-root")
	raw := filepath.Join(dir, "umoci.raw")
	defer os.RemoveAll(root)
	defer os.Remove(raw)
	start := time.Now()
	if out, err := exec.CommandContext(ctx, "umoci", "raw", "unpack", "--image", filepath.Join(dir, "oci")+":latest", root).CombinedOutput(); err != nil {
		return 0, fmt.Errorf("umoci raw unpack: %v: %s", err, out)
	}
	if err := mkfsInto(ctx, root, raw, diskMiB); err != nil {
		return 0, err
	}
	return time.Since(start), nil
}

// mkfsInto makes an ext4 file system of diskMiB from root's files.
func mkfsInto(ctx context.Context, root, raw string, diskMiB int) error {
	f, err := os.Create(raw)
	if err != nil {
		return err
	}
	f.Truncate(int64(diskMiB) << 20)
	f.Close()
	if out, err := exec.CommandContext(ctx, "/usr/sbin/mkfs.ext4", "-q", "-F", "-m", "0", "-d", root, raw).CombinedOutput(); err != nil {
		return fmt.Errorf("mkfs.ext4: %v: %s", err, out)
	}
	return nil
}

// unpackReference is the same job done with plain tools: tar -x each layer
// in order into a folder, then mkfs.ext4 -d into a sparse file of the same
// size (no whiteout handling, no safety checks: a floor, not a rival).
func unpackReference(ctx context.Context, dir string, diskMiB int) (time.Duration, error) {
	root := filepath.Join(dir, "ref-root")
	raw := filepath.Join(dir, "ref.raw")
	defer os.RemoveAll(root)
	defer os.Remove(raw)
	if err := os.Mkdir(root, 0o755); err != nil {
		return 0, err
	}
	layers, _ := filepath.Glob(filepath.Join(dir, "layer-*.tar"))
	start := time.Now()
	for _, l := range layers {
		if out, err := exec.CommandContext(ctx, "tar", "-xf", l, "-C", root).CombinedOutput(); err != nil {
			return 0, fmt.Errorf("tar: %v: %s", err, out)
		}
	}
	if err := mkfsInto(ctx, root, raw, diskMiB); err != nil {
		return 0, err
	}
	return time.Since(start), nil
}

func runTemplates(ctx context.Context, e *benchEnv) (*report, error) {
	const diskMiB = 512
	r := &report{Section: "templates", Title: fmt.Sprintf("Templates from images (%d × %d MiB random layers + busybox, %d MiB disk, %s)", benchLayers, benchLayerMiB, diskMiB, e.accel)}
	var build, mibps, ref, refMibps, umociT, umociMibps, cold, coldBase, warmStart, warmPrivate, warm1GPrivate []float64
	var warmAnon, warm1GAnon []float64 // copy-on-write copies of the image's RAM
	var tplName string
	// One warm template (the same kind of image) for every run's warm create.
	warmTpl, err := e.buildWarmTemplate(ctx, "bench-warm", diskMiB, 0)
	if err != nil {
		return nil, err
	}
	// And one warm at 1 GiB (memory_mib at build): its idle sandboxes'
	// private RAM is the 1 GiB target's row.
	warm1G, err := e.buildWarmTemplate(ctx, "bench-warm-1g", diskMiB, 1024)
	if err != nil {
		return nil, err
	}
	size := warmTpl.Warm
	for i := -e.opts.warmup; i < e.opts.runs; i++ {
		warm := i < 0
		dir, err := os.MkdirTemp(e.tmp, "img-")
		if err != nil {
			return nil, err
		}
		archive, layerBytes, err := benchImage(dir)
		if err != nil {
			return nil, fmt.Errorf("bench image: %w", err)
		}
		f, err := os.Open(archive)
		if err != nil {
			return nil, err
		}
		name := fmt.Sprintf("bench-%d", i+e.opts.warmup)
		start := time.Now()
		// Cold: the build rows measure the build alone, not a warm boot.
		tpl, err := e.client.UploadTemplate(ctx, zeish.BuildTemplateRequest{Name: name, From: "docker-archive", DiskMiB: diskMiB, Cold: true}, f)
		f.Close()
		if err != nil {
			return nil, fmt.Errorf("build: %w", err)
		}
		if tpl, err = e.client.WaitTemplate(ctx, tpl.ID, nil); err != nil || tpl.State != sandbox.TemplateReady {
			return nil, fmt.Errorf("build %s: %s %s %v", tpl.ID, tpl.State, tpl.StateReason, err)
		}
		took := time.Since(start)
		refTook, err := unpackReference(ctx, dir, diskMiB)
		if err != nil {
			return nil, err
		}
		umociTook, err := umociReference(ctx, dir, diskMiB)
		if err != nil {
			return nil, err
		}
		os.RemoveAll(dir)
		e.log.Info("template build", "run", i, "warmup", warm, "build_ms", took.Milliseconds(), "reference_ms", refTook.Milliseconds())
		if !warm {
			mb := float64(layerBytes) / mib
			build, mibps = append(build, ms(took)), append(mibps, mb/took.Seconds())
			ref, refMibps = append(ref, ms(refTook)), append(refMibps, mb/refTook.Seconds())
			if umociTook > 0 {
				umociT, umociMibps = append(umociT, ms(umociTook)), append(umociMibps, mb/umociTook.Seconds())
			}
		}
		tplName = name
		// The warm template, the same image cold and base, in turn, all of
		// the warm template's size.
		for _, t := range []string{warmTpl.Name, tplName, "base"} {
			if t == warmTpl.Name && e.opts.ready > 0 {
				// As a create that is not the first of a burst finds it.
				if err := e.waitReadyVMs(ctx, 1); err != nil {
					return nil, err
				}
			}
			startC := time.Now()
			sb, err := e.client.CreateSandbox(ctx, zeish.CreateSandboxRequest{Template: t, VCPUs: size.VCPUs, MemoryMiB: size.MemoryMiB, DiskMiB: size.DiskMiB}, zeish.Wait())
			if sb.ID != "" {
				e.track(sb.ID)
			}
			if err == nil && sb.State != sandbox.StateRunning {
				err = fmt.Errorf("sandbox %s is %s: %s", sb.ID, sb.State, sb.StateReason)
			}
			if err == nil {
				err = e.firstExec(ctx, sb.ID)
			}
			d := time.Since(startC)
			if err == nil && t == warmTpl.Name && !warm {
				// What an idle sandbox of the warm template adds to the
				// host: the guest RAM it wrote itself (the rest is the
				// template's image, shared).
				time.Sleep(2 * time.Second)
				var pid int
				if pid, err = e.sandboxPID(sb.ID); err == nil {
					var m vmMemory
					if m, err = qemuMemory(pid); err == nil {
						warmPrivate = append(warmPrivate, toMiB(m.GuestPrivateDirty))
						warmAnon = append(warmAnon, toMiB(m.GuestAnon))
					}
				}
			}
			if sb.ID != "" {
				if derr := e.deleteSandbox(ctx, sb.ID); derr != nil && err == nil {
					err = derr
				}
			}
			if err != nil {
				return nil, fmt.Errorf("cold start from %s: %w", t, err)
			}
			if !warm {
				switch t {
				case "base":
					coldBase = append(coldBase, ms(d))
				case warmTpl.Name:
					warmStart = append(warmStart, ms(d))
				default:
					cold = append(cold, ms(d))
				}
			}
		}
		if _, err := e.client.DeleteTemplate(ctx, tpl.ID); err != nil {
			return nil, err
		}
		if !warm {
			m, err := e.idleWarmMemory(ctx, warm1G)
			if err != nil {
				return nil, fmt.Errorf("1 GiB warm sandbox: %w", err)
			}
			warm1GPrivate, warm1GAnon = append(warm1GPrivate, toMiB(m.GuestPrivateDirty)), append(warm1GAnon, toMiB(m.GuestAnon))
		}
	}
	sBuild := r.add(newSeries("oci_build_upload_to_ready", "ms", build))
	sRate := r.add(newSeries("oci_build_layer_mib_per_s", "MiB/s", mibps))
	sRef := r.add(newSeries("tar_x_plus_mkfs_ext4_d", "ms", ref))
	sRefRate := r.add(newSeries("tar_x_plus_mkfs_layer_mib_per_s", "MiB/s", refMibps))
	sCold := r.add(newSeries("image_template_create_to_first_exec", "ms", cold))
	sBase := r.add(newSeries("base_create_to_first_exec", "ms", coldBase))
	sWarm := r.add(newSeries("warm_template_create_to_first_exec", "ms", warmStart))
	t := statTable("", "")
	t.Rows = append(t.Rows,
		statRow("build: upload → ready (API, streamed upload, unpack, agent, mkfs, qcow2) [ms]", sBuild),
		statRow("  layers per second [MiB/s of compressed layers]", sRate),
		statRow("reference: tar -x of each layer + mkfs.ext4 -d [ms]", sRef),
		statRow("  layers per second [MiB/s]", sRefRate),
	)
	if len(umociT) > 0 {
		t.Rows = append(t.Rows,
			statRow("reference: umoci raw unpack of the OCI layout + mkfs.ext4 -d [ms]", r.add(newSeries("umoci_unpack_plus_mkfs_ext4_d", "ms", umociT))),
			statRow("  layers per second [MiB/s]", r.add(newSeries("umoci_layer_mib_per_s", "MiB/s", umociMibps))),
		)
	} else {
		r.Notes = append(r.Notes, "umoci is not installed (scripts/deps.sh installs it): no umoci row")
	}
	t.Rows = append(t.Rows,
		statRow("cold create → first exec, image template [ms]", sCold),
		statRow("cold create → first exec, base [ms]", sBase),
		statRow("warm create → first exec, the same kind of image, warm template [ms]", sWarm),
	)
	sum := &table{Header: []string{"medians", "value", "goal"}}
	sPriv := r.add(newSeries("warm_sandbox_idle_private_dirty", "MiB", warmPrivate))
	t.Rows = append(t.Rows, statRow("idle sandbox of the warm template: guest RAM it wrote itself (Private_Dirty) [MiB]", sPriv))
	sAnon := r.add(newSeries("warm_sandbox_idle_cow_copies", "MiB", warmAnon))
	t.Rows = append(t.Rows, statRow("  of which copies of the image's pages it wrote (Anonymous) [MiB]", sAnon))
	sPriv1G := r.add(newSeries("warm_1gib_sandbox_idle_private_dirty", "MiB", warm1GPrivate))
	t.Rows = append(t.Rows, statRow("idle sandbox of the 1 GiB warm template (memory_mib 1024): Private_Dirty [MiB]", sPriv1G))
	sAnon1G := r.add(newSeries("warm_1gib_sandbox_idle_cow_copies", "MiB", warm1GAnon))
	t.Rows = append(t.Rows, statRow("  of which copies of the image's pages it wrote (Anonymous) [MiB]", sAnon1G))
	sum.Rows = [][]string{
		{"warm ÷ cold create → first exec (same image, same size)", fmtNum(100*sWarm.Median/sCold.Median) + " %", "≤ 15 %"},
		{fmt.Sprintf("guest RAM an idle sandbox of the %d MiB warm template copied (Anonymous, worst; Private_Dirty %s)", size.MemoryMiB, fmtNum(sPriv.Max)), fmtNum(sAnon.Max) + " MiB", "≤ 8 MiB + pages it writes"},
		{fmt.Sprintf("guest RAM an idle sandbox of the 1024 MiB warm template copied (Anonymous, worst; Private_Dirty %s)", fmtNum(sPriv1G.Max)), fmtNum(sAnon1G.Max) + " MiB", "≤ 8 MiB + pages it writes"},
	}
	r.Tables = append(r.Tables, t, sum)
	r.Notes = append(r.Notes,
		fmt.Sprintf("runs: %d measured after %d warm-up; every build is a new image (random layers), so no cache hit", e.opts.runs, e.opts.warmup),
		"references: tar -x + mkfs.ext4 -d of the same layer tars (no whiteouts, no qcow2 conversion, a floor) and umoci raw unpack + mkfs.ext4 -d of the same image's OCI layout",
		"an idle warm sandbox's Private_Dirty counts, besides the pages it copied on write (Anonymous), the template image's own RAM-file pages (dirty in tmpfs since the template's machine wrote them) that it is the only process to map: one sandbox at a time here, so every image page it reads shows as private. Those pages are the image's, held once for every sandbox of the template; Anonymous is what a sandbox adds",
		fmt.Sprintf("the warm template was built once (%d ms from upload to ready, its boot and save included) and started %d vCPU / %d MiB / %d MiB disk sandboxes; every create uses that size", warmTpl.Warm.BuildMS, size.VCPUs, size.MemoryMiB, size.DiskMiB),
	)
	hits, herr := e.metric(ctx, "zeish_node_warm_creates_total", `ready="hit"`)
	misses, merr := e.metric(ctx, "zeish_node_warm_creates_total", `ready="miss"`)
	if err := errors.Join(herr, merr); err != nil {
		return nil, err
	}
	r.Notes = append(r.Notes, fmt.Sprintf("ready VMs (ZEISH_READY_VMS=%d): the bench waits before each warm create until zeishd keeps one ready for the template, as for a create that is not the first of a burst; of the section's warm creates, %.0f found one and %.0f did not (those boot from the image: a VMM launched and the image loaded on the create's path)", e.opts.ready, hits, misses))
	for _, id := range []string{warmTpl.ID, warm1G.ID} {
		if _, err := e.client.DeleteTemplate(ctx, id); err != nil {
			return nil, err
		}
	}
	return r, nil
}

// idleWarmMemory creates a sandbox of the warm template's size, lets it
// idle 2 s and measures its QEMU process (the guest-RAM mapping's
// Private_Dirty and Anonymous).
func (e *benchEnv) idleWarmMemory(ctx context.Context, tpl zeish.Template) (vmMemory, error) {
	size := tpl.Warm
	sb, err := e.client.CreateSandbox(ctx, zeish.CreateSandboxRequest{Template: tpl.Name, VCPUs: size.VCPUs, MemoryMiB: size.MemoryMiB, DiskMiB: size.DiskMiB}, zeish.Wait())
	if sb.ID != "" {
		e.track(sb.ID)
		defer e.deleteSandbox(ctx, sb.ID)
	}
	if err == nil && sb.State != sandbox.StateRunning {
		err = fmt.Errorf("sandbox %s is %s: %s", sb.ID, sb.State, sb.StateReason)
	}
	if err == nil {
		err = e.firstExec(ctx, sb.ID)
	}
	if err != nil {
		return vmMemory{}, err
	}
	time.Sleep(2 * time.Second)
	pid, err := e.sandboxPID(sb.ID)
	if err != nil {
		return vmMemory{}, err
	}
	return qemuMemory(pid)
}

// buildWarmTemplate builds a warm template from a bench image whose start
// command leaves a process running.
func (e *benchEnv) buildWarmTemplate(ctx context.Context, name string, diskMiB, memoryMiB int) (zeish.Template, error) {
	return e.buildWarmTemplateOn(ctx, e.client, name, diskMiB, memoryMiB)
}

// buildWarmTemplateOn is buildWarmTemplate through client c (another zeishd's).
func (e *benchEnv) buildWarmTemplateOn(ctx context.Context, c *zeish.Client, name string, diskMiB, memoryMiB int) (zeish.Template, error) {
	dir, err := os.MkdirTemp(e.tmp, "img-")
	if err != nil {
		return zeish.Template{}, err
	}
	defer os.RemoveAll(dir)
	archive, _, err := benchImage(dir)
	if err != nil {
		return zeish.Template{}, fmt.Errorf("bench image: %w", err)
	}
	f, err := os.Open(archive)
	if err != nil {
		return zeish.Template{}, err
	}
	defer f.Close()
	tpl, err := c.UploadTemplate(ctx, zeish.BuildTemplateRequest{Name: name, From: "docker-archive", DiskMiB: diskMiB, MemoryMiB: memoryMiB,
		StartCmd: []string{"/bin/sh", "-c", "echo up > /tmp/up; exec /bin/busybox sleep 100000"},
		ReadyCmd: []string{"/bin/sh", "-c", "test -s /tmp/up"}}, f)
	if err != nil {
		return tpl, fmt.Errorf("warm build: %w", err)
	}
	if tpl, err = c.WaitTemplate(ctx, tpl.ID, nil); err != nil || tpl.State != sandbox.TemplateReady || tpl.Warm == nil {
		return tpl, fmt.Errorf("warm build %s: %s %s %v", tpl.ID, tpl.State, tpl.StateReason, err)
	}
	return tpl, nil
}
