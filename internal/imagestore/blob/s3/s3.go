// Package s3 is the blob backend on any S3-compatible object store (AWS S3,
// GCS's S3 API, MinIO, Ceph RGW, SeaweedFS, versitygw), through minio-go:
// one module written for S3-compatible servers, which picks path-style or
// virtual-host addressing by endpoint and sends nothing by default that
// servers other than AWS refuse (the AWS SDK adds trailing CRC checksums
// to every put, which GCS's S3 API rejects unless told not to).
//
// Every put is signed with x-amz-content-sha256 set to the digest the
// caller names (a chunk's own name), which the store checks against the
// bytes it receives, and carries Content-MD5 as well.
package s3

import (
	"bytes"
	"context"
	"crypto/md5"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"

	"github.com/zeish/zeish/internal/imagestore/blob"
)

// Config says which bucket, where, and with which credentials.
type Config struct {
	Bucket string
	Prefix string // key prefix inside the bucket, "" or ending in "/"
	// Endpoint is the server's URL (http:// or https://); default AWS S3.
	Endpoint string
	Region   string // default us-east-1
	// PathStyle: "auto" (default: path style except on AWS and a few
	// known virtual-host providers), "on" or "off".
	PathStyle string
	// Credentials: "" reads AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY and
	// AWS_SESSION_TOKEN, then the shared credentials file
	// (AWS_SHARED_CREDENTIALS_FILE or ~/.aws/credentials, section
	// Profile or AWS_PROFILE); "iam" asks the instance's or pod's role;
	// anything else is the path of a shared credentials file.
	Credentials string
	Profile     string
	// Timeout bounds each request (default 60 s).
	Timeout time.Duration
}

// ParseURL reads s3://bucket/prefix?endpoint=…&region=…&path_style=…&
// credentials=…&profile=… . Keys never go in the URL (it is logged).
func ParseURL(raw string) (Config, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return Config{}, fmt.Errorf("image store %q: %w", raw, err)
	}
	if u.Scheme != "s3" || u.Host == "" {
		return Config{}, fmt.Errorf("image store %q: want s3://bucket/prefix", raw)
	}
	if u.User != nil {
		return Config{}, fmt.Errorf("image store %q: credentials do not go in the URL; use AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY or ?credentials=FILE", u.Redacted())
	}
	c := Config{Bucket: u.Host, Prefix: strings.Trim(u.Path, "/")}
	if c.Prefix != "" {
		c.Prefix += "/"
	}
	q := u.Query()
	for k := range q {
		switch k {
		case "endpoint", "region", "path_style", "credentials", "profile", "timeout":
		default:
			return Config{}, fmt.Errorf("image store %q: unknown parameter %q (endpoint, region, path_style, credentials, profile, timeout)", raw, k)
		}
	}
	c.Endpoint, c.Region, c.PathStyle = q.Get("endpoint"), q.Get("region"), q.Get("path_style")
	c.Credentials, c.Profile = q.Get("credentials"), q.Get("profile")
	if t := q.Get("timeout"); t != "" {
		if c.Timeout, err = time.ParseDuration(t); err != nil || c.Timeout <= 0 {
			return Config{}, fmt.Errorf("image store %q: timeout %q: want a duration such as 30s", raw, t)
		}
	}
	switch c.PathStyle {
	case "", "auto", "on", "off":
	default:
		return Config{}, fmt.Errorf("image store %q: path_style %q: want auto, on or off", raw, c.PathStyle)
	}
	return c, nil
}

// Backend talks to one bucket.
type Backend struct {
	cfg    Config
	client *minio.Client
	where  string
}

var _ blob.Backend = (*Backend)(nil)

// New makes a client for cfg. It does not touch the network: Check does.
func New(cfg Config) (*Backend, error) {
	endpoint := cfg.Endpoint
	if endpoint == "" {
		endpoint = "https://s3.amazonaws.com"
	}
	eu, err := url.Parse(endpoint)
	if err != nil || (eu.Scheme != "http" && eu.Scheme != "https") || eu.Host == "" {
		return nil, fmt.Errorf("image store endpoint %q: want http(s)://host[:port]", endpoint)
	}
	creds, err := credentialsFor(cfg)
	if err != nil {
		return nil, err
	}
	lookup := minio.BucketLookupAuto
	switch cfg.PathStyle {
	case "on":
		lookup = minio.BucketLookupPath
	case "off":
		lookup = minio.BucketLookupDNS
	}
	if cfg.Region == "" {
		cfg.Region = "us-east-1"
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = 60 * time.Second
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConnsPerHost = 64
	tr.ResponseHeaderTimeout = cfg.Timeout
	client, err := minio.New(eu.Host, &minio.Options{
		Creds: creds, Secure: eu.Scheme == "https", Region: cfg.Region, BucketLookup: lookup,
		Transport: tr,
		// A store that is down should say so in seconds, not after ten
		// backed-off tries; callers retry whole operations.
		MaxRetries: 3,
	})
	if err != nil {
		return nil, fmt.Errorf("image store: %w", err)
	}
	return &Backend{cfg: cfg, client: client,
		where: fmt.Sprintf("s3://%s/%s at %s", cfg.Bucket, cfg.Prefix, eu.Redacted())}, nil
}

func credentialsFor(cfg Config) (*credentials.Credentials, error) {
	switch cfg.Credentials {
	case "":
		return credentials.NewChainCredentials([]credentials.Provider{
			&credentials.EnvAWS{},
			&credentials.FileAWSCredentials{Profile: cfg.Profile},
		}), nil
	case "iam":
		return credentials.NewIAM(""), nil
	}
	if _, err := os.Stat(cfg.Credentials); err != nil {
		return nil, fmt.Errorf("image store credentials file: %w", err)
	}
	return credentials.NewFileAWSCredentials(cfg.Credentials, cfg.Profile), nil
}

func (b *Backend) String() string { return b.where }

// Check makes one request that needs the bucket and the credentials, so a
// misconfigured store is reported at start, clearly.
func (b *Backend) Check(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, b.cfg.Timeout)
	defer cancel()
	ok, err := b.client.BucketExists(ctx, b.cfg.Bucket)
	if err != nil {
		return b.wrap("check bucket", "", err)
	}
	if !ok {
		return blob.Errorf(blob.ErrNotFound, "%s: bucket %q does not exist", b, b.cfg.Bucket)
	}
	return nil
}

func (b *Backend) Put(ctx context.Context, key string, body []byte, sum [sha256.Size]byte) error {
	ctx, cancel := context.WithTimeout(ctx, b.cfg.Timeout)
	defer cancel()
	if sha256.Sum256(body) != sum {
		return blob.Errorf(blob.ErrBadDigest, "%s: put %s", b, key)
	}
	// The store checks what it receives against Content-MD5 (every S3
	// implementation does), x-amz-checksum-sha256 and the signed
	// x-amz-content-sha256 (where it does): bytes damaged on the way are
	// refused, not stored.
	md := md5.Sum(body)
	_, err := minio.Core{Client: b.client}.PutObject(ctx, b.cfg.Bucket, b.cfg.Prefix+key, bytes.NewReader(body), int64(len(body)),
		base64.StdEncoding.EncodeToString(md[:]), hex.EncodeToString(sum[:]),
		minio.PutObjectOptions{ContentType: "application/octet-stream",
			UserMetadata: map[string]string{"x-amz-checksum-sha256": base64.StdEncoding.EncodeToString(sum[:])}})
	return b.wrap("put", key, err)
}

func (b *Backend) Get(ctx context.Context, key string, off, n int64) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, b.cfg.Timeout)
	defer cancel()
	var opts minio.GetObjectOptions
	switch {
	case n == 0:
		return nil, nil
	case n > 0:
		opts.SetRange(off, off+n-1)
	case off > 0:
		opts.SetRange(off, 0)
	}
	obj, err := b.client.GetObject(ctx, b.cfg.Bucket, b.cfg.Prefix+key, opts)
	if err != nil {
		return nil, b.wrap("get", key, err)
	}
	defer obj.Close()
	var buf bytes.Buffer
	if n > 0 {
		buf.Grow(int(n))
	}
	if _, err := io.Copy(&buf, obj); err != nil {
		if minio.ToErrorResponse(err).Code == "InvalidRange" {
			return nil, nil // off at or past the end
		}
		return nil, b.wrap("get", key, err)
	}
	return buf.Bytes(), nil
}

func (b *Backend) Stat(ctx context.Context, key string) (blob.Info, error) {
	ctx, cancel := context.WithTimeout(ctx, b.cfg.Timeout)
	defer cancel()
	st, err := b.client.StatObject(ctx, b.cfg.Bucket, b.cfg.Prefix+key, minio.StatObjectOptions{})
	if err != nil {
		return blob.Info{}, b.wrap("stat", key, err)
	}
	return blob.Info{Key: key, Size: st.Size, ModTime: st.LastModified}, nil
}

func (b *Backend) List(ctx context.Context, prefix string, fn func(blob.Info) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel() // stops the lister's goroutine when fn fails
	for obj := range b.client.ListObjects(ctx, b.cfg.Bucket, minio.ListObjectsOptions{Prefix: b.cfg.Prefix + prefix, Recursive: true}) {
		if obj.Err != nil {
			return b.wrap("list", prefix, obj.Err)
		}
		if err := fn(blob.Info{Key: strings.TrimPrefix(obj.Key, b.cfg.Prefix), Size: obj.Size, ModTime: obj.LastModified}); err != nil {
			return err
		}
	}
	return ctx.Err()
}

func (b *Backend) Delete(ctx context.Context, key string) error {
	ctx, cancel := context.WithTimeout(ctx, b.cfg.Timeout)
	defer cancel()
	err := b.client.RemoveObject(ctx, b.cfg.Bucket, b.cfg.Prefix+key, minio.RemoveObjectOptions{})
	if err != nil && minio.ToErrorResponse(err).Code == "NoSuchKey" {
		return nil
	}
	return b.wrap("delete", key, err)
}

// wrap names what failed in words that hold for every backend.
func (b *Backend) wrap(op, key string, err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, context.Canceled) {
		return err
	}
	what := op
	if key != "" {
		what += " " + key
	}
	resp := minio.ToErrorResponse(err)
	switch resp.Code {
	case "NoSuchKey", "NoSuchBucket":
		return blob.Errorf(blob.ErrNotFound, "%s: %s: %s", b, what, resp.Code)
	case "AccessDenied", "InvalidAccessKeyId", "SignatureDoesNotMatch", "InvalidToken", "ExpiredToken", "AuthorizationHeaderMalformed":
		return blob.Errorf(blob.ErrAccessDenied, "%s: %s: %s (%s); check the store's credentials (AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY or ZEISH_IMAGE_STORE's credentials=)", b, what, resp.Code, resp.Message)
	case "BadDigest", "InvalidDigest", "XAmzContentSHA256Mismatch", "XAmzContentChecksumMismatch":
		return blob.Errorf(blob.ErrBadDigest, "%s: %s: %s", b, what, resp.Code)
	case "EntityTooLarge", "XMinioStorageFull", "QuotaExceeded":
		return blob.Errorf(blob.ErrFull, "%s: %s: %s", b, what, resp.Code)
	}
	switch resp.StatusCode {
	case http.StatusNotFound:
		return blob.Errorf(blob.ErrNotFound, "%s: %s", b, what)
	case http.StatusForbidden, http.StatusUnauthorized:
		return blob.Errorf(blob.ErrAccessDenied, "%s: %s: %s; check the store's credentials", b, what, resp.Code)
	}
	var netErr net.Error
	var urlErr *url.Error
	if errors.As(err, &netErr) || errors.As(err, &urlErr) || errors.Is(err, context.DeadlineExceeded) || resp.StatusCode >= 500 {
		return blob.Errorf(blob.ErrUnreachable, "%s: %s: %v", b, what, err)
	}
	return fmt.Errorf("%s: %s: %w", b, what, err)
}
