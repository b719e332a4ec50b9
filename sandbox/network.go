package sandbox

import (
	"fmt"
	"net/netip"
	"strings"
)

// Egress says where a guest's outbound traffic goes when no rule matches.
type Egress string

const (
	EgressAllow Egress = "allow" // default: everything public, minus Deny
	EgressDeny  Egress = "deny"  // nothing, except Allow
)

// Network is a sandbox's network card and egress policy. A rule is an IPv4
// address or CIDR ("203.0.113.0/24") or a domain: "example.com" matches that
// name only, "*.example.com" any name below it (not the apex). Deny wins over
// Allow. Private, link-local and host addresses stay unreachable whatever the
// rules say (the operator's ZEISH_NET_ALLOW_RANGES aside).
type Network struct {
	Enabled bool     `json:"enabled"`
	Egress  Egress   `json:"egress,omitempty"`
	Allow   []string `json:"allow"`
	Deny    []string `json:"deny"`
	// RateBytes and RatePackets cap the guest's routed traffic, each way on
	// its own (bytes and packets per second). 0 at create: the node's
	// default (ZEISH_NET_RATE_BYTES, ZEISH_NET_RATE_PACKETS), which is also
	// the most a sandbox may ask for; the sandbox then shows what applies.
	RateBytes   int64 `json:"rate_bytes_per_second,omitempty"`
	RatePackets int64 `json:"rate_packets_per_second,omitempty"`
}

// Limits on a policy, so one sandbox cannot grow the host's ruleset unboundedly.
const (
	MaxNetworkRules = 256
	maxDomainLen    = 253
	// MaxRate bounds a rate so its burst fits the kernel's 32 bits;
	// MinRateBytes keeps a cap above what a single full-size packet needs.
	MaxRate      = 1 << 34
	MinRateBytes = 16 << 10
)

// Rule is one parsed entry of Allow or Deny: exactly one of Prefix or Domain.
type Rule struct {
	Prefix netip.Prefix
	// Domain is lower case without a trailing dot; Wildcard: it stands for
	// the names below it ("*.Domain").
	Domain   string
	Wildcard bool
}

// Matches reports whether a domain rule covers name (lower case, no trailing dot).
func (r Rule) Matches(name string) bool {
	if r.Domain == "" {
		return false
	}
	if r.Wildcard {
		return strings.HasSuffix(name, "."+r.Domain)
	}
	return name == r.Domain
}

// ParseRule parses one Allow or Deny entry.
func ParseRule(s string) (Rule, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return Rule{}, fmt.Errorf("empty rule")
	}
	if p, err := parsePrefix(s); err == nil {
		return Rule{Prefix: p}, nil
	} else if strings.IndexFunc(s, func(c rune) bool { return c == '/' || c == ':' }) >= 0 || isDottedNumbers(s) {
		return Rule{}, err
	}
	name := strings.TrimSuffix(strings.ToLower(s), ".")
	wild := strings.HasPrefix(name, "*.")
	if wild {
		name = name[2:]
	}
	if err := checkDomain(name); err != nil {
		return Rule{}, fmt.Errorf("%q: %w", s, err)
	}
	if wild && !strings.Contains(name, ".") {
		return Rule{}, fmt.Errorf("%q: a wildcard needs a domain of two labels or more below it", s)
	}
	return Rule{Domain: name, Wildcard: wild}, nil
}

// parsePrefix accepts an IPv4 address or CIDR; the network is masked ("10.1.2.3/8" is 10.0.0.0/8).
func parsePrefix(s string) (netip.Prefix, error) {
	if !strings.Contains(s, "/") {
		a, err := netip.ParseAddr(s)
		if err != nil {
			return netip.Prefix{}, fmt.Errorf("%q: not an address: %v", s, err)
		}
		if !a.Is4() {
			return netip.Prefix{}, fmt.Errorf("%q: only IPv4 addresses are supported", s)
		}
		return netip.PrefixFrom(a, 32), nil
	}
	p, err := netip.ParsePrefix(s)
	if err != nil {
		return netip.Prefix{}, fmt.Errorf("%q: not a CIDR: %v", s, err)
	}
	if !p.Addr().Is4() {
		return netip.Prefix{}, fmt.Errorf("%q: only IPv4 ranges are supported", s)
	}
	return p.Masked(), nil
}

func isDottedNumbers(s string) bool {
	return strings.Trim(s, "0123456789.") == ""
}

// checkDomain accepts letters, digits and hyphens in labels of 1–63
// characters; "*" anywhere is refused (ParseRule took the one legal form off).
func checkDomain(name string) error {
	if name == "" || len(name) > maxDomainLen {
		return fmt.Errorf("not a domain name")
	}
	for _, label := range strings.Split(name, ".") {
		if label == "" || len(label) > 63 {
			return fmt.Errorf("empty or too long label")
		}
		if strings.Contains(label, "*") {
			return fmt.Errorf("a wildcard may only be the whole first label (*.example.com)")
		}
		if label[0] == '-' || label[len(label)-1] == '-' {
			return fmt.Errorf("a label may not begin or end with a hyphen")
		}
		for _, c := range label {
			if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
				return fmt.Errorf("character %q is not allowed in a domain", c)
			}
		}
	}
	return nil
}

// Normalize validates n and returns it in canonical form: egress defaulted,
// rules parsed and written back canonically (masked CIDRs, lower-case
// domains), duplicates dropped.
func (n Network) Normalize() (Network, error) {
	switch n.Egress {
	case "":
		n.Egress = EgressAllow
	case EgressAllow, EgressDeny:
	default:
		return n, fmt.Errorf("network.egress %q: want allow or deny", n.Egress)
	}
	if len(n.Allow)+len(n.Deny) > MaxNetworkRules {
		return n, fmt.Errorf("network: at most %d rules", MaxNetworkRules)
	}
	var err error
	if n.Allow, err = canonicalRules("allow", n.Allow); err != nil {
		return n, err
	}
	if n.Deny, err = canonicalRules("deny", n.Deny); err != nil {
		return n, err
	}
	if !n.Enabled && (len(n.Allow) > 0 || len(n.Deny) > 0 || n.Egress == EgressDeny) {
		return n, fmt.Errorf("network: rules need enabled: true")
	}
	if n.RateBytes < 0 || n.RatePackets < 0 || n.RateBytes > MaxRate || n.RatePackets > MaxRate {
		return n, fmt.Errorf("network: rates are per second, 0 (the node's default) up to %d", int64(MaxRate))
	}
	if n.RateBytes > 0 && n.RateBytes < MinRateBytes {
		return n, fmt.Errorf("network.rate_bytes_per_second: at least %d", MinRateBytes)
	}
	if !n.Enabled && (n.RateBytes > 0 || n.RatePackets > 0) {
		return n, fmt.Errorf("network: rates need enabled: true")
	}
	return n, nil
}

func canonicalRules(field string, in []string) ([]string, error) {
	out := []string{}
	seen := map[string]bool{}
	for _, s := range in {
		r, err := ParseRule(s)
		if err != nil {
			return nil, fmt.Errorf("network.%s: %w", field, err)
		}
		c := r.String()
		if !seen[c] {
			seen[c] = true
			out = append(out, c)
		}
	}
	return out, nil
}

func (r Rule) String() string {
	switch {
	case r.Domain != "" && r.Wildcard:
		return "*." + r.Domain
	case r.Domain != "":
		return r.Domain
	case r.Prefix.Bits() == 32:
		return r.Prefix.Addr().String()
	}
	return r.Prefix.String()
}

// Rules parses a normalized list (it cannot fail then; bad entries are skipped).
func Rules(list []string) []Rule {
	out := make([]Rule, 0, len(list))
	for _, s := range list {
		if r, err := ParseRule(s); err == nil {
			out = append(out, r)
		}
	}
	return out
}

// NetworkChange is a live change of a sandbox's network (PATCH
// …/network): each field given replaces the sandbox's; nil keeps it.
type NetworkChange struct {
	Egress      Egress // "": unchanged
	Allow, Deny []string
	RateBytes   *int64
	RatePackets *int64
}

// Apply returns cur changed by ch, normalised (docs/network.md: a change is
// validated whole before anything changes). A sandbox without a policy
// yet gets one: a change turns nothing off.
func (ch NetworkChange) Apply(cur *Network) (Network, error) {
	var next Network
	if cur != nil {
		next = *cur
		next.Allow = append([]string(nil), cur.Allow...)
		next.Deny = append([]string(nil), cur.Deny...)
	}
	next.Enabled = true
	if ch.Egress != "" {
		next.Egress = ch.Egress
	}
	if ch.Allow != nil {
		next.Allow = ch.Allow
	}
	if ch.Deny != nil {
		next.Deny = ch.Deny
	}
	if ch.RateBytes != nil {
		next.RateBytes = *ch.RateBytes
	}
	if ch.RatePackets != nil {
		next.RatePackets = *ch.RatePackets
	}
	return next.Normalize()
}
