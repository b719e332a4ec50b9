package server

import (
	"bytes"
	"errors"
	"io"
	"mime/multipart"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/zeish/zeish/errdefs"
)

// multipartBody is a build upload: the spec part, then the image part.
func multipartBody(t testing.TB, spec, image string) (body []byte, contentType string) {
	var buf bytes.Buffer
	w := multipart.NewWriter(&buf)
	p, _ := w.CreateFormField("spec")
	io.WriteString(p, spec)
	p, _ = w.CreateFormFile("image", "image.tar")
	io.WriteString(p, image)
	w.Close()
	return buf.Bytes(), w.FormDataContentType()
}

// FuzzTemplateUpload: any body under any multipart boundary either decodes
// into a request (which control checks: its FuzzBuildRequest) and an
// archive stream that reads to its end or fails, or is refused as
// invalid_argument or upload_too_large: never a panic, never another class
// (a 5xx).
func FuzzTemplateUpload(f *testing.F) {
	body, ct := multipartBody(f, `{"name":"t","from":"docker-archive"}`, "not really a tar")
	boundary := strings.TrimPrefix(ct, "multipart/form-data; boundary=")
	f.Add(boundary, body)
	body, _ = multipartBody(f, `{"name":"t","from":"oci-archive","disk_mib":64,"start_cmd":["a"]}`, "")
	f.Add(boundary, body)
	f.Add(boundary, bytes.Replace(body, []byte(`name="spec"`), []byte(`name="image"`), 1))
	f.Add(boundary, []byte("--"+boundary+"\r\nContent-Disposition: form-data; name=\"spec\"\r\n\r\n{\"name\":\"t\",\"x\":1}\r\n--"+boundary+"--\r\n"))
	f.Add("", []byte("{}"))
	f.Add("b", []byte("--b\r\n\r\n--b--"))
	f.Fuzz(func(t *testing.T, boundary string, body []byte) {
		r := httptest.NewRequest("POST", "/api/v1/public/templates", bytes.NewReader(body))
		r.Header.Set("Content-Type", "multipart/form-data; boundary="+boundary)
		_, upload, err := decodeBuild(httptest.NewRecorder(), r)
		if err == nil && upload != nil {
			_, err = io.Copy(io.Discard, upload) // a broken part fails the store, as invalid input
			if err != nil && !errors.As(err, new(*http.MaxBytesError)) {
				err = invalid("%v", err)
			}
			err = uploadErr(err)
		}
		if err != nil && !errdefs.Is(err, errdefs.ClassInvalid) && !errors.Is(err, errdefs.ErrUploadTooLarge) {
			t.Fatalf("boundary %q, body %q: %v is %s", boundary, body, err, errdefs.Of(err).Code)
		}
	})
}

// An upload past the 32 GiB cap is 413 upload_too_large, not a 400.
func TestUploadPastItsCap(t *testing.T) {
	err := uploadErr(errors.New("copy"), &http.MaxBytesError{Limit: maxUploadBytes})
	if !errors.Is(err, errdefs.ErrUploadTooLarge) || statusOf(errdefs.Of(err).Class) != http.StatusRequestEntityTooLarge {
		t.Errorf("%v: %d", err, statusOf(errdefs.Of(err).Class))
	}
	if err := uploadErr(errdefs.ErrTemplateQuota); !errors.Is(err, errdefs.ErrTemplateQuota) {
		t.Errorf("another error changed: %v", err)
	}
}
