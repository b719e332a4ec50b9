package catalog

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"

	"github.com/zeish/zeish/errdefs"
	"github.com/zeish/zeish/sandbox"
	"github.com/zeish/zeish/template"
)

// Quota bounds each account's templates; a zero field is no bound.
type Quota struct {
	// Templates is how many templates an account may keep (building,
	// ready or failed; deleted ones do not count).
	Templates int
	// Bytes bounds the image bytes an account's templates hold: an
	// upload's archive while it is kept (counted as it streams), the
	// image's stored layers (layer_bytes) once known.
	Bytes int64
	// Uploads is how many uploads of one account may stream at once.
	Uploads int
}

// quotas counts what the store does not see yet: uploads streaming,
// builds accepted but not recorded, registry images being pulled. On a
// cluster each node counts its own; the store's rows are shared.
type quotas struct {
	Quota
	mu       sync.Mutex
	uploads  map[string]int   // account → uploads streaming
	pending  map[string]int   // account → builds accepted, not yet recorded
	streamed map[string]int64 // account → bytes of uploads streaming
	pulling  map[string]int64 // template id → layer bytes of a registry build in progress
}

func newQuotas(q Quota) *quotas {
	return &quotas{Quota: q, uploads: map[string]int{}, pending: map[string]int{}, streamed: map[string]int64{},
		pulling: map[string]int64{}}
}

// templateBytes is what template t holds against its account's bytes.
func (c *Catalog) templateBytes(t sandbox.Template) int64 {
	if t.State == sandbox.TemplateDeleted {
		return 0
	}
	n := t.LayerBytes
	if t.State == sandbox.TemplateBuilding && c.b != nil {
		if fi, err := os.Stat(filepath.Join(c.b.dir, t.ID, uploadName)); err == nil && fi.Size() > n {
			n = fi.Size()
		}
		c.b.quota.mu.Lock()
		n = max(n, c.b.quota.pulling[t.ID])
		c.b.quota.mu.Unlock()
	}
	return n
}

// usage counts account's templates and their bytes, leaving out the
// template except (a build checking itself).
func (c *Catalog) usage(ctx context.Context, account, except string) (count int, bytes int64, err error) {
	all, err := c.store.ListTemplates(ctx)
	if err != nil {
		return 0, 0, err
	}
	for _, t := range all {
		if t.AccountID != account || t.State == sandbox.TemplateDeleted || t.ID == except {
			continue
		}
		count++
		bytes += c.templateBytes(t)
	}
	return count, bytes, nil
}

// admit checks a new build against the account's quota before anything is
// stored, and holds its place (and, for an upload, an upload slot) until
// release. used is the account's bytes at admission.
func (c *Catalog) admit(ctx context.Context, account string, upload bool) (used int64, release func(), err error) {
	q := c.b.quota
	count, used, err := c.usage(ctx, account, "")
	if err != nil {
		return 0, nil, err
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.Templates > 0 && count+q.pending[account] >= q.Templates {
		return 0, nil, fmt.Errorf("the account has %d templates, as many as its quota allows (ZEISH_PLAN_TEMPLATES=%d): %w",
			count+q.pending[account], q.Templates, errdefs.ErrTemplateQuota)
	}
	if upload && q.Uploads > 0 && q.uploads[account] >= q.Uploads {
		return 0, nil, fmt.Errorf("the account already streams %d uploads (ZEISH_PLAN_TEMPLATE_UPLOADS=%d): %w",
			q.uploads[account], q.Uploads, errdefs.ErrTooManyUploads)
	}
	if upload && q.Bytes > 0 && used+q.streamed[account] >= q.Bytes {
		return 0, nil, fmt.Errorf("the account's templates hold %d MiB, its quota (ZEISH_PLAN_TEMPLATE_MIB=%d): %w",
			(used+q.streamed[account])>>20, q.Bytes>>20, errdefs.ErrTemplateQuota)
	}
	q.pending[account]++
	if upload {
		q.uploads[account]++
	}
	return used, func() {
		q.mu.Lock()
		defer q.mu.Unlock()
		q.pending[account]--
		if upload {
			q.uploads[account]--
		}
	}, nil
}

// quotaReader counts an upload's bytes against its account's quota as they
// stream, and stops the upload once they would pass it.
type quotaReader struct {
	r       io.Reader
	q       *quotas
	account string
	used    int64 // the account's bytes when the upload was admitted
	n       int64
}

func (c *Catalog) countUpload(account string, used int64, r io.Reader) *quotaReader {
	return &quotaReader{r: r, q: c.b.quota, account: account, used: used}
}

func (r *quotaReader) Read(p []byte) (int, error) {
	n, err := r.r.Read(p)
	if n == 0 || r.q.Bytes == 0 {
		return n, err
	}
	r.q.mu.Lock()
	r.q.streamed[r.account] += int64(n)
	r.n += int64(n)
	total := r.used + r.q.streamed[r.account]
	r.q.mu.Unlock()
	if total > r.q.Bytes {
		return n, fmt.Errorf("the upload passes the account's template quota of %d MiB (ZEISH_PLAN_TEMPLATE_MIB; %d MiB held before it): %w",
			r.q.Bytes>>20, r.used>>20, errdefs.ErrUploadTooLarge)
	}
	return n, err
}

// done gives back the bytes counted: the upload is now the template's
// (templateBytes counts its file) or gone.
func (r *quotaReader) done() {
	r.q.mu.Lock()
	r.q.streamed[r.account] -= r.n
	r.n = 0
	r.q.mu.Unlock()
}

// checkImage is a build's look at its image before any layer is read: a
// registry image whose layers would take the account past its bytes quota
// is refused, and one within it is counted while it is pulled.
func (c *Catalog) checkImage(ctx context.Context, t sandbox.Template, src template.Source) func(*template.ImageConfig) error {
	return func(img *template.ImageConfig) error {
		q := c.b.quota
		if src.Transport != template.TransportRegistry || q.Bytes == 0 {
			return nil
		}
		_, used, err := c.usage(ctx, t.AccountID, t.ID)
		if err != nil {
			return err
		}
		q.mu.Lock()
		defer q.mu.Unlock()
		if used+q.streamed[t.AccountID]+img.LayerBytes > q.Bytes {
			return fmt.Errorf("the image's %d MiB of layers would take the account past its template quota of %d MiB (ZEISH_PLAN_TEMPLATE_MIB; %d MiB held): %w",
				img.LayerBytes>>20, q.Bytes>>20, (used+q.streamed[t.AccountID])>>20, errdefs.ErrTemplateQuota)
		}
		q.pulling[t.ID] = img.LayerBytes
		return nil
	}
}

// pulled forgets a registry build's count once its row holds layer_bytes.
func (c *Catalog) pulled(id string) {
	c.b.quota.mu.Lock()
	delete(c.b.quota.pulling, id)
	c.b.quota.mu.Unlock()
}
