package cluster

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/zeish/zeish/errdefs"
	"github.com/zeish/zeish/internal/nodeapi/nodev2"
	"github.com/zeish/zeish/internal/store"
)

// Node identity (SECURITY.md, "Many hosts"). Each direction of the node
// protocol has a credential of its own, and no credential is shared by two
// nodes:
//
//   - A node agent joins once with a join token an operator made
//     (`zeishd join-token`): random, stored hashed, spent by the join,
//     expiring, optionally bound to one node id. The join gives the node its
//     credential ("znc_<node id>.<secret>"), kept in its data dir; the
//     control plane keeps its hash on the node's row. Every later call of
//     the node (Register, Heartbeat) carries it, and acts for that node id
//     alone.
//   - The control plane calls a node with that node's call key: derived
//     from the control plane's key for that node id, handed to the node at
//     its registration (over its own credential). A node knows its own call
//     key only, so it cannot call another node as the control plane.
//   - Data-plane tokens of a node's sandboxes are signed with that node's
//     data-plane key, derived the same way: a node verifies its own and
//     cannot mint one another node accepts.
//
// Derived keys are HMAC-SHA256(control plane key, purpose ‖ 0 ‖ node id):
// replicas share the key (token.key), so they derive the same keys without
// storing any; a node never sees the key it is derived from.

const (
	joinTokenPrefix  = "zjt_"
	credentialPrefix = "znc_"
)

// Purposes of the keys derived per node.
const (
	purposeDataPlane = "zeish node data-plane token key v1"
	purposeCall      = "zeish node call key v1"
	purposeGrant     = "zeish node sandbox grant v1"
)

func derive(master []byte, purpose, nodeID string) []byte {
	m := hmac.New(sha256.New, master)
	m.Write([]byte(purpose))
	m.Write([]byte{0})
	m.Write([]byte(nodeID))
	return m.Sum(nil)
}

// DataPlaneKey is the key that signs and verifies data-plane tokens of
// node nodeID's sandboxes.
func DataPlaneKey(master []byte, nodeID string) []byte {
	return derive(master, purposeDataPlane, nodeID)
}

// CallKey is what the control plane presents when it calls node nodeID,
// as the bearer text the node compares (nodeapi.CallKey).
func CallKey(master []byte, nodeID string) string {
	return base64.RawURLEncoding.EncodeToString(derive(master, purposeCall, nodeID))
}

// hashSecret is how a join token's or a credential's secret is kept.
func hashSecret(secret string) string {
	h := sha256.Sum256([]byte(secret))
	return hex.EncodeToString(h[:])
}

func randomSecret() string {
	b := make([]byte, 32)
	rand.Read(b)
	return base64.RawURLEncoding.EncodeToString(b)
}

// sameHash compares a secret with a kept hash in constant time.
func sameHash(secret, hash string) bool {
	return hash != "" && subtle.ConstantTimeCompare([]byte(hashSecret(secret)), []byte(hash)) == 1
}

// MaxJoinTokenTTL bounds how long a join token may wait to be used.
const MaxJoinTokenTTL = 7 * 24 * time.Hour

// NewJoinToken makes a join token for node nodeID ("" any new node), valid
// for ttl from now: its record, to store, and its text, to hand to the
// node's operator (shown once; only its hash is kept).
func NewJoinToken(nodeID string, ttl time.Duration, now time.Time) (store.JoinToken, string, error) {
	if nodeID != "" && !nodeIDPattern.MatchString(nodeID) {
		return store.JoinToken{}, "", fmt.Errorf("node id %q: want lower-case letters, digits, '.', '_' or '-': %w", nodeID, errdefs.ErrInvalidArgument)
	}
	if ttl <= 0 || ttl > MaxJoinTokenTTL {
		return store.JoinToken{}, "", fmt.Errorf("join token lifetime %s: want more than 0 and at most %s: %w", ttl, MaxJoinTokenTTL, errdefs.ErrInvalidArgument)
	}
	id := make([]byte, 8)
	rand.Read(id)
	secret := randomSecret()
	t := store.JoinToken{ID: hex.EncodeToString(id), Hash: hashSecret(secret), NodeID: nodeID,
		CreatedAt: now.UTC(), ExpiresAt: now.Add(ttl).UTC()}
	return t, joinTokenPrefix + t.ID + "." + secret, nil
}

// parseJoinToken splits a join token's text into its id and secret.
func parseJoinToken(s string) (id, secret string, err error) {
	rest, ok := strings.CutPrefix(s, joinTokenPrefix)
	id, secret, ok2 := strings.Cut(rest, ".")
	if !ok || !ok2 || id == "" || secret == "" {
		return "", "", fmt.Errorf("a join token looks like %s<id>.<secret>: %w", joinTokenPrefix, errdefs.ErrUnauthenticated)
	}
	return id, secret, nil
}

// newCredential is a fresh credential for node nodeID, and its hash.
func newCredential(nodeID string) (credential, hash string) {
	secret := randomSecret()
	return credentialPrefix + nodeID + "." + secret, hashSecret(secret)
}

// parseCredential splits a node credential into the node id it is for and
// its secret (node ids may hold '.', secrets never do).
func parseCredential(s string) (nodeID, secret string, err error) {
	rest, ok := strings.CutPrefix(s, credentialPrefix)
	i := strings.LastIndexByte(rest, '.')
	if !ok || i <= 0 || i == len(rest)-1 {
		return "", "", fmt.Errorf("a node credential looks like %s<node id>.<secret>: %w", credentialPrefix, errdefs.ErrUnauthenticated)
	}
	return rest[:i], rest[i+1:], nil
}

// spend is the join of node nodeID with token t, whose secret was given:
// it checks the token and, on success, marks it used and gives n a new
// credential, returned in the clear.
func spend(t *store.JoinToken, n *store.NodeRecord, secret string, now time.Time) (string, error) {
	if !sameHash(secret, t.Hash) {
		return "", fmt.Errorf("join token not valid: %w", errdefs.ErrUnauthenticated)
	}
	if t.UsedAt != nil {
		return "", fmt.Errorf("join token %s was used by node %s at %s; make another with `zeishd join-token`: %w",
			t.ID, t.UsedBy, t.UsedAt.Format(time.RFC3339), errdefs.ErrUnauthenticated)
	}
	if !now.Before(t.ExpiresAt) {
		return "", fmt.Errorf("join token %s expired at %s; make another with `zeishd join-token`: %w", t.ID, t.ExpiresAt.Format(time.RFC3339), errdefs.ErrTokenExpired)
	}
	switch {
	case t.NodeID != "" && t.NodeID != n.ID:
		return "", fmt.Errorf("join token %s is for node %s, not %s: %w", t.ID, t.NodeID, n.ID, errdefs.ErrForbidden)
	case t.NodeID == "" && n.CredentialHash != "":
		// Taking over a node that has joined needs a token made for it:
		// a token for "any new node" must not hijack an existing id.
		return "", fmt.Errorf("node %s has joined already; to give it a new credential use a join token made for it (zeishd join-token --node %s): %w",
			n.ID, n.ID, errdefs.ErrForbidden)
	}
	cred, hash := newCredential(n.ID)
	at := now.UTC()
	t.UsedAt, t.UsedBy = &at, n.ID
	n.CredentialHash, n.JoinedAt = hash, &at
	return cred, nil
}

// CredentialOf reports whether cred is a credential of node nodeID (by its
// form; only the control plane can say whether it is valid).
func CredentialOf(cred, nodeID string) bool {
	id, _, err := parseCredential(cred)
	return err == nil && id == nodeID
}

// GrantFor is the grant that lets node nodeID read and write sandbox id's
// row (and create it) through its store calls until ttl has passed
// (docs/cluster.md, "Who writes what"): sent with the operation that
// needs it, checked by any replica (they share the key).
func GrantFor(master []byte, nodeID, id string, ttl time.Duration) *nodev2.Grant {
	exp := time.Now().Add(ttl).Unix()
	return &nodev2.Grant{SandboxId: id, ExpiresUnix: exp, Mac: grantMAC(master, nodeID, id, exp)}
}

func grantMAC(master []byte, nodeID, id string, exp int64) []byte {
	m := hmac.New(sha256.New, derive(master, purposeGrant, nodeID))
	m.Write([]byte(id))
	m.Write([]byte{0})
	m.Write([]byte(strconv.FormatInt(exp, 10)))
	return m.Sum(nil)
}

// granted reports whether g is a live grant of sandbox id to node nodeID.
func granted(master []byte, nodeID, id string, g *nodev2.Grant, now time.Time) bool {
	if g == nil || g.SandboxId != id || id == "" || now.Unix() > g.ExpiresUnix {
		return false
	}
	return hmac.Equal(g.Mac, grantMAC(master, nodeID, id, g.ExpiresUnix))
}
