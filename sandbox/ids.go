package sandbox

import (
	"crypto/rand"
	"encoding/base32"
	"fmt"
	"math/big"
	"regexp"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/zeish/zeish/errdefs"
)

// Id prefixes name the kind of object an id refers to.
const (
	PrefixSandbox  = "sbx_"
	PrefixSnapshot = "snp_"
	PrefixTemplate = "tpl_"
	PrefixAccount  = "acc_"
	PrefixKey      = "key_"
)

var idEncoding = base32.NewEncoding("0123456789abcdefghjkmnpqrstvwxyz").WithPadding(base32.NoPadding)

// NewID returns prefix plus 20 random base32 characters (100 bits).
func NewID(prefix string) string {
	b := make([]byte, 13)
	rand.Read(b)
	return prefix + idEncoding.EncodeToString(b)[:20]
}

var idPattern = regexp.MustCompile(`^[a-z]{3}_[0-9a-z]{20}$`)

// CheckID reports an invalid_argument error unless id is well formed with prefix.
func CheckID(prefix, id string) error {
	if !strings.HasPrefix(id, prefix) || !idPattern.MatchString(id) {
		return fmt.Errorf("%q is not a valid id (want %s followed by 20 characters): %w", id, prefix, errdefs.ErrInvalidArgument)
	}
	return nil
}

var namePattern = regexp.MustCompile(`^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$`)

// CheckName validates a sandbox name: it doubles as the guest's hostname, so it
// follows hostname rules (lower-case letters, digits and '-', at most 63).
func CheckName(name string) error {
	if !namePattern.MatchString(name) {
		return fmt.Errorf("name %q: use 1-63 lower-case letters, digits or '-', not starting or ending with '-': %w", name, errdefs.ErrInvalidArgument)
	}
	return nil
}

var adjectives = []string{"brave", "calm", "eager", "fancy", "gentle", "happy", "jolly", "kind", "lively", "merry",
	"nimble", "proud", "quick", "quiet", "silly", "swift", "witty", "zesty", "bold", "bright", "clever", "cosmic",
	"daring", "fuzzy", "golden", "humble", "lucky", "mighty", "noble", "sunny"}

var animals = []string{"otter", "falcon", "badger", "beaver", "bison", "camel", "cobra", "crane", "dingo", "eagle",
	"ferret", "gecko", "heron", "ibis", "jackal", "koala", "lemur", "lynx", "marten", "newt", "ocelot", "panda",
	"quail", "raven", "salmon", "tapir", "urchin", "walrus", "yak", "zebra"}

func pick(n int) int {
	v, _ := rand.Int(rand.Reader, big.NewInt(int64(n)))
	return int(v.Int64())
}

// NewName returns a human-readable name like "brave-otter-42".
func NewName() string {
	return fmt.Sprintf("%s-%s-%d", adjectives[pick(len(adjectives))], animals[pick(len(animals))], 10+pick(90))
}

// NewMAC returns a random locally administered unicast MAC address.
func NewMAC() string {
	b := make([]byte, 3)
	rand.Read(b)
	return fmt.Sprintf("52:54:00:%02x:%02x:%02x", b[0], b[1], b[2])
}

// IsID reports whether ref is a well-formed id with prefix. Where the API
// takes "an id or a name", an id always wins: names can never look like ids
// (sandbox names have no '_'; a snapshot name that does is still looked up
// as an id first).
func IsID(prefix, ref string) bool {
	return strings.HasPrefix(ref, prefix) && idPattern.MatchString(ref)
}

// CheckSnapshotName validates a snapshot name (docs/snapshots.md, rule 2): 1–64
// printable characters.
func CheckSnapshotName(name string) error {
	if name == "" || utf8.RuneCountInString(name) > 64 || !utf8.ValidString(name) {
		return fmt.Errorf("snapshot name %q: want 1-64 printable characters: %w", name, errdefs.ErrInvalidArgument)
	}
	for _, c := range name {
		if !unicode.IsPrint(c) {
			return fmt.Errorf("snapshot name %q: character %U is not printable: %w", name, c, errdefs.ErrInvalidArgument)
		}
	}
	return nil
}
