package network

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"sync"
	"time"

	"github.com/google/nftables"
	"github.com/google/nftables/binaryutil"
	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"
)

// The ruleset lives in one inet table that nothing else uses; zeishd
// replaces it whole at start (one atomic transaction), so a restart never
// finds rules of an older run. Layout:
//
//	sources (prerouting, before conntrack): from a guest's TAP only its own
//	                   address (its s-N); anything else from a TAP dropped,
//	                   forwarded or to the host alike, before it makes a
//	                   conntrack entry
//	prerouting (nat):  DNS from guests, to any server → that guest's own
//	                   forwarder socket (its n-N)
//	input:             from guests only their forwarder port, under their DNS
//	                   rate (their i-N); everything else to the host dropped
//	forward:           to guests: over their rates dropped (each guest's l-N,
//	                   via to-guests), then only replies; from guests: IPv6 and
//	                   blocked ranges dropped, then each guest's own chain
//	                   (g-N: rates, then policy) decides
//	postrouting (nat): guest addresses masqueraded out of the uplink
//
// Every guest chain ends in an explicit verdict, and a guest without one is
// dropped, so a guest is never let out by a missing rule (e.g. while the
// ruleset is rebuilt after a restart).
const (
	tableName      = "zeish"
	chainGuests    = "guests"
	chainToGuests  = "to-guests"
	chainGuestsIn  = "guests-in"
	chainSourcesOf = "sources-of"
	chainDNSOf     = "dns-of"
)

// priorityRaw runs the sources chain before conntrack (-200), so a spoofed
// packet is dropped before the kernel tracks it.
var priorityRaw = nftables.ChainPriorityRef(-300)

type ruleset struct {
	mu        sync.Mutex // a Conn batches messages until Flush: one batch at a time
	conn      *nftables.Conn
	table     *nftables.Table
	guests    *nftables.Chain
	toGuests  *nftables.Chain
	guestsIn  *nftables.Chain
	sourcesOf *nftables.Chain
	dnsOf     *nftables.Chain
	blocked   *nftables.Set
}

func nfTable() *nftables.Table {
	return &nftables.Table{Name: tableName, Family: nftables.TableFamilyINet}
}

// installBase replaces the table with the base ruleset.
func installBase(pool netip.Prefix, uplink string, blocked []span) (*ruleset, error) {
	c, err := nftables.New(nftables.AsLasting())
	if err != nil {
		return nil, err
	}
	rs := &ruleset{conn: c, table: nfTable()}
	// Deleting a table that does not exist fails the whole batch: add it
	// first (a no-op when it exists), then delete, then build.
	c.AddTable(rs.table)
	c.DelTable(rs.table)
	c.AddTable(rs.table)

	rs.blocked = &nftables.Set{Table: rs.table, Name: "blocked", KeyType: nftables.TypeIPAddr, Interval: true}
	if err := c.AddSet(rs.blocked, intervalElements(blocked)); err != nil {
		return nil, err
	}
	policyAccept := nftables.ChainPolicyAccept
	jump := func(chain string) []expr.Any { return []expr.Any{&expr.Verdict{Kind: expr.VerdictJump, Chain: chain}} }

	rs.sourcesOf = c.AddChain(&nftables.Chain{Name: chainSourcesOf, Table: rs.table})
	src := c.AddChain(&nftables.Chain{Name: "sources", Table: rs.table, Type: nftables.ChainTypeFilter,
		Hooknum: nftables.ChainHookPrerouting, Priority: priorityRaw, Policy: &policyAccept})
	c.AddRule(&nftables.Rule{Table: rs.table, Chain: src, Exprs: cat(ifPrefix(expr.MetaKeyIIFNAME), jump(chainSourcesOf))})
	c.AddRule(&nftables.Rule{Table: rs.table, Chain: src, Exprs: cat(ifPrefix(expr.MetaKeyIIFNAME), counter(), verdict(expr.VerdictDrop))})

	rs.dnsOf = c.AddChain(&nftables.Chain{Name: chainDNSOf, Table: rs.table})
	pre := c.AddChain(&nftables.Chain{Name: "prerouting", Table: rs.table, Type: nftables.ChainTypeNAT,
		Hooknum: nftables.ChainHookPrerouting, Priority: nftables.ChainPriorityNATDest})
	c.AddRule(&nftables.Rule{Table: rs.table, Chain: pre, Exprs: cat(ifPrefix(expr.MetaKeyIIFNAME), jump(chainDNSOf))})

	rs.guestsIn = c.AddChain(&nftables.Chain{Name: chainGuestsIn, Table: rs.table})
	in := c.AddChain(&nftables.Chain{Name: "input", Table: rs.table, Type: nftables.ChainTypeFilter,
		Hooknum: nftables.ChainHookInput, Priority: nftables.ChainPriorityFilter, Policy: &policyAccept})
	c.AddRule(&nftables.Rule{Table: rs.table, Chain: in, Exprs: cat(ifPrefix(expr.MetaKeyIIFNAME), jump(chainGuestsIn))})
	c.AddRule(&nftables.Rule{Table: rs.table, Chain: in, Exprs: cat(ifPrefix(expr.MetaKeyIIFNAME), verdict(expr.VerdictDrop))})

	rs.guests = c.AddChain(&nftables.Chain{Name: chainGuests, Table: rs.table})
	rs.toGuests = c.AddChain(&nftables.Chain{Name: chainToGuests, Table: rs.table})
	fwd := c.AddChain(&nftables.Chain{Name: "forward", Table: rs.table, Type: nftables.ChainTypeFilter,
		Hooknum: nftables.ChainHookForward, Priority: nftables.ChainPriorityFilter, Policy: &policyAccept})
	c.AddRule(&nftables.Rule{Table: rs.table, Chain: fwd, Exprs: cat(ifPrefix(expr.MetaKeyOIFNAME), jump(chainToGuests))})
	c.AddRule(&nftables.Rule{Table: rs.table, Chain: fwd, Exprs: cat(ifPrefix(expr.MetaKeyOIFNAME), ctEstablished(), verdict(expr.VerdictAccept))})
	c.AddRule(&nftables.Rule{Table: rs.table, Chain: fwd, Exprs: cat(ifPrefix(expr.MetaKeyOIFNAME), verdict(expr.VerdictDrop))})
	c.AddRule(&nftables.Rule{Table: rs.table, Chain: fwd, Exprs: cat(ifPrefix(expr.MetaKeyIIFNAME), notIPv4(), verdict(expr.VerdictDrop))})
	c.AddRule(&nftables.Rule{Table: rs.table, Chain: fwd, Exprs: cat(ifPrefix(expr.MetaKeyIIFNAME), daddrIn(rs.blocked, false), verdict(expr.VerdictDrop))})
	c.AddRule(&nftables.Rule{Table: rs.table, Chain: fwd, Exprs: cat(ifPrefix(expr.MetaKeyIIFNAME), jump(chainGuests))})
	c.AddRule(&nftables.Rule{Table: rs.table, Chain: fwd, Exprs: cat(ifPrefix(expr.MetaKeyIIFNAME), verdict(expr.VerdictDrop))})

	post := c.AddChain(&nftables.Chain{Name: "postrouting", Table: rs.table, Type: nftables.ChainTypeNAT,
		Hooknum: nftables.ChainHookPostrouting, Priority: nftables.ChainPriorityNATSource})
	masq := cat(ipv4(), saddrIn(pool))
	if uplink != "" {
		masq = cat(masq, ifExact(expr.MetaKeyOIFNAME, uplink))
	} else {
		masq = cat(masq, ifPrefixNot(expr.MetaKeyOIFNAME))
	}
	c.AddRule(&nftables.Rule{Table: rs.table, Chain: post, Exprs: cat(masq, []expr.Any{&expr.Masq{}})})
	if err := c.Flush(); err != nil {
		return nil, fmt.Errorf("nftables: install table %s: %w", tableName, err)
	}
	return rs, nil
}

// removeTable deletes zeishd's table and closes the connection.
func (rs *ruleset) removeTable() error {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	rs.conn.DelTable(rs.table)
	return errors.Join(rs.conn.Flush(), rs.conn.CloseLasting())
}

// guestObjects names one guest's chains and sets.
type guestObjects struct {
	chain                          *nftables.Chain // traffic from the guest, forwarded
	limitsIn                       *nftables.Chain // traffic to the guest
	input                          *nftables.Chain // traffic from the guest to the host
	source                         *nftables.Chain // the guest's own source address
	dns                            *nftables.Chain // the guest's DNS to its forwarder socket
	allow, allowDyn, deny, denyDyn *nftables.Set
	tap                            string
}

func (rs *ruleset) objects(tap string) guestObjects {
	set := func(prefix string, interval bool) *nftables.Set {
		return &nftables.Set{Table: rs.table, Name: prefix + "-" + tap, KeyType: nftables.TypeIPAddr, Interval: interval, HasTimeout: !interval}
	}
	chain := func(prefix string) *nftables.Chain { return &nftables.Chain{Name: prefix + "-" + tap, Table: rs.table} }
	return guestObjects{
		chain: chain("g"), limitsIn: chain("l"), input: chain("i"), source: chain("s"), dns: chain("n"),
		allow: set("a", true), allowDyn: set("ad", false),
		deny: set("d", true), denyDyn: set("dd", false),
		tap: tap,
	}
}

func (o guestObjects) chains() []*nftables.Chain {
	return []*nftables.Chain{o.chain, o.limitsIn, o.input, o.source, o.dns}
}

func (o guestObjects) sets() []*nftables.Set {
	return []*nftables.Set{o.allow, o.allowDyn, o.deny, o.denyDyn}
}

// compiled is a guest's policy as the kernel needs it.
type compiled struct {
	deny       bool // egress: deny
	allow, den []span
	rates      Rates
	guest      netip.Addr // the only source address its TAP takes
	dnsPort    uint16     // its forwarder socket's port (on its gateway)
	dnsRate    int64      // its DNS queries per second (0: uncapped)
}

// setGuest creates or replaces the chains and sets of one guest, and its
// jumps, in one transaction. Dynamic (DNS-learned) addresses are kept when
// keepDynamic, e.g. across a restart of zeishd.
func (rs *ruleset) setGuest(tap string, p compiled, fresh bool) error {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	c := rs.conn
	o := rs.objects(tap)
	if fresh {
		for _, s := range o.sets() {
			if err := c.AddSet(s, nil); err != nil {
				return err
			}
		}
		for _, ch := range o.chains() {
			c.AddChain(ch)
		}
	} else {
		for _, ch := range o.chains() {
			c.FlushChain(ch)
		}
		for _, s := range o.sets() {
			c.FlushSet(s)
		}
	}
	if len(p.allow) > 0 {
		if err := c.SetAddElements(o.allow, intervalElements(p.allow)); err != nil {
			return err
		}
	}
	if len(p.den) > 0 {
		if err := c.SetAddElements(o.deny, intervalElements(p.den)); err != nil {
			return err
		}
	}
	// Deny wins; then connections already open carry on (a TTL expiring on a
	// learned address must not cut them); then allow; then the default.
	add := func(e []expr.Any) { c.AddRule(&nftables.Rule{Table: rs.table, Chain: o.chain, Exprs: e}) }
	// Rates first, each way: what goes over is dropped whatever the policy.
	for _, e := range limitRules(nil, p.rates) {
		add(e)
	}
	for _, e := range limitRules(nil, p.rates) {
		c.AddRule(&nftables.Rule{Table: rs.table, Chain: o.limitsIn, Exprs: e})
	}
	add(cat(daddrIn(o.deny, false), counter(), verdict(expr.VerdictDrop)))
	add(cat(daddrIn(o.denyDyn, false), counter(), verdict(expr.VerdictDrop)))
	add(cat(ctEstablished(), verdict(expr.VerdictAccept)))
	add(cat(daddrIn(o.allow, false), verdict(expr.VerdictAccept)))
	add(cat(daddrIn(o.allowDyn, false), verdict(expr.VerdictAccept)))
	if p.deny {
		add(cat(counter(), verdict(expr.VerdictDrop)))
	} else {
		add(verdict(expr.VerdictAccept))
	}
	rs.addHostRules(o, p)
	if fresh {
		for _, j := range []struct {
			from *nftables.Chain
			key  expr.MetaKey
			to   *nftables.Chain
		}{
			{rs.guests, expr.MetaKeyIIFNAME, o.chain}, {rs.toGuests, expr.MetaKeyOIFNAME, o.limitsIn},
			{rs.guestsIn, expr.MetaKeyIIFNAME, o.input}, {rs.sourcesOf, expr.MetaKeyIIFNAME, o.source},
			{rs.dnsOf, expr.MetaKeyIIFNAME, o.dns},
		} {
			c.AddRule(&nftables.Rule{Table: rs.table, Chain: j.from, UserData: []byte(tap),
				Exprs: cat(ifExact(j.key, tap), []expr.Any{&expr.Verdict{Kind: expr.VerdictJump, Chain: j.to.Name}})})
		}
	}
	if err := c.Flush(); err != nil {
		return fmt.Errorf("nftables: guest %s: %w", tap, err)
	}
	return nil
}

// addHostRules fills the guest's chains that concern the host: its source
// address (anything else from its TAP is dropped by the sources chain once
// s-N returns), its DNS redirected to its own forwarder socket, and what of
// it the host takes: replies, and its forwarder port under its DNS rate.
// The kernel drops a flood before the forwarder reads it; TCP is given four
// packets per query (handshake, query, acks, close).
func (rs *ruleset) addHostRules(o guestObjects, p compiled) {
	c := rs.conn
	if p.guest.Is4() {
		g := p.guest.As4()
		c.AddRule(&nftables.Rule{Table: rs.table, Chain: o.source, Exprs: cat(ipv4(), []expr.Any{
			&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: 12, Len: 4},
			&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: g[:]},
		}, verdict(expr.VerdictAccept))})
	}
	in := func(e []expr.Any) { c.AddRule(&nftables.Rule{Table: rs.table, Chain: o.input, Exprs: e}) }
	in(cat(ctEstablished(), verdict(expr.VerdictAccept)))
	if p.dnsPort != 0 {
		for _, proto := range []struct {
			num     byte
			packets int64
		}{{unix.IPPROTO_UDP, 1}, {unix.IPPROTO_TCP, 4}} {
			c.AddRule(&nftables.Rule{Table: rs.table, Chain: o.dns, Exprs: cat(ipv4(), l4(proto.num), dport(53), []expr.Any{
				&expr.Immediate{Register: 1, Data: binaryutil.BigEndian.PutUint16(p.dnsPort)},
				&expr.Redir{RegisterProtoMin: 1, Flags: unix.NF_NAT_RANGE_PROTO_SPECIFIED},
			})})
			if p.dnsRate > 0 {
				rate := p.dnsRate * proto.packets
				in(cat(ipv4(), l4(proto.num), dport(p.dnsPort), []expr.Any{&expr.Limit{Type: expr.LimitTypePkts, Rate: uint64(rate),
					Unit: expr.LimitTimeSecond, Burst: uint32(rate), Over: true}}, counter(), verdict(expr.VerdictDrop)))
			}
			in(cat(ipv4(), l4(proto.num), dport(p.dnsPort), verdict(expr.VerdictAccept)))
		}
	}
	in(cat(counter(), verdict(expr.VerdictDrop)))
}

// hasGuest reports whether tap's chain exists.
func (rs *ruleset) hasGuest(tap string) bool {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	_, err := rs.conn.GetSetByName(rs.table, "a-"+tap)
	return err == nil
}

// delGuest removes a guest's jump, chain and sets; a guest that has none is fine.
func (rs *ruleset) delGuest(tap string) error {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	if _, err := rs.conn.GetSetByName(rs.table, "a-"+tap); err != nil {
		return nil
	}
	for _, ch := range []*nftables.Chain{rs.guests, rs.toGuests, rs.guestsIn, rs.sourcesOf, rs.dnsOf} {
		rules, err := rs.conn.GetRules(rs.table, ch)
		if err != nil {
			return err
		}
		for _, r := range rules {
			if string(r.UserData) == tap {
				if err := rs.conn.DelRule(r); err != nil {
					return err
				}
			}
		}
	}
	o := rs.objects(tap)
	for _, ch := range o.chains() {
		rs.conn.DelChain(ch)
	}
	for _, s := range o.sets() {
		rs.conn.DelSet(s)
	}
	if err := rs.conn.Flush(); err != nil {
		return fmt.Errorf("nftables: remove guest %s: %w", tap, err)
	}
	return nil
}

// learn adds addresses a DNS answer gave to a guest's dynamic set for ttl.
func (rs *ruleset) learn(tap string, allow bool, addrs []netip.Addr, ttl time.Duration) error {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	o := rs.objects(tap)
	s := o.allowDyn
	if !allow {
		s = o.denyDyn
	}
	var els []nftables.SetElement
	for _, a := range addrs {
		b := a.As4()
		els = append(els, nftables.SetElement{Key: b[:], Timeout: ttl})
	}
	// An element that exists keeps its old timeout when added again:
	// delete and re-add to refresh it, and when the delete fails (it did
	// not exist) just add.
	if err := rs.conn.SetDeleteElements(s, els); err != nil {
		return err
	}
	if err := rs.conn.SetAddElements(s, els); err != nil {
		return err
	}
	if err := rs.conn.Flush(); err == nil {
		return nil
	}
	if err := rs.conn.SetAddElements(s, els); err != nil {
		return err
	}
	return rs.conn.Flush()
}

func intervalElements(ss []span) []nftables.SetElement {
	var els []nftables.SetElement
	for _, s := range ss {
		lo := addr4(s.lo).As4()
		els = append(els, nftables.SetElement{Key: lo[:]})
		// A range that runs to 255.255.255.255 has no end element.
		if s.hi != ^uint32(0) {
			end := addr4(s.hi + 1).As4()
			els = append(els, nftables.SetElement{Key: end[:], IntervalEnd: true})
		}
	}
	return els
}

// Expression helpers: each returns the expressions of one match, loading
// into register 1.

func cat(parts ...[]expr.Any) []expr.Any {
	var out []expr.Any
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}

func ifPrefix(key expr.MetaKey) []expr.Any {
	return []expr.Any{&expr.Meta{Key: key, Register: 1}, &expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte(tapPrefix)}}
}

func ifPrefixNot(key expr.MetaKey) []expr.Any {
	return []expr.Any{&expr.Meta{Key: key, Register: 1}, &expr.Cmp{Op: expr.CmpOpNeq, Register: 1, Data: []byte(tapPrefix)}}
}

func ifExact(key expr.MetaKey, name string) []expr.Any {
	b := make([]byte, unix.IFNAMSIZ)
	copy(b, name)
	return []expr.Any{&expr.Meta{Key: key, Register: 1}, &expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: b}}
}

func ipv4() []expr.Any {
	return []expr.Any{&expr.Meta{Key: expr.MetaKeyNFPROTO, Register: 1}, &expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{unix.NFPROTO_IPV4}}}
}

func notIPv4() []expr.Any {
	return []expr.Any{&expr.Meta{Key: expr.MetaKeyNFPROTO, Register: 1}, &expr.Cmp{Op: expr.CmpOpNeq, Register: 1, Data: []byte{unix.NFPROTO_IPV4}}}
}

func l4(proto byte) []expr.Any {
	return []expr.Any{&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: 1}, &expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{proto}}}
}

func dport(p uint16) []expr.Any {
	return []expr.Any{
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseTransportHeader, Offset: 2, Len: 2},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: binaryutil.BigEndian.PutUint16(p)},
	}
}

func ctEstablished() []expr.Any {
	return []expr.Any{
		&expr.Ct{Register: 1, Key: expr.CtKeySTATE},
		&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 4,
			Mask: binaryutil.NativeEndian.PutUint32(expr.CtStateBitESTABLISHED | expr.CtStateBitRELATED),
			Xor:  make([]byte, 4)},
		&expr.Cmp{Op: expr.CmpOpNeq, Register: 1, Data: make([]byte, 4)},
	}
}

// daddrIn matches IPv4 packets whose destination is in s (the caller made
// sure of IPv4 before, or the family check is included here).
func daddrIn(s *nftables.Set, invert bool) []expr.Any {
	return cat(ipv4(), []expr.Any{
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: 16, Len: 4},
		&expr.Lookup{SourceRegister: 1, SetName: s.Name, SetID: s.ID, Invert: invert},
	})
}

func saddrIn(p netip.Prefix) []expr.Any {
	mask := make([]byte, 4)
	binary.BigEndian.PutUint32(mask, ^uint32(0)<<(32-p.Bits()))
	net := p.Masked().Addr().As4()
	return []expr.Any{
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: 12, Len: 4},
		&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 4, Mask: mask, Xor: make([]byte, 4)},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: net[:]},
	}
}

func counter() []expr.Any { return []expr.Any{&expr.Counter{}} }

func verdict(k expr.VerdictKind) []expr.Any { return []expr.Any{&expr.Verdict{Kind: k}} }
