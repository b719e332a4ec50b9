package config

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/zeish/zeish/internal/config/doctable"
	"github.com/zeish/zeish/internal/control"
	"github.com/zeish/zeish/internal/metering"
	"github.com/zeish/zeish/internal/network"
	"github.com/zeish/zeish/internal/server"
)

var testHost = Host{Root: false, DataDir: "/home/u/.local/share/zeish", MemoryMiB: 24 << 10}

func env(kv ...string) func(string) (string, bool) {
	m := map[string]string{}
	for _, x := range kv {
		k, v, _ := strings.Cut(x, "=")
		m[k] = v
	}
	return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
}

// README's configuration table is made from Config; this fails when a
// variable was added, changed or documented in one and not the other.
func TestReadmeTable(t *testing.T) {
	vars, err := doctable.Read("config.go")
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	want, err := doctable.Replace(string(b), doctable.Markdown(vars))
	if err != nil {
		t.Fatal(err)
	}
	if want != string(b) {
		t.Fatal("README's configuration table and internal/config/config.go differ: run go generate ./internal/config")
	}
	seen := map[string]bool{}
	for _, v := range vars {
		if seen[v.Name] || !strings.HasPrefix(v.Name, "ZEISH_") || v.Doc == "" || v.Roles == "" {
			t.Errorf("%s: a duplicate, not ZEISH_*, or without a description or roles", v.Name)
		}
		seen[v.Name] = true
		for _, r := range strings.Split(v.Roles, ", ") {
			if !slices.Contains([]string{RoleAll, RoleControl, RoleNode}, r) {
				t.Errorf("%s: role %q", v.Name, r)
			}
		}
	}
}

func TestDefaults(t *testing.T) {
	c, err := Load(nil, env(), testHost)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]any{
		"Role": "all", "DataDir": testHost.DataDir, "Listen": "127.0.0.1:7420", "BootTimeout": 3 * time.Minute,
		"MemoryBudgetMiB": 24<<10 - 2457, "Confine": false, "Net": false, "Seccomp": true, "TCGTBMiB": 128,
		"PlanRunningSlots": 10, "PlanCreatesPerMinute": 30, "PlanDailyCreates": 500, "PriceMemoryGiBSecondMicros": 4.5,
		"NetRateBytes": int64(12_500_000), "NodeLostAfter": 30 * time.Second, "Region": "local", "VMUser": "zeish-vm",
		"DiskAIO": "auto", "LogLevel": "info", "DeltaMaxMiB": 32, "KernelStub": true, "Accel": "",
	}
	v := reflect.ValueOf(c).Elem()
	for field, w := range want {
		if got := v.FieldByName(field).Interface(); !reflect.DeepEqual(got, w) {
			t.Errorf("%s = %v, want %v", field, got, w)
		}
	}
	plan := control.Plan{RunningSlots: c.PlanRunningSlots, CreatesPerMinute: c.PlanCreatesPerMinute, DailyCreates: c.PlanDailyCreates}
	prices := metering.Prices{VCPUSecond: c.PriceVCPUSecondMicros, MemoryGiBSecond: c.PriceMemoryGiBSecondMicros, DiskGiBSecond: c.PriceDiskGiBSecondMicros}
	if c.MaxConnections != server.DefaultLimits.MaxConns {
		t.Errorf("ZEISH_MAX_CONNECTIONS %d: not the server's default", c.MaxConnections)
	}
	if calls := (control.CallLimits{PerSandbox: c.DataCallsPerSandbox, PerAccount: c.DataCallsPerAccount}); calls != control.DefaultCalls {
		t.Errorf("data-plane calls %+v: not control's defaults", calls)
	}
	if dp := (server.DataPlaneLimits{PortHeaders: c.PortHeaderTimeout, Idle: c.DataIdleTimeout}); dp != server.DefaultDataPlane {
		t.Errorf("data-plane limits %+v: not the server's defaults", dp)
	}
	if c.DNSRate != network.DefaultDNSRate || c.DNSWorkers != network.DefaultDNSWorkers {
		t.Errorf("DNS limits %d, %d: not network's defaults", c.DNSRate, c.DNSWorkers)
	}
	if plan != control.DefaultPlan || prices != metering.DefaultPrices {
		t.Errorf("plan %+v, prices %+v: not the defaults of control and metering", plan, prices)
	}
	if c.Desktop.Width != 1280 || c.Set("ZEISH_ROLE") {
		t.Errorf("desktop %+v, role set %v", c.Desktop, c.Set("ZEISH_ROLE"))
	}
	// Defaults that follow the host and the role.
	root, err := Load([]string{"node"}, env("ZEISH_DATABASE_URL=postgres://db/z",
		"ZEISH_CONTROL_URL=http://a:1, http://b:2,"), Host{Root: true, DataDir: "/var/lib/zeish", MemoryMiB: 1024})
	if err != nil {
		t.Fatal(err)
	}
	if !root.Confine || !root.Net || root.Listen != "127.0.0.1:7421" || root.MemoryBudgetMiB != 0 || root.Role != RoleNode ||
		!slices.Equal(root.ControlURL, []string{"http://a:1", "http://b:2"}) {
		t.Errorf("as root, a node: %+v", root)
	}
}

func TestValues(t *testing.T) {
	c, err := Load(nil, env("ZEISH_CONFINE=off", "ZEISH_NET=on", "ZEISH_COLD_AFTER=0", "ZEISH_NODE_LABELS=disk=ssd,rack=",
		"ZEISH_DNS_UPSTREAM=1.1.1.1, 9.9.9.9:53", "ZEISH_PRICE_DISK_GIB_SECOND_MICROS=0", "ZEISH_MEMORY_BUDGET_MIB=600",
		"ZEISH_NET_RATE_BYTES=0", "ZEISH_LOG_LEVEL="), Host{Root: true})
	if err != nil {
		t.Fatal(err)
	}
	if c.Confine || !c.Net || c.ColdAfter != 0 || !reflect.DeepEqual(c.NodeLabels, map[string]string{"disk": "ssd", "rack": ""}) ||
		!slices.Equal(c.DNSUpstream, []string{"1.1.1.1", "9.9.9.9:53"}) || c.PriceDiskGiBSecondMicros != 0 ||
		c.MemoryBudgetMiB != 600 || c.NetRateBytes != 0 || c.LogLevel != "info" {
		t.Errorf("%+v", c)
	}
}

// A bad value stops zeishd with a message naming the variable and what
// it wants; every bad value is named at once.
func TestBadValues(t *testing.T) {
	cases := []struct {
		args []string
		env  []string
		want string
	}{
		{nil, []string{"ZEISH_ACCEL=hvf"}, `ZEISH_ACCEL="hvf": want kvm, tcg`},
		{nil, []string{"ZEISH_CONFINE=yes"}, `ZEISH_CONFINE="yes": want on or off`},
		{nil, []string{"ZEISH_TCG_TB_MIB=-1"}, `ZEISH_TCG_TB_MIB="-1": want a whole number, 0 or more`},
		{nil, []string{"ZEISH_TEMPLATE_BUILDS=0"}, `ZEISH_TEMPLATE_BUILDS="0": want a whole number, 1 or more`},
		{nil, []string{"ZEISH_READY_VMS=two"}, `ZEISH_READY_VMS="two": want a whole number, 0 or more`},
		{nil, []string{"ZEISH_BOOT_TIMEOUT=3"}, `ZEISH_BOOT_TIMEOUT="3": want a duration`},
		{nil, []string{"ZEISH_NODE_LOST_AFTER=10ms"}, `ZEISH_NODE_LOST_AFTER="10ms": want a duration of 1s or more`},
		{nil, []string{"ZEISH_PRICE_VCPU_SECOND_MICROS=NaN"}, `ZEISH_PRICE_VCPU_SECOND_MICROS="NaN": want a number`},
		{nil, []string{"ZEISH_NODE_LABELS=gpu"}, `ZEISH_NODE_LABELS="gpu": "gpu" is not key=value`},
		{nil, []string{"ZEISH_DESKTOP_SIZE=big"}, `ZEISH_DESKTOP_SIZE: desktop size "big"`},
		{nil, []string{"ZEISH_NET_RATE_BYTES=100"}, `ZEISH_NET_RATE_BYTES: 100: want a rate per second`},
		{nil, []string{"ZEISH_NET_RATE_BYTES=1mb"}, `ZEISH_NET_RATE_BYTES="1mb": want a whole number, 0 or more`},
		{nil, []string{"ZEISH_DNS_RATE=-1"}, `ZEISH_DNS_RATE="-1": want a whole number within 0..100000`},
		{nil, []string{"ZEISH_DNS_RATE=fast"}, `ZEISH_DNS_RATE="fast": want a whole number within 0..100000`},
		{nil, []string{"ZEISH_DNS_WORKERS=0"}, `ZEISH_DNS_WORKERS="0": want a whole number within 1..4096`},
		{nil, []string{"ZEISH_NET_RATE_PACKETS=-5"}, `ZEISH_NET_RATE_PACKETS="-5": want a whole number, 0 or more`},
		{nil, []string{"ZEISH_PRICE_DISK_GIB_SECOND_MICROS=-1"}, `ZEISH_PRICE_DISK_GIB_SECOND_MICROS="-1": want a number, 0 or more`},
		{nil, []string{"ZEISH_PRICE_DISK_GIB_SECOND_MICROS=Inf"}, `ZEISH_PRICE_DISK_GIB_SECOND_MICROS="Inf": want a number`},
		{nil, []string{"ZEISH_DATABASE_URL=mysql://x"}, `ZEISH_DATABASE_URL: want postgres://`},
		{nil, []string{"ZEISH_ROLE=edge"}, `ZEISH_ROLE="edge": want all, control, node`},
		{[]string{"edge"}, nil, `role "edge" (the first argument): want all, control, node`},
		{[]string{"control"}, nil, `ZEISH_DATABASE_URL: a control plane's replicas share`},
		{[]string{"node"}, nil, `ZEISH_CONTROL_URL: the control plane's address`},
		{nil, []string{"ZEISH_TLS_CERT=/etc/zeish/cert.pem"}, `ZEISH_TLS_CERT and ZEISH_TLS_KEY: set both`},
		{nil, []string{"ZEISH_CLUSTER_ALLOW_HTTP=yes"}, `ZEISH_CLUSTER_ALLOW_HTTP="yes": want on or off`},
	}
	for _, c := range cases {
		t.Run(c.want, func(t *testing.T) {
			_, err := Load(c.args, env(c.env...), testHost)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("got %v, want %q", err, c.want)
			}
		})
	}
	_, err := Load(nil, env("ZEISH_LISTEN=:1", "ZEISH_SECCOMP=no", "ZEISH_DISK_LAYERS=x"), testHost)
	if err == nil || !strings.Contains(err.Error(), "ZEISH_SECCOMP") || !strings.Contains(err.Error(), "ZEISH_DISK_LAYERS") {
		t.Fatalf("two bad values: %v", err)
	}
}

// zeishd reads its environment only through this package: every other
// read of a ZEISH_* variable in the module is a client's (the SDK, the
// CLI) or a test helper's.
func TestOnlyConfigReadsTheEnvironment(t *testing.T) {
	allowed := []string{"internal/config/", "internal/testenv/", "internal/testskip/", "internal/cli/", "sdk/", "e2e/", "bench/", "examples/"}
	// Test helper packages (storetest, vmmtest, …) are tests too.
	helper := regexp.MustCompile(`[a-z]+test/[^/]+\.go$`)
	root := "../.."
	err := filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		rel = filepath.ToSlash(rel)
		if d.IsDir() {
			if d.Name() == "node_modules" || strings.HasPrefix(d.Name(), ".") && rel != "." {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(rel, ".go") || strings.HasSuffix(rel, "_test.go") {
			return nil
		}
		for _, a := range allowed {
			if strings.HasPrefix(rel, a) {
				return nil
			}
		}
		if helper.MatchString(rel) {
			return nil
		}
		fs := token.NewFileSet()
		f, err := parser.ParseFile(fs, path, nil, 0)
		if err != nil {
			return err
		}
		// A read of another program's variable (os.Getenv("HOME")) is
		// fine; a ZEISH_ one, or os.Getenv handed on as a function, is not.
		fine := map[token.Pos]bool{}
		ast.Inspect(f, func(n ast.Node) bool {
			if call, ok := n.(*ast.CallExpr); ok && len(call.Args) == 1 {
				if lit, ok := call.Args[0].(*ast.BasicLit); ok {
					if arg, _ := strconv.Unquote(lit.Value); arg != "" && !strings.HasPrefix(arg, "ZEISH_") {
						fine[call.Fun.Pos()] = true
					}
				}
			}
			return true
		})
		ast.Inspect(f, func(n ast.Node) bool {
			sel, ok := n.(*ast.SelectorExpr)
			if !ok || (sel.Sel.Name != "Getenv" && sel.Sel.Name != "LookupEnv") {
				return true
			}
			if x, ok := sel.X.(*ast.Ident); ok && x.Name == "os" && !fine[sel.Pos()] {
				t.Errorf("%s: os.%s: zeishd's settings are read in internal/config", fs.Position(sel.Pos()), sel.Sel.Name)
			}
			return true
		})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
