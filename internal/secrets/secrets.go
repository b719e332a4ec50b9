// Package secrets seals values at rest (sandbox secrets in the store) with
// AES-256-GCM under a key kept in the data dir, so the database file alone
// never holds them in the clear.
package secrets

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// KeyFile is the key's name in the data dir (mode 0600, made on first start).
const KeyFile = "secrets.key"

// version prefixes every sealed value, so the scheme can change later.
const version = "v1:"

// Box seals and opens values with one key.
type Box struct{ aead cipher.AEAD }

// New makes a Box from a 32-byte key.
func New(key []byte) (*Box, error) {
	if len(key) != 32 {
		return nil, fmt.Errorf("secrets key: %d bytes, want 32", len(key))
	}
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, err
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return nil, err
	}
	return &Box{aead: aead}, nil
}

// LoadOrCreate reads <dataDir>/secrets.key, creating it (0600) if missing.
func LoadOrCreate(dataDir string) (*Box, error) {
	path := filepath.Join(dataDir, KeyFile)
	key, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		key = make([]byte, 32)
		if _, err := rand.Read(key); err != nil {
			return nil, err
		}
		// O_EXCL: two processes starting at once must not each write a key.
		f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
		if err != nil {
			return nil, fmt.Errorf("create %s: %w", path, err)
		}
		if _, err := f.Write(key); err != nil {
			f.Close()
			return nil, fmt.Errorf("write %s: %w", path, err)
		}
		if err := f.Close(); err != nil {
			return nil, err
		}
	} else if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	box, err := New(key)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return box, nil
}

// Seal encrypts plain; aad binds the result to its owner (a sandbox id), so
// a sealed value copied onto another row does not open there.
func (b *Box) Seal(plain, aad []byte) string {
	nonce := make([]byte, b.aead.NonceSize())
	rand.Read(nonce)
	out := b.aead.Seal(nonce, nonce, plain, aad)
	return version + base64.RawStdEncoding.EncodeToString(out)
}

// Open decrypts what Seal made with the same aad.
func (b *Box) Open(sealed string, aad []byte) ([]byte, error) {
	if len(sealed) < len(version) || sealed[:len(version)] != version {
		return nil, errors.New("sealed value: unknown format")
	}
	raw, err := base64.RawStdEncoding.DecodeString(sealed[len(version):])
	if err != nil {
		return nil, fmt.Errorf("sealed value: %w", err)
	}
	n := b.aead.NonceSize()
	if len(raw) < n {
		return nil, errors.New("sealed value: too short")
	}
	plain, err := b.aead.Open(nil, raw[:n], raw[n:], aad)
	if err != nil {
		return nil, fmt.Errorf("sealed value does not open with this key (was %s replaced?): %w", KeyFile, err)
	}
	return plain, nil
}
