package control

import (
	"errors"
	"strings"
	"testing"

	"github.com/zeish/zeish/errdefs"
	"github.com/zeish/zeish/sandbox"
)

func TestCheckTemplateDisk(t *testing.T) {
	tpl := sandbox.Template{Name: "py", DiskMiB: 4096}
	for _, c := range []struct {
		disk int
		want error
	}{
		{1024, errdefs.ErrDiskTooSmall},
		{4095, errdefs.ErrDiskTooSmall},
		{4096, nil},
		{8192, nil},
	} {
		err := checkTemplateDisk(c.disk, tpl)
		if !errors.Is(err, c.want) || (c.want == nil) != (err == nil) {
			t.Errorf("disk %d: %v, want %v", c.disk, err, c.want)
		}
		if err != nil && (!strings.Contains(err.Error(), "4096 MiB") || errdefs.Of(err).Class != errdefs.ClassInvalid) {
			t.Errorf("disk %d: %v does not name the template's size as a 400", c.disk, err)
		}
	}
}
