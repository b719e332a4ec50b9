package imagestore_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/minio/minio-go/v7"

	"github.com/zeish/zeish/internal/imagestore"
	"github.com/zeish/zeish/internal/imagestore/imagestoretest"
	"github.com/zeish/zeish/internal/testenv"
)

func TestMain(m *testing.M) { imagestoretest.Main(m) }

func TestFolderConformance(t *testing.T) {
	imagestoretest.Run(t, func(t *testing.T) imagestoretest.Harness {
		dir := t.TempDir()
		notDir := filepath.Join(t.TempDir(), "file")
		os.WriteFile(notDir, nil, 0o600)
		return imagestoretest.Harness{
			URL: "file://" + dir,
			Corrupt: func(t *testing.T, key string, data []byte) {
				if err := os.WriteFile(filepath.Join(dir, key), data, 0o600); err != nil {
					t.Fatal(err)
				}
			},
			Unreachable: "file://" + notDir + "/store",
		}
	})
}

// TestS3Conformance runs the suite against versitygw on loopback, one
// bucket per case, with the credentials in the standard variables.
func TestS3Conformance(t *testing.T) {
	srv := testenv.StartS3(t)
	t.Setenv("AWS_ACCESS_KEY_ID", srv.AccessKey)
	t.Setenv("AWS_SECRET_ACCESS_KEY", srv.SecretKey)
	imagestoretest.Run(t, func(t *testing.T) imagestoretest.Harness {
		bucket := srv.NewBucket(t)
		return imagestoretest.Harness{
			URL: "s3://" + bucket + "/images?endpoint=" + srv.Endpoint,
			Corrupt: func(t *testing.T, key string, data []byte) {
				// The object's own file in the server's folder.
				if err := os.WriteFile(filepath.Join(srv.Root, bucket, "images", key), data, 0o600); err != nil {
					t.Fatal(err)
				}
			},
			Unreachable:      "s3://" + bucket + "/images?endpoint=http://127.0.0.1:1&timeout=5s",
			WrongCredentials: "s3://" + bucket + "/images?endpoint=" + srv.Endpoint + "&credentials=" + srv.CredentialsFile(t, true),
		}
	})
}

// TestS3CredentialsFile opens the store with its keys in a shared
// credentials file named by the URL, and none in the environment.
func TestS3CredentialsFile(t *testing.T) {
	srv := testenv.StartS3(t)
	t.Setenv("AWS_ACCESS_KEY_ID", "")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "")
	t.Setenv("AWS_SHARED_CREDENTIALS_FILE", filepath.Join(t.TempDir(), "none"))
	bucket := srv.NewBucket(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	base := "s3://" + bucket + "/p?endpoint=" + srv.Endpoint
	if _, err := imagestore.OpenBackend(ctx, base); err == nil {
		t.Fatal("opened the store with no credentials at all")
	}
	if _, err := imagestore.OpenBackend(ctx, base+"&credentials="+srv.CredentialsFile(t, false)); err != nil {
		t.Fatal(err)
	}
}

// TestS3StoreChecksPuts sends the server bytes that do not match the
// checksum the backend's puts carry (as damage on the way would), with a
// plain client: the server must refuse them, or a put could store bytes
// other than those the digest names.
func TestS3StoreChecksPuts(t *testing.T) {
	srv := testenv.StartS3(t)
	bucket := srv.NewBucket(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	sent, meant := []byte("bytes damaged on the way"), sha256.Sum256([]byte("bytes the chunk holds"))
	core := minio.Core{Client: srv.Client(t)}
	_, err := core.PutObject(ctx, bucket, "chunk", bytes.NewReader(sent), int64(len(sent)), "", "",
		minio.PutObjectOptions{UserMetadata: map[string]string{"x-amz-checksum-sha256": base64.StdEncoding.EncodeToString(meant[:])}})
	if err == nil {
		t.Fatal("the server stored bytes that do not match their x-amz-checksum-sha256")
	}
	t.Logf("refused: %v", err)
}
