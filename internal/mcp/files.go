package mcp

import (
	"bytes"
	"context"
	"encoding/base64"
	"fmt"
	"io"
	"io/fs"
	"strconv"
	"time"
	"unicode/utf8"

	sdkmcp "github.com/modelcontextprotocol/go-sdk/mcp"

	zeish "github.com/zeish/zeish/sdk/go"
)

const (
	// defaultReadBytes and maxReadBytes bound read_file: a file's content goes
	// into the agent's context, and base64 makes it a third larger.
	defaultReadBytes = 256 << 10
	maxReadBytes     = 4 << 20
	// maxWriteBytes bounds write_file's decoded content; it arrives inside a
	// JSON message anyway.
	maxWriteBytes = 16 << 20
	// fileTimeout bounds one file call.
	fileTimeout = 5 * time.Minute
)

const (
	encodingText   = "text"
	encodingBase64 = "base64"
)

type ReadFileInput struct {
	SandboxID string `json:"sandbox_id" jsonschema:"sandbox to read from (its id sbx_… or its name)"`
	Path      string `json:"path" jsonschema:"absolute path of the file in the sandbox"`
	Encoding  string `json:"encoding,omitempty" jsonschema:"text, base64, or empty to choose: text when the content is valid UTF-8 without NUL bytes, else base64"`
	MaxBytes  int    `json:"max_bytes,omitempty" jsonschema:"read at most this many bytes from the start; default 262144, at most 4194304"`
}

type ReadFileOutput struct {
	Path      string `json:"path" jsonschema:"the file read"`
	Content   string `json:"content" jsonschema:"the file's content, as encoding says"`
	Encoding  string `json:"encoding" jsonschema:"text or base64"`
	Size      int64  `json:"size" jsonschema:"the file's full size in bytes"`
	Truncated bool   `json:"truncated,omitempty" jsonschema:"only the first max_bytes bytes are in content"`
}

type WriteFileInput struct {
	SandboxID string `json:"sandbox_id" jsonschema:"sandbox to write to (its id sbx_… or its name)"`
	Path      string `json:"path" jsonschema:"absolute path of the file in the sandbox; missing parent directories are created; an existing file is replaced"`
	Content   string `json:"content" jsonschema:"the file's new content, as encoding says"`
	Encoding  string `json:"encoding,omitempty" jsonschema:"text (default) or base64 (for binary content)"`
	Mode      string `json:"mode,omitempty" jsonschema:"permission bits in octal, for example 0755 for a script; default 0644"`
}

type FileEntry struct {
	Name    string    `json:"name" jsonschema:"file name"`
	Path    string    `json:"path" jsonschema:"absolute path"`
	Size    int64     `json:"size" jsonschema:"size in bytes"`
	Mode    string    `json:"mode" jsonschema:"type and permissions, like -rw-r--r-- or drwxr-xr-x"`
	IsDir   bool      `json:"is_dir" jsonschema:"true for a directory"`
	ModTime time.Time `json:"mod_time" jsonschema:"last modification (RFC 3339)"`
	Symlink string    `json:"symlink,omitempty" jsonschema:"target, when the entry is a symbolic link"`
}

func fileEntry(fi zeish.FileInfo) FileEntry {
	return FileEntry{Name: fi.Name, Path: fi.Path, Size: fi.Size, Mode: fi.Mode, IsDir: fi.IsDir, ModTime: fi.ModTime, Symlink: fi.Symlink}
}

type ListFilesInput struct {
	SandboxID string `json:"sandbox_id" jsonschema:"sandbox to look in (its id sbx_… or its name)"`
	Path      string `json:"path" jsonschema:"absolute path of a directory in the sandbox"`
}

type ListFilesOutput struct {
	Files []FileEntry `json:"files" jsonschema:"the directory's entries"`
}

func (t *tools) addFileTools(s *sdkmcp.Server) {
	add(s, &sdkmcp.Tool{
		Name:  "read_file",
		Title: "Read a file in a sandbox",
		Description: "Read a file from a sandbox. Text comes back as is; binary content (or encoding base64) comes back " +
			"base64-encoded. Large files are cut at max_bytes (truncated says so); size is always the full size.",
		Annotations: &sdkmcp.ToolAnnotations{ReadOnlyHint: true, OpenWorldHint: ptr(false)},
	}, t.readFile)
	add(s, &sdkmcp.Tool{
		Name:  "write_file",
		Title: "Write a file in a sandbox",
		Description: "Create or replace a file in a sandbox with the given content (text, or base64 for binary). " +
			"Parent directories are created. Set mode 0755 for a script you want to run.",
		Annotations: &sdkmcp.ToolAnnotations{DestructiveHint: ptr(true), IdempotentHint: true, OpenWorldHint: ptr(false)},
	}, t.writeFile)
	add(s, &sdkmcp.Tool{
		Name:        "list_files",
		Title:       "List a directory in a sandbox",
		Description: "List the entries of a directory in a sandbox with their size, type, permissions and modification time.",
		Annotations: &sdkmcp.ToolAnnotations{ReadOnlyHint: true, OpenWorldHint: ptr(false)},
	}, t.listFiles)
}

func (t *tools) readFile(ctx context.Context, in ReadFileInput) (ReadFileOutput, error) {
	limit := defaultReadBytes
	switch {
	case in.MaxBytes < 0 || in.MaxBytes > maxReadBytes:
		return ReadFileOutput{}, invalidArgf("max_bytes must be between 1 and %d", maxReadBytes)
	case in.MaxBytes > 0:
		limit = in.MaxBytes
	}
	if in.Encoding != "" && in.Encoding != encodingText && in.Encoding != encodingBase64 {
		return ReadFileOutput{}, invalidArgf("encoding must be text or base64, not %q", in.Encoding)
	}
	ctx, cancel := context.WithTimeout(ctx, fileTimeout)
	defer cancel()
	conn, err := t.client.Connect(ctx, in.SandboxID)
	if err != nil {
		return ReadFileOutput{}, err
	}
	fi, err := conn.Stat(ctx, in.Path)
	if err != nil {
		return ReadFileOutput{}, err
	}
	if fi.IsDir {
		return ReadFileOutput{}, invalidArgf("%s is a directory; use list_files", in.Path)
	}
	rc, err := conn.ReadFile(ctx, in.Path)
	if err != nil {
		return ReadFileOutput{}, err
	}
	defer rc.Close()
	data, err := io.ReadAll(io.LimitReader(rc, int64(limit)+1))
	if err != nil {
		return ReadFileOutput{}, fmt.Errorf("reading %s: %w", in.Path, err)
	}
	out := ReadFileOutput{Path: in.Path, Size: max(fi.Size, int64(len(data)))}
	if len(data) > limit {
		data, out.Truncated = data[:limit], true
	}
	out.Encoding = in.Encoding
	if out.Encoding == "" {
		out.Encoding = encodingBase64
		if isText(data, out.Truncated) {
			out.Encoding = encodingText
		}
	}
	if out.Encoding == encodingText {
		out.Content = string(data)
	} else {
		out.Content = base64.StdEncoding.EncodeToString(data)
	}
	return out, nil
}

// isText reports whether data reads as text. A cut may fall inside a UTF-8
// sequence, so a truncated file may end in an incomplete one.
func isText(data []byte, truncated bool) bool {
	if bytes.IndexByte(data, 0) >= 0 {
		return false
	}
	if truncated {
		for i := 0; i < utf8.UTFMax-1 && len(data) > 0 && !utf8.Valid(data); i++ {
			data = data[:len(data)-1]
		}
	}
	return utf8.Valid(data)
}

func (t *tools) writeFile(ctx context.Context, in WriteFileInput) (FileEntry, error) {
	var data []byte
	switch in.Encoding {
	case "", encodingText:
		data = []byte(in.Content)
	case encodingBase64:
		var err error
		if data, err = base64.StdEncoding.DecodeString(in.Content); err != nil {
			return FileEntry{}, invalidArgf("content is not valid base64: %v", err)
		}
	default:
		return FileEntry{}, invalidArgf("encoding must be text or base64, not %q", in.Encoding)
	}
	if len(data) > maxWriteBytes {
		return FileEntry{}, invalidArgf("content is %d bytes; at most %d fit in one write_file", len(data), maxWriteBytes)
	}
	var perm fs.FileMode
	if in.Mode != "" {
		bits, err := strconv.ParseUint(in.Mode, 8, 32)
		if err != nil || bits > 0o7777 || bits == 0 {
			return FileEntry{}, invalidArgf("mode must be octal permission bits such as 0644 or 0755, not %q", in.Mode)
		}
		perm = fs.FileMode(bits)
	}
	ctx, cancel := context.WithTimeout(ctx, fileTimeout)
	defer cancel()
	conn, err := t.client.Connect(ctx, in.SandboxID)
	if err != nil {
		return FileEntry{}, err
	}
	fi, err := conn.WriteFile(ctx, in.Path, bytes.NewReader(data), perm)
	if err != nil {
		return FileEntry{}, err
	}
	return fileEntry(fi), nil
}

func (t *tools) listFiles(ctx context.Context, in ListFilesInput) (ListFilesOutput, error) {
	ctx, cancel := context.WithTimeout(ctx, fileTimeout)
	defer cancel()
	conn, err := t.client.Connect(ctx, in.SandboxID)
	if err != nil {
		return ListFilesOutput{}, err
	}
	list, err := conn.ListFiles(ctx, in.Path)
	if err != nil {
		return ListFilesOutput{}, err
	}
	out := ListFilesOutput{Files: make([]FileEntry, 0, len(list))}
	for _, fi := range list {
		out.Files = append(out.Files, fileEntry(fi))
	}
	return out, nil
}
