// Package config is zeishd's configuration: every ZEISH_* variable, its
// default and what it does, read and checked once at start (Load). A bad
// value stops zeishd with a message naming the variable; nothing else in
// zeishd reads the environment (a test keeps it so).
//
// The Config struct below is the one source: each field's env tag names
// its variable, default its default (shown, when set, is how README
// writes a default that depends on the host), roles which zeishd roles
// read it, and its comment is README's description. To add a variable,
// add a field here (checks beyond the tags go in Config.check), then run
// `go generate ./internal/config` to rewrite README's configuration
// table; TestReadmeTable fails until README and this struct agree.
package config

//go:generate go run ./gendoc -readme ../../README.md

import (
	"time"

	"github.com/zeish/zeish/guest/desktop"
)

// Roles of a zeishd process (ZEISH_ROLE, or the first argument).
const (
	RoleAll     = "all"     // the single binary: API, store and the local node
	RoleControl = "control" // a control-plane replica: API and store, sandboxes on node agents
	RoleNode    = "node"    // a node agent: runs VMs, registers with the control plane
)

// Config is zeishd's configuration. Fields are in README's order.
type Config struct {
	// `control`: API and database only; `node`: a node agent (see *Many hosts*); `zeishd join-token`
	// and `zeishd revoke-node ID` are an operator's commands
	//
	// Default: `all` (or the first argument: `zeishd control`, `zeishd node`).
	Role string `env:"ZEISH_ROLE" default:"all" enum:"all,control,node" roles:"all,control,node"`

	// database, keys, sandboxes, templates
	//
	// Default: `/var/lib/zeish` (root), else `~/.local/share/zeish`.
	DataDir string `env:"ZEISH_DATA_DIR" roles:"all,control,node"`

	// API address
	//
	// Default: `127.0.0.1:7420`; a node agent `127.0.0.1:7421`.
	Listen string `env:"ZEISH_LISTEN" roles:"all,control,node"`

	// PEM certificate chain: the listener serves HTTPS (HTTP/1.1 and HTTP/2), in every role; with
	// `ZEISH_TLS_KEY`, both or neither
	TLSCert string `env:"ZEISH_TLS_CERT" roles:"all,control,node"`

	// the PEM key of `ZEISH_TLS_CERT`
	TLSKey string `env:"ZEISH_TLS_KEY" roles:"all,control,node"`

	// `postgres://user@host/db` keeps all state in PostgreSQL (schema migrated at start, once even
	// when replicas start together); required for `control`; a `node` opens no database (node
	// protocol 2.3) and uses it only when its control plane speaks 2.2, warning that it is unused
	// otherwise
	//
	// Default: unset: SQLite `<data dir>/zeish.db`.
	DatabaseURL string `env:"ZEISH_DATABASE_URL" roles:"all,control,node"`

	// base of the data-plane URLs that `/access` returns
	//
	// Default: the address the client connected to (a `Host` header counts only for the console or a
	// loopback name).
	PublicURL string `env:"ZEISH_PUBLIC_URL" roles:"all,control"`

	// CPU virtualisation. Unset: KVM only when a probe boots the guest kernel under `-accel kvm` on
	// the machine type sandboxes use and reaches its banner within 15 s, else TCG with the reason (`no
	// /dev/kvm`, `kvm_pvm module: needs a PVM guest kernel; …`, QEMU's error). The verdict is cached
	// in `<data dir>/accel.json`, keyed by host kernel, loaded KVM modules, QEMU version and guest
	// kernel; `zeishd --accel-probe` runs the probe again and prints it. `tcg` skips the probe; `kvm`
	// makes a failed probe stop zeishd at once with the reason. `/healthz` reports `accel`,
	// `accel_reason` and `accel_probe_ms`, every sandbox its `accel`
	//
	// Default: by probe.
	Accel string `env:"ZEISH_ACCEL" enum:"kvm,tcg" roles:"all,node"`

	// the guest kernel of the built-in template and of the KVM probe (e.g. a PVM-built kernel on a
	// `kvm_pvm` host)
	//
	// Default: newest `/boot/vmlinuz-*-cloud-amd64`.
	Kernel string `env:"ZEISH_KERNEL" roles:"all,node"`

	// the guest agent the base template installs
	//
	// Default: `sandboxd` beside `zeishd`.
	Sandboxd string `env:"ZEISH_SANDBOXD" roles:"all,node"`

	// built templates
	//
	// Default: `<data dir>/templates`.
	TemplateCache string `env:"ZEISH_TEMPLATE_CACHE" roles:"all,node"`

	// template builds from images that run at once (more wait their turn)
	TemplateBuilds int `env:"ZEISH_TEMPLATE_BUILDS" default:"2" min:"1" roles:"all,node"`

	// a template build's deadline from when it gets its slot (open, pull, unpack, disk; a warm
	// build's boot and `ready_cmd` have their own bounds): past it the build ends in `error` with
	// `error_code: build_timeout` and frees its slot
	TemplateBuildTimeout time.Duration `env:"ZEISH_TEMPLATE_BUILD_TIMEOUT" default:"30m" min:"1ns" roles:"all,node"`

	// CIDRs (IPv4 or IPv6, comma-separated) `registry:` builds may reach after all: by default a
	// registry host is refused (`error_code: registry_blocked`) at the guests' blocked ranges
	// (loopback, RFC 1918, CGNAT, link-local, reserved, multicast; IPv6 loopback, unique local,
	// link-local, NAT64, 6to4, …), checked on every address dialled after name resolution
	//
	// Default: none.
	RegistryAllowRanges []string `env:"ZEISH_REGISTRY_ALLOW_RANGES" roles:"all,node"`

	// per account: templates kept (building, ready or failed); one more gets 409
	// `template_quota_reached` before anything is stored; `0`: no cap. These three and the two above
	// are read where builds run (on a cluster: each node agent, for the builds it runs)
	PlanTemplates int `env:"ZEISH_PLAN_TEMPLATES" default:"20" min:"0" roles:"all,node"`

	// per account: MiB of template images (an upload's archive while kept, counted as it streams; a
	// registry image's layers): an upload past what is left is cut with 413 `upload_too_large`, a
	// registry build past it ends with `error_code: template_quota_reached`; `0`: no cap
	PlanTemplateMiB int64 `env:"ZEISH_PLAN_TEMPLATE_MIB" default:"65536" min:"0" roles:"all,node"`

	// per account: template uploads streaming at once (more get 429 `too_many_uploads`); `0`: no cap
	PlanTemplateUploads int `env:"ZEISH_PLAN_TEMPLATE_UPLOADS" default:"2" min:"0" roles:"all,node"`

	// `on` builds the built-in `debian` template in the background at start (mmdebstrap from the
	// host's apt sources; a minute or more the first time, then cached); once built it is the default
	// template
	//
	// Default: `off` (`make run`: `on`).
	DebianTemplate bool `env:"ZEISH_DEBIAN_TEMPLATE" default:"off" roles:"all,node"`

	// `on` adds `build-essential` to the `debian` template (a separate cached build)
	DebianBuildEssential bool `env:"ZEISH_DEBIAN_BUILD_ESSENTIAL" default:"off" roles:"all,node"`

	// the screen of sandboxes with `desktop: true` (`WIDTHxHEIGHT[xDEPTH]`; see `docs/desktop.md`)
	DesktopSize string `env:"ZEISH_DESKTOP_SIZE" default:"1280x800x24" roles:"all,node"`

	// `on` builds the built-in `desktop` template in the background at start: `debian` plus Chromium
	// (and its headless shell), Xvfb, openbox, xterm, xdotool, x11vnc, scrot and a font (mmdebstrap;
	// about 9 minutes and 1.2 GB the first time, then cached by its inputs). Its `features` are
	// `browser` and `desktop`: only sandboxes of a template with a feature may ask for it, others get
	// 400 `template_lacks_feature` naming a template that has it
	//
	// Default: `off` (also under `make run`).
	DesktopTemplate bool `env:"ZEISH_DESKTOP_TEMPLATE" default:"off" roles:"all,node"`

	// VM launch to guest-agent answer; past it the create fails and is rolled back
	BootTimeout time.Duration `env:"ZEISH_BOOT_TIMEOUT" default:"3m" min:"1ns" roles:"all,node"`

	// the image store a cluster's nodes share (issue 29), set on the control plane and on every node:
	// `s3://BUCKET/PREFIX?endpoint=URL&region=R` for any S3 API (AWS S3, GCS's S3 API, MinIO, Ceph
	// RGW, SeaweedFS), keys from `AWS_ACCESS_KEY_ID`/`AWS_SECRET_ACCESS_KEY`, the shared credentials
	// file, `&credentials=FILE` or `&credentials=iam`; or `file:///path`. Nodes upload every complete
	// image (snapshots, stopped sandboxes, fork images, templates they built) in the background and
	// fetch what they lack, so starts, restores, snapshot clones, forks with `placement: any` and
	// creates from any template run on any node; the API shows `durable` / `image_durable`. Keys the
	// store refuses, or a missing bucket, stop zeishd at start; a store that cannot be reached is
	// logged and waited for (fetches fail as unavailable, uploads are retried). See docs/images.md
	//
	// Default: unset: images stay on the node that made them.
	ImageStore string `env:"ZEISH_IMAGE_STORE" roles:"all,control,node"`

	// with an image store: how long a node asked to start an image waits for another node's upload
	// of it to finish (a fork's children placed on other nodes wait for the fork's image) before
	// `not_found`
	ImageFetchWait time.Duration `env:"ZEISH_IMAGE_FETCH_WAIT" default:"5m" min:"0s" roles:"all,node"`

	// with an image store: how often the control plane sweeps it (one replica at a time): images no
	// record (snapshot, stopped sandbox, template) and no live node's claim refers to, nor any image
	// those stand on, are deleted once older than `ZEISH_IMAGE_SWEEP_GRACE`, then their chunks. It
	// collects the images of nodes lost for good. See docs/images.md ("Garbage collection")
	ImageSweepEvery time.Duration `env:"ZEISH_IMAGE_SWEEP_EVERY" default:"10m" min:"1s" roles:"all,control"`

	// with an image store: how old an image nothing refers to must be before the sweep deletes it, and
	// how long a node's claim on the images it holds counts without renewal (nodes renew every
	// minute): a node silent that long no longer keeps its images. It covers an upload whose record is
	// not written yet
	ImageSweepGrace time.Duration `env:"ZEISH_IMAGE_SWEEP_GRACE" default:"1h" min:"5m" roles:"all,control"`

	// with an image store: `on` (off by default: at the sizes measured it answers the first exec
	// no sooner; it is for large RAM and a store across a network) starts a VM on an image another node made (a fork child with
	// `placement: any`, a clone, a restore, a start) as soon as its disk layers and device state are
	// here, its RAM served lazily from the store through a FUSE file (pages fetched when the guest
	// touches them, the rest prefetched in the background, then kept in tmpfs); `off` fetches the
	// whole RAM first. Needs root and `/dev/fuse`; without them the node fetches whole and logs why.
	// See docs/images.md
	LazyRAM string `env:"ZEISH_LAZY_RAM" default:"off" enum:"on,off" roles:"all,node"`

	// with an image store: the disk a node gives the templates it fetched (built on other nodes), in
	// `<data>/template-cache`; past it the least recently used that no sandbox of the node stands on
	// go; `0`: no bound
	TemplateCacheMiB int `env:"ZEISH_TEMPLATE_CACHE_MIB" default:"8192" min:"0" roles:"all,node"`

	// guest memory the host may promise: sandboxes that may run plus the RAM images (snapshots, fork
	// bases) keep in `/dev/shm`; beyond it create, fork and start get 409 `node_full`, and without
	// room in `/dev/shm` for the new RAM (+256 MiB) 409 `storage_full`. Check and reservation are one
	// step, so concurrent requests cannot overcommit
	//
	// Default: host RAM − max(2 GiB, 10 %).
	MemoryBudgetMiB int `env:"ZEISH_MEMORY_BUDGET_MIB" min:"0" roles:"all,node"`

	// per account: sandboxes starting, running or paused (409 `running_slots_full`)
	PlanRunningSlots int `env:"ZEISH_PLAN_RUNNING_SLOTS" default:"10" min:"0" roles:"all,control"`

	// per account: creates and forks (a fork of N counts N) per minute (429 `rate_limited`,
	// `Retry-After`)
	PlanCreatesPerMinute int `env:"ZEISH_PLAN_CREATES_PER_MINUTE" default:"30" min:"0" roles:"all,control"`

	// per account and UTC day (429 `daily_cap_reached`)
	PlanDailyCreates int `env:"ZEISH_PLAN_DAILY_CREATES" default:"500" min:"0" roles:"all,control"`

	// per account: guest memory its snapshots and fork images may keep in `/dev/shm` (allocated
	// pages); a snapshot or fork past it gets 409 `limit_reached`; `0`: no cap
	PlanImageRAMMiB int `env:"ZEISH_PLAN_IMAGE_RAM_MIB" default:"16384" min:"0" roles:"all,node"`

	// an image's RAM (snapshot, fork base, warm template) that no VM maps and no operation has used
	// for this long moves from `/dev/shm` to `<data>/images/<id>/mem.cold` (holes kept) and is copied
	// back when a VM starts from it; `0`: images stay in `/dev/shm`
	ColdAfter time.Duration `env:"ZEISH_COLD_AFTER" default:"10m" min:"0s" roles:"all,node"`

	// ready VMs kept per warm template and kind (with a network card, or without for `network:
	// {enabled: false}`) used (built, or created from) within `ZEISH_COLD_AFTER`: launched from the
	// warm image, agent connected, configured and warmed with one exec, for the next create of the
	// warm size to adopt (see *Warm templates*); `0`: none
	ReadyVMs int `env:"ZEISH_READY_VMS" default:"1" min:"0" roles:"all,node"`

	// frozen disk layers a running sandbox may stand on (each capture adds one, and each costs ~1–2 ms
	// of the next capture's pause) before the node merges them, in the background, into one layer over
	// the template's disk and moves the VM onto it without a pause (see docs/fork.md); siblings share
	// a merge; `0`: never merge
	DiskLayers int `env:"ZEISH_DISK_LAYERS" default:"2" min:"0" roles:"all,node"`

	// how QEMU reads and writes the disk files zeishd names (a sandbox's overlay, a capture's next
	// overlay, a merged layer): `auto` uses io_uring where QEMU and the kernel have it (probed at
	// start; each layer's reopen inside a capture's pause costs ~1.05 ms instead of ~1.7 ms through
	// the thread pool), `threads` QEMU's default
	DiskAIO string `env:"ZEISH_DISK_AIO" default:"auto" enum:"auto,threads" roles:"all,node"`

	// micro-dollars per vCPU-second while running
	PriceVCPUSecondMicros float64 `env:"ZEISH_PRICE_VCPU_SECOND_MICROS" default:"14" min:"0" roles:"all,control"`

	// micro-dollars per GiB-second of memory while running
	PriceMemoryGiBSecondMicros float64 `env:"ZEISH_PRICE_MEMORY_GIB_SECOND_MICROS" default:"4.5" min:"0" roles:"all,control"`

	// micro-dollars per GiB-second of the full disk size, create to delete
	PriceDiskGiBSecondMicros float64 `env:"ZEISH_PRICE_DISK_GIB_SECOND_MICROS" default:"0.04" min:"0" roles:"all,control"`

	// `off` runs VMMs unconfined; `on` runs each as `ZEISH_VM_USER`, chrooted into its own VM folder,
	// in a cgroup of its own (memory = guest + 512 MiB, CPU = vCPUs + 1, 1024 tasks)
	//
	// Default: `on` as root.
	Confine bool `env:"ZEISH_CONFINE" roles:"all,node"`

	// `optional` starts confined VMs even where their cgroup limits cannot be set (each failure
	// logged); by default zeishd refuses to start without the memory, cpu and pids controllers and a
	// VM whose limits fail is not started
	Cgroups string `env:"ZEISH_CGROUPS" default:"required" enum:"required,optional" roles:"all,node"`

	// `off` runs QEMU without its seccomp filter (`-sandbox on,obsolete=deny,resourcecontrol=deny`),
	// for a QEMU built without libseccomp
	Seccomp bool `env:"ZEISH_SECCOMP" default:"on" roles:"all,node"`

	// the unprivileged account confined VMMs run as (created if missing)
	VMUser string `env:"ZEISH_VM_USER" default:"zeish-vm" roles:"all,node"`

	// open API connections; more wait unserved. Headers must arrive within 10 s, a control-plane body
	// within 30 s, its response (waits included) within 11 min; idle keep-alive connections close
	// after 2 min. Data-plane streams (guest ports by host name too) and the events feed are exempt,
	// and bounded instead by the data plane's budget per sandbox and per account and its stall limit
	// (`ZEISH_DATA_CALLS_PER_SANDBOX`, `ZEISH_DATA_CALLS_PER_ACCOUNT`, `ZEISH_DATA_IDLE_TIMEOUT`)
	MaxConnections int `env:"ZEISH_MAX_CONNECTIONS" default:"1024" min:"1" roles:"all,control,node"`

	// `debug`, `info`, `warn`, `error`
	LogLevel string `env:"ZEISH_LOG_LEVEL" default:"info" enum:"debug,info,warn,error" roles:"all,control,node"`

	// TCG translation cache per VM in MiB (`0`: QEMU's default); the largest part of an idle VM's own
	// memory
	TCGTBMiB int `env:"ZEISH_TCG_TB_MIB" default:"128" min:"0" roles:"all,node"`

	// TCG translation cache of VMs started from an image instead of booted (fork children, a parent's
	// continuation, restored snapshots, warm creates and their ready VMs). `16` saves ~7–8 MiB per
	// idle fork child (an idle child translates ~24 MiB) at the price of retranslating whatever no
	// longer fits: a warm create on a ready VM then loses what the ready VM translated (create → first
	// exec 581 ms at 16 against 142 ms at 128, quiet host); a setting for dense fleets of idle
	// children, see docs/fork.md "Density"
	//
	// Default: `0` (as `ZEISH_TCG_TB_MIB`).
	TCGCloneTBMiB int `env:"ZEISH_TCG_CLONE_TB_MIB" default:"0" min:"0" roles:"all,node"`

	// `stopped` captures sandboxes whose RAM is an image's the old way (guest stopped for the copy),
	// for comparison
	ForkPromotion string `env:"ZEISH_FORK_PROMOTION" default:"live" enum:"live,stopped" roles:"all,node"`

	// a live capture first allocates the holes of the image its sandbox maps (one
	// `MADV_POPULATE_READ`, ~4× faster than the migration's own page faults) and keeps that image
	// inflated until its last such sandbox is gone; `off` makes it sparse after each capture again
	// (every capture then pays the holes), for comparison
	ForkInflate bool `env:"ZEISH_FORK_INFLATE" default:"on" roles:"all,node"`

	// the most private RAM (pages written since it started from its image) a running child, restored
	// sandbox or parent that ran on may hold to be forked or snapshotted **by its private pages**: its
	// image copied by the kernel while it runs, then a pause that writes those pages over the copy
	// (~1.5 ms per MiB under TCG here) and saves device state without RAM; one that holds more is
	// migrated live into a receiver (see docs/fork.md); `0`: always migrate
	DeltaMaxMiB int `env:"ZEISH_DELTA_MAX_MIB" default:"32" min:"0" roles:"all,node"`

	// `downtime-limit` of a live capture's migration: QEMU stops the guest for the last pass once it
	// expects to send what is left in that long; from the 6th pre-copy pass on it doubles every pass
	// (up to 2 s), so a guest writing memory as fast as it is copied still switches over
	LiveDowntimeMS int `env:"ZEISH_LIVE_DOWNTIME_MS" default:"5" min:"1" roles:"all,node"`

	// a VM that loads an image (fork children, continuations, restores, ready VMs, a live capture's
	// receiver) gets a stub of its kernel (the bzImage's setup sectors) and no initrd: it never boots
	// them, yet QEMU read the real ones at every start and kept the kernel: fork → first exec
	// 0.74–0.95× and 13.4 MiB less memory per such QEMU with the stub (docs/fork.md); `off` gives it
	// the real ones, for comparison
	KernelStub bool `env:"ZEISH_KERNEL_STUB" default:"on" roles:"all,node"`

	// a live capture launches its receiver while the sandbox's next disk layer is made; `serial`
	// launches it after (the way before, for the bench's comparison; docs/fork.md)
	LivePrep string `env:"ZEISH_LIVE_PREP" default:"parallel" enum:"parallel,serial" roles:"all,node"`

	// also route E2B's host names: `api.<domain>`, `49983-<sandbox>.<domain>` (envd) and
	// `<port>-<sandbox>.<domain>` (the guest's port, what `getHost` names; see `docs/e2b.md`)
	//
	// Default: none.
	E2BDomain string `env:"ZEISH_E2B_DOMAIN" roles:"all,control"`

	// `off`: sandboxes get a network card with no way out (QEMU user mode, restricted) and no TAP,
	// route or nft rule is made
	//
	// Default: `on` as root, else `off`.
	Net bool `env:"ZEISH_NET" roles:"all,node"`

	// pool of guest links: one routed /30 per sandbox (gateway `.1` on the host, guest `.2`)
	//
	// Default: the first of 10.213.0.0/16, 10.231.0.0/16, 172.29.0.0/16, … that no host route
	// overlaps.
	NetCIDR string `env:"ZEISH_NET_CIDR" roles:"all,node"`

	// where guest traffic leaves, masqueraded
	//
	// Default: the default route's interface.
	Uplink string `env:"ZEISH_UPLINK" roles:"all,node"`

	// resolvers (`host[:port]`, comma-separated) the node's DNS forwarder asks
	//
	// Default: the nameservers of `/etc/resolv.conf`.
	DNSUpstream []string `env:"ZEISH_DNS_UPSTREAM" roles:"all,node"`

	// private or reserved ranges (CIDRs, comma-separated) guests may reach after all (the tests
	// open `198.18.0.0/15`, their fake internet)
	//
	// Default: none.
	NetAllowRanges []string `env:"ZEISH_NET_ALLOW_RANGES" roles:"all,node"`

	// each sandbox's DNS queries per second to the node's forwarder (burst: one second's worth;
	// `0`: uncapped); the kernel drops the excess
	DNSRate int64 `env:"ZEISH_DNS_RATE" default:"100" min:"0" max:"100000" roles:"all,node"`

	// DNS queries the node's forwarder has upstream at once, for all sandboxes (one sandbox takes at
	// most 8)
	DNSWorkers int `env:"ZEISH_DNS_WORKERS" default:"64" min:"1" max:"4096" roles:"all,node"`

	// each sandbox's cap in bytes per second, each way, and the most one may ask for (`0`: uncapped)
	//
	// Default: `12500000` (100 Mbit/s).
	NetRateBytes int64 `env:"ZEISH_NET_RATE_BYTES" default:"12500000" min:"0" roles:"all,node"`

	// each sandbox's cap in packets per second, each way, and the most one may ask for (`0`: uncapped)
	NetRatePackets int64 `env:"ZEISH_NET_RATE_PACKETS" default:"20000" min:"0" roles:"all,node"`

	// serve guest ports at `<port>-<id>.<domain>` too (`_` in the id written `-`)
	//
	// Default: none.
	PublicDomain string `env:"ZEISH_PUBLIC_DOMAIN" roles:"all,control,node"`

	// data-plane calls, guest-port requests and TCP forwards in flight per sandbox (more: 429
	// `too_many_requests`; `0`: no limit)
	DataCallsPerSandbox int `env:"ZEISH_DATA_CALLS_PER_SANDBOX" default:"32" min:"0" roles:"all,control,node"`

	// the same across an account's sandboxes (more: 429 `account_calls_full`; `0`: no limit)
	DataCallsPerAccount int `env:"ZEISH_DATA_CALLS_PER_ACCOUNT" default:"128" min:"0" roles:"all,control,node"`

	// how long a guest port may take to send a response's headers (then 503 `timeout`; `0`: no
	// limit)
	PortHeaderTimeout time.Duration `env:"ZEISH_PORT_HEADER_TIMEOUT" default:"1m" min:"0s" roles:"all,control,node"`

	// a TCP forward or a WebSocket to a guest port that moves nothing either way for this long is
	// closed, and so is a data-plane stream whose client stops reading or sending (`0`: never)
	DataIdleTimeout time.Duration `env:"ZEISH_DATA_IDLE_TIMEOUT" default:"10m" min:"0s" roles:"all,control,node"`

	// the join token of the node's first start (`zeishd join-token`); not needed once
	// `node.credential` is in its data dir
	//
	// Default: none.
	JoinToken string `env:"ZEISH_JOIN_TOKEN" roles:"node"`

	// a file holding the join token (a mounted secret with one token per host; a missing file is no
	// token)
	//
	// Default: none.
	JoinTokenFile string `env:"ZEISH_JOIN_TOKEN_FILE" roles:"node"`

	// PEM CA bundle the other hosts' certificates are checked against
	//
	// Default: the system's roots.
	ClusterCA string `env:"ZEISH_CLUSTER_CA" roles:"control,node"`

	// `on`: accept `http://` node and control URLs (a private network, tests)
	ClusterAllowHTTP bool `env:"ZEISH_CLUSTER_ALLOW_HTTP" default:"off" roles:"control,node"`

	// silence after which a node's sandboxes are `node_lost`
	NodeLostAfter time.Duration `env:"ZEISH_NODE_LOST_AFTER" default:"30s" min:"1s" roles:"control"`

	// the control plane's address (`https://`); replicas comma-separated (registration and
	// heartbeats go to the next one when one does not answer); required for `node`
	//
	// Default: none.
	ControlURL []string `env:"ZEISH_CONTROL_URL" roles:"node"`

	// the node's id; its credential is bound to it
	//
	// Default: from the host name (kept in `node.id`).
	NodeID string `env:"ZEISH_NODE_ID" roles:"node"`

	// the node's region
	Region string `env:"ZEISH_REGION" default:"local" roles:"all,node"`

	// `key=value,…`
	//
	// Default: none.
	NodeLabels map[string]string `env:"ZEISH_NODE_LABELS" roles:"node"`

	// how the control plane and clients reach the node
	//
	// Default: `https://` (with `ZEISH_TLS_CERT`, else `http://`) + its listen address.
	NodeURL string `env:"ZEISH_NODE_URL" roles:"node"`

	// Desktop is ZEISH_DESKTOP_SIZE, parsed.
	Desktop desktop.Config

	set map[string]bool // the variables the environment gave
}
