package control

import (
	"context"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/zeish/zeish/api"
	"github.com/zeish/zeish/errdefs"
	"github.com/zeish/zeish/internal/catalog"
	"github.com/zeish/zeish/internal/store"
	"github.com/zeish/zeish/sandbox"
)

// Create makes a sandbox of the caller's account from req (docs/sandboxes.md):
// the request becomes a record (newRecord), the account's quotas admit it,
// and the node records it and boots it in the background.
func (c *Control) Create(ctx context.Context, who Caller, req api.CreateSandboxRequest) (sandbox.Sandbox, error) {
	r, err := c.newRecord(ctx, who, req)
	if err != nil {
		return sandbox.Sandbox{}, err
	}
	made, err := c.create(ctx, r)
	if err != nil {
		return sandbox.Sandbox{}, err
	}
	return c.view(made), nil
}

// create admits one create (a free name, a running slot, the rate, the
// daily cap) and has the node make r.
func (c *Control) create(ctx context.Context, r *store.SandboxRecord) (*store.SandboxRecord, error) {
	if err := c.namesFree(ctx, r.AccountID, []*store.SandboxRecord{r}); err != nil {
		return nil, err
	}
	if r.ID == "" {
		r.ID = sandbox.NewID(sandbox.PrefixSandbox) // the quota hold names it
	}
	done, err := c.quotas.admit(ctx, r.AccountID, []string{r.ID}, true, "")
	if err != nil {
		return nil, err
	}
	made, err := c.node.Create(ctx, r)
	if err != nil {
		done(0)
		return nil, err
	}
	done(1)
	return made, nil
}

// Limits of a sandbox's maps.
const (
	maxEnvVars     = 128
	maxMetadata    = 64
	maxValueLength = 4096
)

var (
	envName     = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,127}$`)
	metadataKey = regexp.MustCompile(`^[A-Za-z0-9_.\-/]{1,128}$`)
)

// CheckEnv checks the environment variables of a sandbox or an exec.
func CheckEnv(env map[string]string) error { return checkVars("env", env, maxEnvVars, envName) }

func checkVars(field string, m map[string]string, max int, keyPattern *regexp.Regexp) error {
	if len(m) > max {
		return invalid("%s: at most %d entries", field, max)
	}
	for k, v := range m {
		if !keyPattern.MatchString(k) {
			return invalid("%s: %q is not a valid name", field, k)
		}
		if len(v) > maxValueLength || strings.ContainsRune(v, 0) {
			return invalid("%s: value of %q is too long or holds a NUL byte", field, k)
		}
	}
	return nil
}

// newRecord validates a create request and turns it into a record for the
// node: the template it means (and whether it is ready and carries the
// features asked for), the name, size, region and placement, the maps, git,
// network and timeout.
func (c *Control) newRecord(ctx context.Context, who Caller, req api.CreateSandboxRequest) (*store.SandboxRecord, error) {
	tpl, err := c.createTemplate(ctx, who, req)
	if err != nil {
		return nil, err
	}
	if req.Name != "" {
		if err := sandbox.CheckName(req.Name); err != nil {
			return nil, err
		}
	}
	size, err := sandbox.ResolveSize(req.Size, req.VCPUs, req.MemoryMiB, req.DiskMiB)
	if err != nil {
		return nil, err
	}
	if err := checkTemplateDisk(size.DiskMiB, tpl); err != nil {
		return nil, err
	}
	if err := c.checkRegion(ctx, req.Region); err != nil {
		return nil, err
	}
	for _, m := range []struct {
		field string
		vars  map[string]string
		max   int
		key   *regexp.Regexp
	}{{"env", req.Env, maxEnvVars, envName}, {"secrets", req.Secrets, maxEnvVars, envName}, {"metadata", req.Metadata, maxMetadata, metadataKey}} {
		if err := checkVars(m.field, m.vars, m.max, m.key); err != nil {
			return nil, err
		}
	}
	if err := c.checkNodeWants(req.Accel, req.NodeLabels); err != nil {
		return nil, err
	}
	if req.MaxCostMicros < 0 {
		return nil, invalid("max_cost_micros must not be negative")
	}
	var git sandbox.Sandbox
	if err := sandbox.ResolveGit(&git, sandbox.GitRequest{Repo: req.GitRepo, Branch: req.GitBranch, PRNumber: req.PRNumber,
		Path: req.GitPath, PRRef: req.GitPRRef, TokenSecret: req.GitTokenSecret, Secrets: req.Secrets}); err != nil {
		return nil, err
	}
	if git.GitRepo != "" && !catalog.HasGit(tpl) {
		return nil, fmt.Errorf("template %q has no git; git_repo needs the %s template: %w", tpl.Name, catalog.DebianName, errdefs.ErrTemplateNoGit)
	}
	netw, err := networkOf(req.Network)
	if err != nil {
		return nil, err
	}
	timeoutAt, onTimeout, err := resolveTimeout(req.TimeoutSeconds, req.OnTimeout, time.Now())
	if err != nil {
		return nil, err
	}
	if timeoutAt != nil && onTimeout == "" {
		onTimeout = sandbox.OnTimeoutDelete
	}
	return &store.SandboxRecord{
		Sandbox: sandbox.Sandbox{
			Network:   netw,
			Region:    req.Region,                                          // where to place it; the node sets its own
			AccountID: who.Account.ID, Name: req.Name, Template: tpl.Key(), // the node boots from the key; names are per account
			VCPUs: size.VCPUs, MemoryMiB: size.MemoryMiB, DiskMiB: size.DiskMiB,
			Env: req.Env, GitRepo: git.GitRepo, GitBranch: git.GitBranch, PRNumber: git.PRNumber,
			GitPath: git.GitPath, GitPRRef: git.GitPRRef, GitTokenSecret: git.GitTokenSecret,
			MaxCostMicros: req.MaxCostMicros, Browser: req.Browser, Desktop: req.Desktop, Metadata: req.Metadata,
			TimeoutAt: timeoutAt, OnTimeout: onTimeout,
			// What the node must have; the node then sets the accel it has.
			Accel: req.Accel, NodeLabels: req.NodeLabels,
		},
		SecretEnv: req.Secrets,
	}, nil
}

// createTemplate is the template a create names (the default when none):
// ready, and carrying the browser or desktop the create asks for.
func (c *Control) createTemplate(ctx context.Context, who Caller, req api.CreateSandboxRequest) (sandbox.Template, error) {
	name := req.Template
	if name == "" {
		name = c.catalog.Default()
	}
	tpl, err := c.catalog.Resolve(ctx, who.Account.ID, name)
	if err != nil {
		return tpl, fmt.Errorf("template %q does not exist: %w", name, errdefs.ErrUnknownTemplate)
	}
	if !tpl.Builtin && tpl.State != sandbox.TemplateReady {
		return tpl, fmt.Errorf("template %q is %s, not ready: %w", name, tpl.State, errdefs.ErrInvalidState)
	}
	return tpl, c.catalog.RequireFeatures(ctx, who.Account.ID, tpl, sandbox.WantedFeatures(req.Browser, req.Desktop))
}

// checkTemplateDisk refuses a sandbox disk smaller than its template's root
// file system before anything is made: the guest cannot shrink an ext4
// below what the template holds, so the boot would fail later (boot_failed).
func checkTemplateDisk(diskMiB int, tpl sandbox.Template) error {
	if diskMiB < tpl.DiskMiB {
		return fmt.Errorf("disk_mib %d is smaller than template %s's disk (%d MiB); ask for at least %d: %w",
			diskMiB, tpl.Name, tpl.DiskMiB, tpl.DiskMiB, errdefs.ErrDiskTooSmall)
	}
	return nil
}

// regionChecker is a Node of many regions (the cluster's Router).
type regionChecker interface {
	HasRegion(ctx context.Context, region string) (bool, error)
}

// checkNodeWants refuses what no node can have: an accelerator other than
// kvm or tcg, node labels on a single zeishd (its one node has none).
func (c *Control) checkNodeWants(accel string, labels map[string]string) error {
	if accel != "" && accel != "kvm" && accel != "tcg" {
		return fmt.Errorf("accel %q: want kvm or tcg: %w", accel, errdefs.ErrInvalidAccel)
	}
	if err := checkVars("node_labels", labels, maxMetadata, metadataKey); err != nil {
		return err
	}
	if _, cluster := c.node.(regionChecker); cluster || len(labels) == 0 {
		return nil
	}
	return fmt.Errorf("node_labels %v: this zeishd is one node without labels (labels are ZEISH_NODE_LABELS of a cluster's node agents): %w", labels, errdefs.ErrNodeFull)
}

// checkRegion refuses a region no node serves.
func (c *Control) checkRegion(ctx context.Context, region string) error {
	if region == "" {
		return nil
	}
	if rc, ok := c.node.(regionChecker); ok {
		has, err := rc.HasRegion(ctx, region)
		if err != nil {
			return storeErr(err)
		}
		if !has {
			return invalid("region %q: no node serves it", region)
		}
		return nil
	}
	if region != c.node.Region() {
		return invalid("region %q: no node serves it (this server has %q)", region, c.node.Region())
	}
	return nil
}

// networkOf validates the network part of a create or fork (nil: none given).
func networkOf(req *api.NetworkRequest) (*sandbox.Network, error) {
	if req == nil {
		return nil, nil
	}
	n := sandbox.Network{Enabled: req.Enabled == nil || *req.Enabled, Egress: req.Egress, Allow: req.Allow, Deny: req.Deny,
		RateBytes: req.RateBytes, RatePackets: req.RatePackets}
	n, err := n.Normalize()
	if err != nil {
		return nil, invalid("%v", err)
	}
	return &n, nil
}

// maxTimeout bounds a sandbox's timeout: a lifetime, not a budget (that is
// max_cost_micros).
const maxTimeout = 30 * 24 * time.Hour

// resolveTimeout validates a timeout and its action: a deadline (nil for none)
// and the action, "" when none was asked for.
func resolveTimeout(seconds int, action string, now time.Time) (*time.Time, string, error) {
	if seconds < 0 || time.Duration(seconds)*time.Second > maxTimeout {
		return nil, "", invalid("timeout_seconds must be within 0..%d", int(maxTimeout.Seconds()))
	}
	if action != "" && !slices.Contains(sandbox.TimeoutActions, action) {
		return nil, "", invalid("on_timeout %q must be one of %v", action, sandbox.TimeoutActions)
	}
	if seconds == 0 {
		return nil, action, nil
	}
	at := now.Add(time.Duration(seconds) * time.Second).UTC().Truncate(time.Millisecond)
	return &at, action, nil
}

func invalid(format string, args ...any) error {
	return fmt.Errorf(format+": %w", append(args, errdefs.ErrInvalidArgument)...)
}
