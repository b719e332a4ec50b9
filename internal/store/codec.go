package store

import (
	"encoding/json"
	"fmt"

	"github.com/zeish/zeish/errdefs"
	"github.com/zeish/zeish/internal/secrets"
	"github.com/zeish/zeish/sandbox"
)

// Stores keep a sandbox as one JSON document (plus the columns they query
// on), so a new field needs no migration. Codec is that document's form,
// shared by every store: secrets sealed, bound to the sandbox's id.
type Codec struct {
	// Secrets seals SecretEnv; without it a sandbox with secrets is refused
	// rather than written in the clear.
	Secrets *secrets.Box
}

// sandboxRow is a record as stored.
type sandboxRow struct {
	*SandboxRecord
	SealedSecrets string `json:"sealed_secrets,omitempty"`
	// LegacySecrets is how secrets were kept before they were sealed; rows
	// that still hold them are sealed on their next write.
	LegacySecrets map[string]string `json:"secret_env,omitempty"`
}

// Encode is r as stored.
func (c Codec) Encode(r *SandboxRecord) (string, error) {
	row := sandboxRow{SandboxRecord: r}
	if len(r.SecretEnv) > 0 {
		sealed, err := c.Seal(r.ID, r.SecretEnv)
		if err != nil {
			return "", err
		}
		row.SealedSecrets = sealed
	} else {
		row.SealedSecrets = r.unreadable // kept as read, never dropped
	}
	b, err := json.Marshal(row)
	return string(b), err
}

// Seal is env as a store keeps the secrets of sandbox id: sealed, bound to
// the id (a value copied onto another row does not open).
func (c Codec) Seal(id string, env map[string]string) (string, error) {
	if c.Secrets == nil {
		return "", fmt.Errorf("sandbox %s has secrets but the store has no secrets key: %w", id, errdefs.ErrInternal)
	}
	plain, err := json.Marshal(env)
	if err != nil {
		return "", err
	}
	return c.Secrets.Seal(plain, []byte(id)), nil
}

// Decode reads a stored sandbox (id names it in errors only).
func (c Codec) Decode(id, data string) (*SandboxRecord, error) {
	row := sandboxRow{SandboxRecord: new(SandboxRecord)}
	if err := json.Unmarshal([]byte(data), &row); err != nil {
		return nil, fmt.Errorf("decode sandbox %s: %w", id, err)
	}
	r := row.SandboxRecord
	r.SecretEnv = row.LegacySecrets
	if row.SealedSecrets != "" {
		// Secrets that cannot be opened (no key, another key, a damaged
		// row) do not make the sandbox unreadable, which would break every
		// list that includes it: it reads without them, marked, and keeps
		// them as stored.
		env, err := c.openSecrets(r.ID, row.SealedSecrets)
		if err != nil {
			r.unreadable = row.SealedSecrets
		} else {
			r.SecretEnv = env
		}
	}
	return r, nil
}

// Open is what sealed, Seal's output for sandbox id, holds (an error
// when it was sealed for another id or with another key).
func (c Codec) Open(id, sealed string) (map[string]string, error) { return c.openSecrets(id, sealed) }

func (c Codec) openSecrets(id, sealed string) (map[string]string, error) {
	if c.Secrets == nil {
		return nil, fmt.Errorf("sandbox %s has sealed secrets but the store has no secrets key: %w", id, errdefs.ErrInternal)
	}
	plain, err := c.Secrets.Open(sealed, []byte(id))
	if err != nil {
		return nil, fmt.Errorf("secrets of sandbox %s: %v: %w", id, err, errdefs.ErrInternal)
	}
	var env map[string]string
	if err := json.Unmarshal(plain, &env); err != nil {
		return nil, fmt.Errorf("secrets of sandbox %s: %w", id, err)
	}
	return env, nil
}

// templateRow keeps the fields the API hides (paths) when stored.
type templateRow struct {
	sandbox.Template
	Kernel     string `json:"kernel"`
	Initrd     string `json:"initrd"`
	BaseDisk   string `json:"base_disk"`
	KernelArgs string `json:"kernel_args"`
	Dir        string `json:"dir,omitempty"`
}

// EncodeTemplate is t as stored, paths included.
func EncodeTemplate(t sandbox.Template) (string, error) {
	b, err := json.Marshal(templateRow{Template: t, Kernel: t.Kernel, Initrd: t.Initrd, BaseDisk: t.BaseDisk, KernelArgs: t.KernelArgs, Dir: t.Dir})
	return string(b), err
}

// DecodeTemplate reads a stored template.
func DecodeTemplate(data string) (sandbox.Template, error) {
	var row templateRow
	if err := json.Unmarshal([]byte(data), &row); err != nil {
		return sandbox.Template{}, err
	}
	t := row.Template
	t.Kernel, t.Initrd, t.BaseDisk, t.KernelArgs, t.Dir = row.Kernel, row.Initrd, row.BaseDisk, row.KernelArgs, row.Dir
	return t, nil
}
