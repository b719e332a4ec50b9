package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/zeish/zeish/api"
	"github.com/zeish/zeish/errdefs"
	"github.com/zeish/zeish/internal/testenv"
	"github.com/zeish/zeish/sandbox"
	zeish "github.com/zeish/zeish/sdk/go"
)

func init() {
	register(section{
		name: "images",
		about: "(only with -only images) images in a shared S3 store (versitygw): a remote fork child's fork → first exec next to a " +
			"local child's, a re-fork's upload ÷ its private pages, the pause with a store ÷ without, creates from a cached " +
			"template and a template's first create on a new node next to cp of its files",
		run:   runImages,
		optIn: true,
	})
}

// The targets (issue 29, "Targets").
const (
	remoteExecGoal   = 2.0 // a remote fork child's fork → first exec ÷ a local child's
	reforkUploadGoal = 1.1 // bytes uploaded for a re-fork ÷ the child's private pages
	storePauseGoal   = 1.1 // the source's pause with a store ÷ without
	cachedCreateGoal = 1.1 // a create from a template cached on a node ÷ the same on a single binary ("unchanged")
)

// imagesRunsMax bounds the section's runs: each is several forks under
// TCG, and the section should take minutes at default flags.
const imagesRunsMax = 3

// imagesWriteMiB is what a child writes into its memory before it is
// forked again: the private pages a re-fork uploads.
const imagesWriteMiB = 16

func runImages(ctx context.Context, e *benchEnv) (*report, error) {
	loadBefore := loadAverage()
	runs := min(e.opts.runs, imagesRunsMax)
	mem := e.opts.memMiB
	r := &report{Section: "images", Title: fmt.Sprintf("Images in a shared store: S3 (versitygw) on loopback, %d MiB sandboxes, %s", mem, e.accel)}
	s3, err := testenv.OpenS3(filepath.Join(e.tmp, "s3"))
	if s3 != nil {
		defer s3.Close()
	}
	if err != nil {
		return nil, err
	}
	bucket, err := s3.MakeBucket(ctx)
	if err != nil {
		return nil, err
	}
	storeEnv := []string{"AWS_ACCESS_KEY_ID=" + s3.AccessKey, "AWS_SECRET_ACCESS_KEY=" + s3.SecretKey,
		fmt.Sprintf("ZEISH_IMAGE_STORE=s3://%s/images/?endpoint=%s", bucket, s3.Endpoint)}

	// One binary with a store beside the bench's without: pauses, re-forks.
	side := &testenv.Zeishd{Bin: e.zeishdBin, DataDir: filepath.Join(e.tmp, "data-store"), OwnProcessGroup: true,
		Env: append([]string{"ZEISH_SANDBOXD=" + e.sandboxd, "ZEISH_TEMPLATE_CACHE=" + e.cacheDir, "ZEISH_LOG_LEVEL=info",
			"ZEISH_READY_VMS=" + strconv.Itoa(e.opts.ready),
			"ZEISH_PLAN_RUNNING_SLOTS=100", "ZEISH_PLAN_CREATES_PER_MINUTE=1000", "ZEISH_PLAN_DAILY_CREATES=100000"}, storeEnv...)}
	stored, stopStored, err := e.startSide(ctx, side, ".store")
	if err != nil {
		return nil, err
	}
	pauses, err := e.storePauses(ctx, stored, side, runs)
	if serr := stopStored(); err == nil && serr != nil {
		err = serr
	}
	if err != nil {
		return nil, err
	}

	cl, err := e.imagesCluster(ctx, storeEnv)
	if cl != nil {
		defer cl.close()
	}
	if err != nil {
		return nil, err
	}
	remote, err := e.remoteForks(ctx, cl, runs)
	if err != nil {
		return nil, err
	}
	creates, err := e.imageCreates(ctx, cl, runs)
	if err != nil {
		return nil, err
	}

	t := &table{Title: "side by side: medians (min–max), n", Header: []string{"what", "first", "second", "ratio", "target"}}
	row := func(what string, a, b []float64, unit, target string) float64 {
		ratio := median(a) / median(b)
		t.Rows = append(t.Rows, []string{what, spread(a, unit), spread(b, unit), fmtNum(ratio) + "×", target})
		return ratio
	}
	rRemote := row("fork → first exec: a remote child (another node, from the store) vs a local child", remote.remote, remote.local, "ms", fmt.Sprintf("≤ %.0f×", remoteExecGoal))
	rPause := row("the source's pause: with a store vs without", pauses.with, pauses.without, "ms", fmt.Sprintf("≤ %.1f×", storePauseGoal))
	rUpload := row("re-fork: bytes uploaded vs the child's private pages", pauses.uploaded, pauses.private, "MiB", fmt.Sprintf("≤ %.1f×", reforkUploadGoal))
	rCached := row("create → first exec, template cached: a node with the store vs a single binary", creates.cachedNode, creates.single, "ms", fmt.Sprintf("≤ %.1f× (unchanged)", cachedCreateGoal))
	row("a template's files onto a new node: the fetch from the store vs cp of the same files", creates.fetch, creates.copy, "ms", "reported")
	row("create → first exec on that node: first (fetch + cold boot) vs cached", creates.first, creates.cached, "ms", "reported")
	r.Tables = append(r.Tables, t)
	parts := &table{Title: "where the parents' pauses went (captures by private pages, from each zeishd's log, warm-up included): medians (max), ms",
		Header: append([]string{"zeishd", "captures"}, pauseParts...)}
	for _, side := range []struct {
		name  string
		parts map[string][]float64
	}{{"with a store", pauses.partsWith}, {"without", pauses.partsWithout}} {
		line := []string{side.name, strconv.Itoa(len(side.parts["pause_ms"]))}
		for _, k := range pauseParts {
			line = append(line, spreadMax(side.parts[k]))
		}
		parts.Rows = append(parts.Rows, line)
	}
	r.Tables = append(r.Tables, parts)
	for _, s := range []series{
		newSeries("remote_child_fork_to_first_exec", "ms", remote.remote), newSeries("local_child_fork_to_first_exec", "ms", remote.local),
		newSeries("local_sibling_fork_to_first_exec", "ms", remote.siblings),
		newSeries("pause_with_store", "ms", pauses.with), newSeries("pause_without_store", "ms", pauses.without),
		newSeries("refork_uploaded", "MiB", pauses.uploaded), newSeries("refork_private_pages", "MiB", pauses.private),
		newSeries("cached_create_to_first_exec_node", "ms", creates.cachedNode), newSeries("cached_create_to_first_exec_single", "ms", creates.single),
		newSeries("template_fetch", "ms", creates.fetch), newSeries("template_cp", "ms", creates.copy),
		newSeries("template_first_create_to_first_exec", "ms", creates.first), newSeries("template_cached_create_to_first_exec", "ms", creates.cached),
	} {
		r.add(s)
	}
	r.addGoal(goal{Name: "remote fork child's fork → first exec ÷ a local child's", Target: fmt.Sprintf("≤ %.0f", remoteExecGoal), Value: rRemote, Unit: "×", Met: rRemote <= remoteExecGoal})
	r.addGoal(goal{Name: "bytes uploaded for a re-fork ÷ its private pages", Target: fmt.Sprintf("≤ %.1f", reforkUploadGoal), Value: rUpload, Unit: "×", Met: rUpload <= reforkUploadGoal})
	r.addGoal(goal{Name: "source's pause with a store ÷ without", Target: fmt.Sprintf("≤ %.1f", storePauseGoal), Value: rPause, Unit: "×", Met: rPause <= storePauseGoal})
	r.addGoal(goal{Name: "create from a cached template, node with a store ÷ single binary", Target: fmt.Sprintf("≤ %.1f", cachedCreateGoal), Value: rCached, Unit: "×", Met: rCached <= cachedCreateGoal})
	r.Notes = append(r.Notes,
		fmt.Sprintf("the host's load average (1 min) was %s at the start of the section and %s at its end: other work shares its CPUs", loadBefore, loadAverage()),
		"the control plane, both node agents and the S3 server run on this host's loopback, not in network namespaces joined by veth: the figures are loopback's (what the issue asks for: loopback speed), without a namespace's veth hop",
		fmt.Sprintf("remote child: a fork with placement any whose parent's node had room for the others; timed from the clone call to the remote child's first exec (capture, the fork image's upload, the other node's fetch, its start). Local child: a fork of 1 of the same parent (placement parent), call → first exec. Siblings: the local children of the placement-any forks, whose call returns once the remote child started (%s)", spread(remote.siblings, "ms")),
		fmt.Sprintf("pause: the clone call's pause_ms of a fork of one running parent, on two single binaries of the same build, one with ZEISH_IMAGE_STORE, interleaved, twice the runs; the with-store forks run while the previous images' uploads may still be in flight. Re-fork: a child of that parent writes %d MiB into its memory and is forked; uploaded is the node's `image durable` uploaded_bytes of that image (chunks the store lacked + manifest), private pages the capture's private_bytes", imagesWriteMiB),
		"template: a warm template built on node-a (docker archive, 3 × 32 MiB random layers), then created from on node-b: its first create fetches kernel, initrd and disk from the store (fetch: zeish_image_fetch_duration_seconds_sum{what=\"file\"}) and boots cold (the warm machine stays its builder's); cp: `cp -r` of the fetched folder on the same file system, page cache warm. One first create per node, so n = 1",
	)
	return r, nil
}

// spread is a median with its range and count.
func spread(s []float64, unit string) string {
	if len(s) == 0 {
		return "–"
	}
	lo, hi := s[0], s[0]
	for _, v := range s {
		lo, hi = min(lo, v), max(hi, v)
	}
	return fmt.Sprintf("%s %s (%s–%s), %d", fmtNum(median(s)), unit, fmtNum(lo), fmtNum(hi), len(s))
}

// spreadMax is a median with its maximum.
func spreadMax(s []float64) string {
	if len(s) == 0 {
		return "–"
	}
	return fmt.Sprintf("%s (%s)", fmtNum(median(s)), fmtNum(slices.Max(s)))
}

// pauseRuns is what storePauses measured.
type pauseRuns struct {
	with, without     []float64 // ms
	uploaded, private []float64 // MiB, per re-fork
	// partsWith and partsWithout are the parts of those pauses (deltaParts),
	// from the captures' log lines of the parents.
	partsWith, partsWithout map[string][]float64
}

// pauseParts are the parts of a capture by private pages' pause that
// the images section shows, with a store and without.
var pauseParts = []string{"pause_ms", "pages_ms", "swap_ms", "save_ms", "cont_ms"}

// linesOf keeps the lines of log that name sandbox id.
func linesOf(log, id string) string {
	var b strings.Builder
	for _, line := range strings.Split(log, "\n") {
		if strings.Contains(line, " sandbox="+id+" ") {
			b.WriteString(line + "\n")
		}
	}
	return b.String()
}

// storePauses forks one running parent on the bench's zeishd (no store)
// and one on side (with a store), interleaved, and each time re-forks
// the side's child after it wrote imagesWriteMiB into its memory: the
// upload of that image is its private pages.
func (e *benchEnv) storePauses(ctx context.Context, stored *zeish.Client, side *testenv.Zeishd, runs int) (pauseRuns, error) {
	var out pauseRuns
	req := zeish.CreateSandboxRequest{MemoryMiB: e.opts.memMiB}
	plain, _, _, err := e.createAndExecOn(ctx, e.client, req)
	if plain != "" {
		defer e.deleteSandbox(ctx, plain)
	}
	if err != nil {
		return out, err
	}
	parent, _, _, err := e.createAndExecOn(ctx, stored, req)
	if err != nil {
		return out, err
	}
	var reforks []string // the re-forks' images, whose uploads are read at the end
	// Pauses are noisy on a shared host and cheap: twice the runs of them,
	// a re-fork in the first runs.
	for i := -e.opts.warmup; i < 2*runs; i++ {
		kid, pause, err := forkOn(ctx, e.client, plain)
		if err == nil {
			err = deleteSandboxOn(ctx, e.client, kid)
		}
		if err != nil {
			return out, err
		}
		mark := len(side.Log.String())
		kid, spause, err := forkOn(ctx, stored, parent)
		if err != nil {
			return out, err
		}
		if i >= 0 {
			out.without, out.with = append(out.without, pause), append(out.with, spause)
		}
		e.log.Info("images: fork pause", "run", i, "without_store_ms", pause, "with_store_ms", spause)
		if i >= runs {
			if err := deleteSandboxOn(ctx, stored, kid); err != nil {
				return out, err
			}
			continue
		}
		// The child's image must be whole in the store first: a re-fork
		// is uploaded as a delta of it.
		img, err := waitLogMatch(ctx, side, mark, captureImageRE, parent)
		if err == nil {
			_, err = waitLogMatch(ctx, side, mark, durableRE, img)
		}
		if err == nil {
			err = execOn(ctx, stored, kid, fmt.Sprintf("head -c %d /dev/urandom > /dev/shm/written", imagesWriteMiB<<20))
		}
		var grandchild string
		if err == nil {
			mark = len(side.Log.String())
			grandchild, _, err = forkOn(ctx, stored, kid)
		}
		if err == nil {
			var re string
			if re, err = waitLogMatch(ctx, side, mark, captureImageRE, kid); err == nil && i >= 0 {
				reforks = append(reforks, re)
			}
		}
		for _, id := range []string{grandchild, kid} {
			if id != "" {
				if derr := deleteSandboxOn(ctx, stored, id); err == nil {
					err = derr
				}
			}
		}
		if err != nil {
			return out, err
		}
	}
	out.partsWith = captureParts(linesOf(side.Log.String(), parent), deltaCaptureRE, deltaParts)
	out.partsWithout = captureParts(linesOf(e.zeishd.Log.String(), plain), deltaCaptureRE, deltaParts)
	for _, img := range reforks {
		if _, err := waitLogMatch(ctx, side, 0, durableRE, img); err != nil {
			return out, err
		}
		log := side.Log.String()
		up, ok1 := logFigure(log, durableRE, img, "uploaded_bytes")
		priv, ok2 := logFigure(log, privatePagesRE, img, "private_bytes")
		if !ok1 || !ok2 {
			return out, fmt.Errorf("re-fork image %s: uploaded %v, private pages %v in the log (was it captured by its private pages?)", img, ok1, ok2)
		}
		out.uploaded, out.private = append(out.uploaded, up/(1<<20)), append(out.private, priv/(1<<20))
	}
	return out, nil
}

// Log lines of a node with a store, each naming an image: its capture
// (by the sandbox captured), the capture of its private pages (the image
// as a path) and its upload's end.
var (
	captureImageRE = regexp.MustCompile(`msg="capture done".* sandbox=(\S+) image=(\S+)`)
	privatePagesRE = regexp.MustCompile(`msg="vm captured by its private pages".* image=\S*/(\S+) .*`)
	durableRE      = regexp.MustCompile(`msg="image durable".* image=(\S+) .*`)
)

// logMatch finds in log the first line re matches whose first group is
// key: captureImageRE gives the image (its second group), the others the
// whole line.
func logMatch(log string, re *regexp.Regexp, key string) (string, bool) {
	for _, line := range strings.Split(log, "\n") {
		m := re.FindStringSubmatch(line)
		if m == nil || m[1] != key {
			continue
		}
		if len(m) > 2 {
			return m[2], true
		}
		return line, true
	}
	return "", false
}

// logFigure is figure name=value of the line logMatch finds.
func logFigure(log string, re *regexp.Regexp, key, name string) (float64, bool) {
	line, ok := logMatch(log, re, key)
	if !ok {
		return 0, false
	}
	for _, f := range strings.Fields(line) {
		if v, ok := strings.CutPrefix(f, name+"="); ok {
			n, err := strconv.ParseFloat(v, 64)
			return n, err == nil
		}
	}
	return 0, false
}

// waitLogMatch waits (up to 3 minutes: an upload) for logMatch in z's
// log from byte mark on.
func waitLogMatch(ctx context.Context, z *testenv.Zeishd, mark int, re *regexp.Regexp, key string) (string, error) {
	for deadline := time.Now().Add(3 * time.Minute); ; {
		if v, ok := logMatch(z.Log.String()[mark:], re, key); ok {
			return v, nil
		}
		if time.Now().After(deadline) {
			return "", fmt.Errorf("no %q line for %s in zeishd's log after 3 minutes", re, key)
		}
		select {
		case <-ctx.Done():
			return "", ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// forkOn forks id once through c and returns the child and the pause.
func forkOn(ctx context.Context, c *zeish.Client, id string) (string, float64, error) {
	res, err := c.CloneSandbox(ctx, id, zeish.CloneRequest{}, zeish.Wait())
	if err == nil && (len(res.Sandboxes) != 1 || res.Sandboxes[0].State != sandbox.StateRunning) {
		err = fmt.Errorf("fork of %s: %+v", id, res.Sandboxes)
	}
	if err != nil {
		for _, k := range res.Sandboxes {
			deleteSandboxOn(ctx, c, k.ID)
		}
		return "", 0, err
	}
	return res.Sandboxes[0].ID, float64(res.PauseMS), nil
}

// execOn runs a shell script in sandbox id through c.
func execOn(ctx context.Context, c *zeish.Client, id, script string) error {
	conn, err := c.Connect(ctx, id)
	if err != nil {
		return err
	}
	res, err := conn.Exec(ctx, zeish.ExecRequest{Argv: []string{"/bin/sh", "-c", script}}, nil, nil)
	if err == nil && res.ExitCode != 0 {
		err = fmt.Errorf("%q in %s: exit %d", script, id, res.ExitCode)
	}
	return err
}

// imagesLab is a control plane and two node agents sharing the store.
type imagesLab struct {
	e      *benchEnv
	pg     *testenv.Postgres
	cp     *testenv.Zeishd
	nodes  map[string]*testenv.Zeishd
	client *zeish.Client
	key    string
}

// The cluster's nodes: node-a holds the parents and builds the template.
const (
	imagesNodeA = "node-a"
	imagesNodeB = "node-b"
)

func (e *benchEnv) imagesCluster(ctx context.Context, storeEnv []string) (*imagesLab, error) {
	pg, err := testenv.StartPostgres()
	if err != nil {
		return nil, err
	}
	l := &imagesLab{e: e, pg: pg, nodes: map[string]*testenv.Zeishd{}}
	db := pg.URL("postgres")
	if l.cp, err = e.startControl(ctx, db, "data-images-control", storeEnv...); err != nil {
		return l, err
	}
	if l.key, err = l.cp.AdminKey(); err != nil {
		return l, err
	}
	l.client = zeish.NewClient("http://"+l.cp.Addr+api.BasePath, l.key)
	mem := e.opts.memMiB
	// node-a: a parent and two children (a fork image counts too), so a
	// fork with placement any puts one child or two beside the parent and
	// the rest on node-b.
	for id, budget := range map[string]int{imagesNodeA: 3*mem + mem/2, imagesNodeB: 4 * mem} {
		n, err := e.startNodeAgent(ctx, l.cp, db, id, append([]string{"ZEISH_READY_VMS=0", "ZEISH_LOG_LEVEL=info",
			fmt.Sprintf("ZEISH_MEMORY_BUDGET_MIB=%d", budget)}, storeEnv...)...)
		if err != nil {
			return l, err
		}
		l.nodes[id] = n
	}
	return l, nil
}

func (l *imagesLab) close() {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if l.client != nil {
		if list, err := l.client.ListSandboxes(ctx, zeish.ListOptions{}); err == nil {
			for _, sb := range list {
				deleteSandboxOn(ctx, l.client, sb.ID)
			}
		}
	}
	for id, n := range l.nodes {
		n.Stop()
		if l.e.opts.zlog != "" {
			os.WriteFile(l.e.opts.zlog+"."+id, []byte(n.Log.String()), 0o644)
		}
	}
	if l.cp != nil {
		l.cp.Stop()
	}
	l.pg.Stop()
}

// only undrains node id and drains the other, so placement picks id
// ("": undrains both).
func (l *imagesLab) only(ctx context.Context, id string) error {
	for n := range l.nodes {
		op := "drain"
		if n == id || id == "" {
			op = "undrain"
		}
		if err := l.admin(ctx, http.MethodPost, "/admin/nodes/"+n+"/"+op, nil); err != nil {
			return err
		}
	}
	return nil
}

// admin calls the control plane's admin API.
func (l *imagesLab) admin(ctx context.Context, method, path string, out any) error {
	req, err := http.NewRequestWithContext(ctx, method, "http://"+l.cp.Addr+api.BasePath+path, nil)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+l.key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s %s: %s", method, path, resp.Status)
	}
	if out != nil {
		return json.NewDecoder(resp.Body).Decode(out)
	}
	return nil
}

// freeMiB is node id's free memory as placement sees it.
func (l *imagesLab) freeMiB(ctx context.Context, id string) (int, error) {
	var list api.NodeList
	if err := l.admin(ctx, http.MethodGet, "/admin/nodes", &list); err != nil {
		return 0, err
	}
	for _, n := range list.Nodes {
		if n.ID == id {
			return n.FreeMiB, nil
		}
	}
	return 0, fmt.Errorf("node %s is not listed", id)
}

// remoteRuns is what remoteForks measured (ms).
type remoteRuns struct{ remote, local, siblings []float64 }

// remoteForks forks one parent on node-a, interleaved: into 1 child
// (placement parent: local) and into one more child than fit beside it
// (placement any: the last on node-b, from the store).
func (e *benchEnv) remoteForks(ctx context.Context, l *imagesLab, runs int) (remoteRuns, error) {
	var out remoteRuns
	if err := l.only(ctx, imagesNodeA); err != nil {
		return out, err
	}
	parent, _, _, err := e.createAndExecOn(ctx, l.client, zeish.CreateSandboxRequest{MemoryMiB: e.opts.memMiB})
	if parent != "" {
		defer deleteSandboxOn(ctx, l.client, parent)
	}
	if err != nil {
		return out, err
	}
	if err := l.only(ctx, ""); err != nil { // both take placements again
		return out, err
	}
	for i := -e.opts.warmup; i < runs; i++ {
		local, err := l.forkAndExec(ctx, parent, 1, "")
		if err != nil {
			return out, err
		}
		free, err := l.freeMiB(ctx, imagesNodeA)
		if err != nil {
			return out, err
		}
		fits := free / e.opts.memMiB
		if fits < 1 {
			return out, fmt.Errorf("node-a has %d MiB free: no child fits beside the parent, and a fork's image is captured there", free)
		}
		spread, err := l.forkAndExec(ctx, parent, fits+1, zeish.PlacementAny)
		if err != nil {
			return out, err
		}
		remote, siblings := spread[imagesNodeB], spread[imagesNodeA]
		if len(remote) != 1 || len(siblings) != fits {
			return out, fmt.Errorf("a fork of %d with placement any, %d fitting beside the parent: %d children on node-a, %d on node-b", fits+1, fits, len(siblings), len(remote))
		}
		e.log.Info("images: fork → first exec", "run", i, "local_ms", local[imagesNodeA], "remote_ms", remote, "siblings_ms", siblings)
		if i >= 0 {
			out.local = append(out.local, local[imagesNodeA]...)
			out.remote = append(out.remote, remote...)
			out.siblings = append(out.siblings, siblings...)
		}
	}
	return out, nil
}

// forkAndExec forks parent into n children with placement, runs a first
// exec in each as soon as the call returns, and deletes them: each
// child's call → first exec (ms), by its node.
func (l *imagesLab) forkAndExec(ctx context.Context, parent string, n int, placement string) (map[string][]float64, error) {
	start := time.Now()
	res, err := l.client.CloneSandbox(ctx, parent, zeish.CloneRequest{Count: n, Placement: placement}, zeish.Wait())
	defer func() {
		for _, c := range res.Sandboxes {
			deleteSandboxOn(ctx, l.client, c.ID)
		}
	}()
	if err != nil {
		return nil, fmt.Errorf("fork of %d, placement %q: %w", n, placement, err)
	}
	type done struct {
		host string
		ms   float64
		err  error
	}
	ch := make(chan done, len(res.Sandboxes))
	for _, c := range res.Sandboxes {
		go func() {
			err := firstExecOn(ctx, l.client, c.ID)
			ch <- done{c.Host, ms(time.Since(start)), err}
		}()
	}
	out := map[string][]float64{}
	var errs []error
	for range res.Sandboxes {
		d := <-ch
		out[d.host] = append(out[d.host], d.ms)
		errs = append(errs, d.err)
	}
	return out, errors.Join(errs...)
}

// createRuns is what imageCreates measured (ms).
type createRuns struct {
	cachedNode, single []float64 // base template: on node-b, on the bench's single binary
	fetch, copy        []float64 // a built template's files onto node-b: fetched, and cp of them
	first, cached      []float64 // create → first exec of it on node-b: the first, the next
}

// imageCreates times creates from a template the node has (the base)
// on node-b and on the single binary, and the first and second create on
// node-b of a template built on node-a.
func (e *benchEnv) imageCreates(ctx context.Context, l *imagesLab, runs int) (createRuns, error) {
	var out createRuns
	if err := l.only(ctx, imagesNodeB); err != nil {
		return out, err
	}
	req := zeish.CreateSandboxRequest{MemoryMiB: e.opts.memMiB}
	for i := -e.opts.warmup; i < runs; i++ {
		for _, c := range []*zeish.Client{l.client, e.client} {
			id, _, total, err := e.createAndExecOn(ctx, c, req)
			if id != "" {
				if derr := deleteSandboxOn(ctx, c, id); err == nil {
					err = derr
				}
			}
			if err != nil {
				return out, err
			}
			if i >= 0 && c == l.client {
				out.cachedNode = append(out.cachedNode, ms(total))
			} else if i >= 0 {
				out.single = append(out.single, ms(total))
			}
		}
	}

	if err := l.only(ctx, imagesNodeA); err != nil {
		return out, err
	}
	tpl, err := e.buildWarmTemplateOn(ctx, l.client, "images-bench", 512, e.opts.memMiB)
	if tpl.ID != "" {
		defer l.client.DeleteTemplate(context.WithoutCancel(ctx), tpl.ID)
	}
	if err != nil {
		return out, err
	}
	if tpl.Host != imagesNodeA {
		return out, fmt.Errorf("template built on %s, want %s", tpl.Host, imagesNodeA)
	}
	if err := l.only(ctx, imagesNodeB); err != nil {
		return out, err
	}
	req.Template = tpl.Name
	// node-b refuses it (503) until node-a's upload is whole.
	fetchedBefore, err := metricAt(ctx, l.nodes[imagesNodeB].Addr, "zeish_image_fetch_duration_seconds_sum", `what="file"`)
	if err != nil {
		fetchedBefore = 0 // no fetch yet: the series is not served
	}
	var first string
	var total time.Duration
	for deadline := time.Now().Add(3 * time.Minute); ; time.Sleep(250 * time.Millisecond) {
		first, _, total, err = e.createAndExecOn(ctx, l.client, req)
		if err == nil || !errdefs.Is(err, errdefs.ClassUnavailable) || time.Now().After(deadline) {
			break
		}
	}
	if first != "" {
		defer deleteSandboxOn(ctx, l.client, first)
	}
	if err != nil {
		return out, fmt.Errorf("first create of %s on %s: %w", tpl.Name, imagesNodeB, err)
	}
	fetchS, err := metricAt(ctx, l.nodes[imagesNodeB].Addr, "zeish_image_fetch_duration_seconds_sum", `what="file"`)
	if err != nil {
		return out, err
	}
	out.first, out.fetch = []float64{ms(total)}, []float64{(fetchS - fetchedBefore) * 1000}
	id, _, total, err := e.createAndExecOn(ctx, l.client, req)
	if id != "" {
		if derr := deleteSandboxOn(ctx, l.client, id); err == nil {
			err = derr
		}
	}
	if err != nil {
		return out, err
	}
	out.cached = []float64{ms(total)}
	src := filepath.Join(l.nodes[imagesNodeB].DataDir, "template-cache", tpl.ID)
	dst := filepath.Join(e.tmp, "cp-"+tpl.ID)
	began := time.Now()
	if b, err := exec.CommandContext(ctx, "cp", "-r", src, dst).CombinedOutput(); err != nil {
		return out, fmt.Errorf("cp -r %s: %v: %s", src, err, b)
	}
	out.copy = []float64{ms(time.Since(began))}
	os.RemoveAll(dst)
	return out, nil
}
