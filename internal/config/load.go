package config

import (
	"errors"
	"fmt"
	"math"
	"net/netip"
	"os"
	"reflect"
	"strconv"
	"strings"
	"time"

	"github.com/zeish/zeish/guest/desktop"
	"github.com/zeish/zeish/sandbox"
)

// Host is what the defaults that depend on the machine are made of.
type Host struct {
	Root      bool   // zeishd runs as root: VMMs confined and guests networked by default
	DataDir   string // the data dir when ZEISH_DATA_DIR is unset
	MemoryMiB int    // the host's RAM, for the default memory budget
}

// Set reports whether the environment gave variable name (a default was
// not taken).
func (c *Config) Set(name string) bool { return c.set[name] }

// FromEnvironment is Load on this process's environment.
func FromEnvironment(args []string, host Host) (*Config, error) {
	return Load(args, os.LookupEnv, host)
}

// Load reads zeishd's configuration from its arguments (a first argument
// that is not a flag names the role) and the environment (lookup, e.g.
// os.LookupEnv), and checks it whole: the error names every variable
// whose value is bad, and what it wants.
func Load(args []string, lookup func(string) (string, bool), host Host) (*Config, error) {
	l := &Config{set: map[string]bool{}}
	var errs []error
	v := reflect.ValueOf(l).Elem()
	for _, f := range reflect.VisibleFields(v.Type()) {
		name := f.Tag.Get("env")
		if name == "" {
			continue
		}
		raw, ok := lookup(name)
		if ok && raw != "" {
			l.set[name] = true
		} else {
			raw = f.Tag.Get("default")
		}
		if raw == "" {
			continue
		}
		if err := setField(v.FieldByIndex(f.Index), f.Tag, raw); err != nil {
			errs = append(errs, fmt.Errorf("%s=%q: %s", name, raw, err))
		}
	}
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		l.Role = args[0]
		if err := checkEnum("all,control,node", l.Role); err != nil {
			errs = append(errs, fmt.Errorf("role %q (the first argument): %s", l.Role, err))
		}
	}
	l.defaults(host)
	errs = append(errs, l.check()...)
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return l, nil
}

// defaults fills what the host or the role decides when the environment
// does not.
func (l *Config) defaults(host Host) {
	if !l.Set("ZEISH_DATA_DIR") {
		l.DataDir = host.DataDir
	}
	if !l.Set("ZEISH_LISTEN") {
		l.Listen = "127.0.0.1:7420"
		if l.Role == RoleNode {
			l.Listen = "127.0.0.1:7421"
		}
	}
	// As root, VMMs run confined (unprivileged user, chroot, cgroup), like
	// Firecracker's jailer; guests get a network only as root (TAPs and
	// nftables need it).
	if !l.Set("ZEISH_CONFINE") {
		l.Confine = host.Root
	}
	if !l.Set("ZEISH_NET") {
		l.Net = host.Root
	}
	// The host keeps max(2 GiB, 10 %) for itself and the VMMs' own memory.
	if !l.Set("ZEISH_MEMORY_BUDGET_MIB") {
		l.MemoryBudgetMiB = max(0, host.MemoryMiB-max(2048, host.MemoryMiB/10))
	}
}

// check applies the rules the tags cannot say.
func (l *Config) check() []error {
	var errs []error
	bad := func(name, format string, args ...any) {
		errs = append(errs, fmt.Errorf("%s: %s", name, fmt.Sprintf(format, args...)))
	}
	if u := l.DatabaseURL; u != "" && !strings.HasPrefix(u, "postgres://") && !strings.HasPrefix(u, "postgresql://") {
		bad("ZEISH_DATABASE_URL", "want postgres://… (or unset for SQLite in the data dir)")
	}
	if l.Role == RoleControl && l.DatabaseURL == "" {
		bad("ZEISH_DATABASE_URL", "a control plane's replicas share one PostgreSQL database (postgres://…)")
	}
	if (l.TLSCert == "") != (l.TLSKey == "") {
		bad("ZEISH_TLS_CERT and ZEISH_TLS_KEY", "set both (PEM files: the certificate chain and its key) or neither")
	}
	if l.Role == RoleNode && len(l.ControlURL) == 0 {
		bad("ZEISH_CONTROL_URL", "the control plane's address (https://host:port; replicas comma-separated)")
	}
	for _, r := range l.RegistryAllowRanges {
		if _, err := netip.ParsePrefix(r); err != nil {
			bad("ZEISH_REGISTRY_ALLOW_RANGES", "%q: want CIDRs (10.0.0.0/8, fd00::/8), comma-separated", r)
		}
	}
	var err error
	if l.Desktop, err = desktop.ParseSize(l.DesktopSize); err != nil {
		bad("ZEISH_DESKTOP_SIZE", "%v", err)
	}
	for _, r := range []struct {
		name string
		v    int64
		min  int64
	}{{"ZEISH_NET_RATE_BYTES", l.NetRateBytes, sandbox.MinRateBytes}, {"ZEISH_NET_RATE_PACKETS", l.NetRatePackets, 1}} {
		if r.v > sandbox.MaxRate || (r.v > 0 && r.v < r.min) {
			bad(r.name, "%d: want a rate per second, 0 (uncapped) or %d to %d", r.v, r.min, int64(sandbox.MaxRate))
		}
	}
	return errs
}

var durationType = reflect.TypeOf(time.Duration(0))

// setField parses raw into field as its type and tags say.
func setField(field reflect.Value, tag reflect.StructTag, raw string) error {
	switch {
	case field.Type() == durationType:
		d, err := time.ParseDuration(raw)
		if err != nil {
			return fmt.Errorf("want a duration such as 90s or 10m")
		}
		if min := tag.Get("min"); min != "" && d < mustDuration(min) {
			return fmt.Errorf("want a duration of %s or more", min)
		}
		field.SetInt(int64(d))
	case field.Kind() == reflect.String:
		if err := checkEnum(tag.Get("enum"), raw); err != nil {
			return err
		}
		field.SetString(raw)
	case field.Kind() == reflect.Bool:
		switch raw {
		case "on":
			field.SetBool(true)
		case "off":
			field.SetBool(false)
		default:
			return fmt.Errorf("want on or off")
		}
	case field.Kind() == reflect.Int || field.Kind() == reflect.Int64:
		n, err := strconv.ParseInt(raw, 10, 64)
		if err != nil {
			return fmt.Errorf("want a whole number%s", bounds(tag))
		}
		if err := inBounds(float64(n), tag, "a whole number"); err != nil {
			return err
		}
		field.SetInt(n)
	case field.Kind() == reflect.Float64:
		x, err := strconv.ParseFloat(raw, 64)
		if err != nil || math.IsNaN(x) || math.IsInf(x, 0) {
			return fmt.Errorf("want a number%s", bounds(tag))
		}
		if err := inBounds(x, tag, "a number"); err != nil {
			return err
		}
		field.SetFloat(x)
	case field.Kind() == reflect.Slice && field.Type().Elem().Kind() == reflect.String:
		field.Set(reflect.ValueOf(list(raw)))
	case field.Kind() == reflect.Map:
		m, err := pairs(raw)
		if err != nil {
			return err
		}
		field.Set(reflect.ValueOf(m))
	default:
		panic(fmt.Sprintf("config: no parser for %s", field.Type()))
	}
	return nil
}

func checkEnum(enum, raw string) error {
	if enum == "" {
		return nil
	}
	for _, e := range strings.Split(enum, ",") {
		if raw == e {
			return nil
		}
	}
	return fmt.Errorf("want %s", strings.Join(strings.Split(enum, ","), ", "))
}

func bounds(tag reflect.StructTag) string {
	min, max := tag.Get("min"), tag.Get("max")
	switch {
	case min != "" && max != "":
		return " within " + min + ".." + max
	case min != "":
		return ", " + min + " or more"
	case max != "":
		return ", " + max + " or less"
	}
	return ""
}

func inBounds(x float64, tag reflect.StructTag, what string) error {
	min, max := tag.Get("min"), tag.Get("max")
	if min != "" && x < mustFloat(min) || max != "" && x > mustFloat(max) {
		return fmt.Errorf("want %s%s", what, bounds(tag))
	}
	return nil
}

// Tags are the package's own constants: a bad one is a bug, found by the
// tests (every field is parsed with its default there).
func mustFloat(s string) float64 {
	x, err := strconv.ParseFloat(s, 64)
	if err != nil {
		panic("config: bad bound " + s)
	}
	return x
}

func mustDuration(s string) time.Duration {
	d, err := time.ParseDuration(s)
	if err != nil {
		panic("config: bad bound " + s)
	}
	return d
}

// list splits a comma-separated value, dropping empty items.
func list(v string) []string {
	var out []string
	for _, s := range strings.Split(v, ",") {
		if s = strings.TrimSpace(s); s != "" {
			out = append(out, s)
		}
	}
	return out
}

// pairs parses key=value,key=value.
func pairs(v string) (map[string]string, error) {
	out := map[string]string{}
	for _, kv := range list(v) {
		k, val, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return nil, fmt.Errorf("%q is not key=value", kv)
		}
		out[k] = val
	}
	return out, nil
}
