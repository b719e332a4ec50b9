package guest

import (
	"fmt"

	"github.com/zeish/zeish/errdefs"
)

// A file's user metadata is kept in its extended attributes, one per key,
// in the namespace E2B's agent uses: files written through either keep their
// metadata across both, and `setfattr -n user.e2b.k` in the guest sets it
// too.

// MetadataXattrPrefix names a metadata key's extended attribute.
const MetadataXattrPrefix = "user.e2b."

// Bounds of one file's metadata: Linux allows xattr names of 255 bytes, and
// ext4 keeps all of an inode's xattrs in one 4 KiB block.
const (
	MaxMetadataKeyLen = 255 - len(MetadataXattrPrefix)
	MaxMetadataBytes  = 4096
)

// CheckMetadata says why a file could not carry md: keys and values are
// printable US-ASCII (they travel as HTTP headers), keys are not empty and
// fit an xattr name, and the whole set fits MaxMetadataBytes (counting each
// attribute's name and value).
func CheckMetadata(md map[string]string) error {
	total := 0
	for k, v := range md {
		switch {
		case k == "":
			return fmt.Errorf("metadata: a key is empty: %w", errdefs.ErrInvalidArgument)
		case len(k) > MaxMetadataKeyLen:
			return fmt.Errorf("metadata key %q is longer than %d bytes: %w", k, MaxMetadataKeyLen, errdefs.ErrInvalidArgument)
		}
		if i := notPrintable(k); i >= 0 {
			return fmt.Errorf("metadata key %q has a byte 0x%02x that is not printable ASCII: %w", k, k[i], errdefs.ErrInvalidArgument)
		}
		if i := notPrintable(v); i >= 0 {
			return fmt.Errorf("metadata value of %q has a byte 0x%02x that is not printable ASCII: %w", k, v[i], errdefs.ErrInvalidArgument)
		}
		total += len(MetadataXattrPrefix) + len(k) + len(v)
	}
	if total > MaxMetadataBytes {
		return fmt.Errorf("metadata of %d bytes: at most %d: %w", total, MaxMetadataBytes, errdefs.ErrInvalidArgument)
	}
	return nil
}

// notPrintable is the index of the first byte of s outside 0x20-0x7e, or -1.
func notPrintable(s string) int {
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 || s[i] > 0x7e {
			return i
		}
	}
	return -1
}
