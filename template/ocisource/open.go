package ocisource

import (
	"context"
	"fmt"
	"os"
)

// Transports an image can come from.
const (
	TransportDockerArchive = "docker-archive" // docker save output
	TransportOCI           = "oci"            // an OCI image layout folder
	TransportOCIArchive    = "oci-archive"    // an OCI image layout as a tar
	TransportRegistry      = "registry"       // host/repo:tag or host/repo@digest
)

// Open resolves the linux/amd64 image ref names under transport. Close the
// image when its layers have been read.
func Open(ctx context.Context, transport, ref string, reg Registry) (*Image, error) {
	switch transport {
	case TransportRegistry:
		return openRegistry(ctx, ref, reg)
	case TransportOCI:
		fi, err := os.Stat(ref)
		if err != nil {
			return nil, fmt.Errorf("%v: %w", err, ErrBadSource)
		}
		if !fi.IsDir() {
			return nil, fmt.Errorf("%s is not a folder: %w", ref, ErrBadSource)
		}
		img, err := openLayout(ctx, dirFiles(ref))
		if err != nil {
			return nil, fmt.Errorf("%s: %w", ref, err)
		}
		return img, nil
	case TransportOCIArchive, TransportDockerArchive:
		if err := isFile(ref); err != nil {
			return nil, err
		}
		a, err := openArchive(ctx, ref)
		if err != nil {
			return nil, fmt.Errorf("%s is not %s: %w", ref, kind(transport), err)
		}
		var img *Image
		if transport == TransportOCIArchive {
			img, err = openLayout(ctx, a)
		} else {
			img, err = openDocker(ctx, a)
		}
		if err != nil {
			a.Close()
			return nil, fmt.Errorf("%s is not usable as %s: %w", ref, kind(transport), err)
		}
		img.close = a.Close
		return img, nil
	}
	return nil, fmt.Errorf("unknown transport %q: %w", transport, ErrBadSource)
}

func kind(transport string) string {
	if transport == TransportOCIArchive {
		return "an OCI archive"
	}
	return "a docker archive"
}

func isFile(p string) error {
	fi, err := os.Stat(p)
	if err != nil {
		return fmt.Errorf("%v: %w", err, ErrBadSource)
	}
	if !fi.Mode().IsRegular() {
		return fmt.Errorf("%s is not a file: %w", p, ErrBadSource)
	}
	return nil
}
