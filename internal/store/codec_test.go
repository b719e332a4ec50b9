package store

import (
	"testing"

	"github.com/zeish/zeish/internal/secrets"
	"github.com/zeish/zeish/sandbox"
)

// A sandbox whose secrets cannot be opened (another key, a damaged row, no
// key) still reads, marked, without them; writing it back keeps them as
// stored, so the right key opens them again.
func TestUndecryptableSecretsKeepTheRowReadable(t *testing.T) {
	right, err := secrets.LoadOrCreate(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	wrong, err := secrets.LoadOrCreate(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	r := &SandboxRecord{Sandbox: sandbox.Sandbox{ID: "sbx_1", Name: "one", State: sandbox.StateRunning},
		SecretEnv: map[string]string{"TOKEN": "s3cret"}}
	data, err := Codec{Secrets: right}.Encode(r)
	if err != nil {
		t.Fatal(err)
	}
	for name, c := range map[string]Codec{"another key": {Secrets: wrong}, "no key": {}} {
		got, err := c.Decode("sbx_1", data)
		if err != nil {
			t.Fatalf("%s: decode: %v", name, err)
		}
		if got.Name != "one" || !got.SecretsUnreadable() || len(got.SecretEnv) != 0 {
			t.Fatalf("%s: %+v unreadable=%v", name, got, got.SecretsUnreadable())
		}
		got.State = sandbox.StateStopped // a write by a store that cannot open them
		again, err := c.Encode(got)
		if err != nil {
			t.Fatalf("%s: encode: %v", name, err)
		}
		back, err := Codec{Secrets: right}.Decode("sbx_1", again)
		if err != nil || back.SecretEnv["TOKEN"] != "s3cret" || back.SecretsUnreadable() || back.State != sandbox.StateStopped {
			t.Fatalf("%s: after the write: %+v %v", name, back, err)
		}
	}
	// New secrets replace unreadable ones.
	got, _ := Codec{Secrets: wrong}.Decode("sbx_1", data)
	got.SecretEnv = map[string]string{"TOKEN": "new"}
	again, _ := Codec{Secrets: wrong}.Encode(got)
	if back, err := (Codec{Secrets: wrong}).Decode("sbx_1", again); err != nil || back.SecretEnv["TOKEN"] != "new" || back.SecretsUnreadable() {
		t.Fatalf("new secrets: %+v %v", back, err)
	}
	// A readable row is not marked.
	if ok, err := (Codec{Secrets: right}).Decode("sbx_1", data); err != nil || ok.SecretsUnreadable() {
		t.Fatalf("readable row: %v %v", ok.SecretsUnreadable(), err)
	}
}

// A store without the secrets key (a node agent's) writes the form the
// key's holder sealed for that sandbox, which the holder opens; sealed for
// another sandbox, it does not open.
func TestSealedElsewhere(t *testing.T) {
	key, err := secrets.LoadOrCreate(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	holder := Codec{Secrets: key}
	env := map[string]string{"TOKEN": "s3cret"}
	sealed, err := holder.Seal("sbx_1", env)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		id   string
		open bool
	}{{"sbx_1", true}, {"sbx_2", false}} {
		r := &SandboxRecord{Sandbox: sandbox.Sandbox{ID: c.id, Name: "one"}}
		r.SetSealedSecrets(sealed)
		data, err := Codec{}.Encode(r)
		if err != nil {
			t.Fatal(err)
		}
		back, err := holder.Decode(c.id, data)
		if err != nil {
			t.Fatal(err)
		}
		if got := back.SecretEnv["TOKEN"] == "s3cret"; got != c.open || back.SecretsUnreadable() == c.open {
			t.Fatalf("%s: opened %v, want %v (%+v)", c.id, got, c.open, back)
		}
	}
	if _, err := (Codec{}).Seal("sbx_1", env); err == nil {
		t.Fatal("sealed without a key")
	}
}
