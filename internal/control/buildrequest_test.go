package control

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/zeish/zeish/api"
	"github.com/zeish/zeish/errdefs"
)

// FuzzBuildRequest: any spec a template upload or a JSON build carries is
// either a build request or refused as invalid_argument: never a panic,
// never another class (a 5xx). The REST server's FuzzTemplateUpload fuzzes
// the multipart body around it.
func FuzzBuildRequest(f *testing.F) {
	f.Add([]byte(`{"name":"t","from":"docker-archive"}`), true)
	f.Add([]byte(`{"name":"t","from":"oci-archive","disk_mib":64,"start_cmd":["a"]}`), true)
	f.Add([]byte(`{"name":"t","from":"registry:example.com/a:b","vcpus":2,"cold":true}`), false)
	f.Add([]byte(`{"name":"t","from":"oci:/srv/x","ready_timeout_seconds":-1}`), false)
	f.Fuzz(func(t *testing.T, spec []byte, upload bool) {
		var req api.BuildTemplateRequest
		if json.Unmarshal(spec, &req) != nil || req.RegistrySecret != "" {
			return // not a spec; reading a secret needs a store
		}
		c := &Control{}
		_, err := c.buildRequest(context.Background(), Caller{Account: api.Account{ID: "acc_x"}}, req, upload)
		if err != nil && !errdefs.Is(err, errdefs.ClassInvalid) {
			t.Fatalf("%s (upload %v): %v is %s", spec, upload, err, errdefs.Of(err).Code)
		}
	})
}
