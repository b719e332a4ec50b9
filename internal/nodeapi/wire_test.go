package nodeapi

import (
	"encoding/json"
	"reflect"
	"testing"
	"time"

	"github.com/zeish/zeish/api"
	"github.com/zeish/zeish/internal/catalog"
	"github.com/zeish/zeish/internal/store"
	"github.com/zeish/zeish/sandbox"
)

// notOnTheWire are the fields of a sandbox record that never cross, and
// why. A new field of store.SandboxRecord or sandbox.Sandbox fails
// TestWireCarriesEverySharedField until it is mapped in wire.go (and the
// proto, as a new minor version) or listed here.
var notOnTheWire = map[string]string{
	"MAC":          "VM-private: the node's",
	"Handle":       "VM-private: the node's",
	"Disk":         "VM-private: the node's",
	"DiskBase":     "VM-private: the node's",
	"Layers":       "VM-private: the node's",
	"ResumeImage":  "VM-private: the node's",
	"Kernel":       "VM-private: the node's",
	"Initrd":       "VM-private: the node's",
	"KernelArgs":   "VM-private: the node's",
	"Pristine":     "VM-private: the node's",
	"Gen":          "VM-private: the node's",
	"SecretEnv":    "travels on its own (secret_env), with the call that needs it",
	"NetKept":      "the control plane's bookkeeping of a delete",
	"LostFrom":     "the control plane's (node_lost)",
	"ImageDurable": "the control plane's: read from the image store when it shows a sandbox",
}

var wireTime = time.Date(2026, 12, 4, 10, 11, 12, 13000, time.UTC)

// fill sets every exported field of v not in skip to a value that is not
// its zero, recursing into embedded and nested structs.
func fill(t *testing.T, v reflect.Value, skip map[string]string) {
	t.Helper()
	for i := range v.NumField() {
		f, sf := v.Field(i), v.Type().Field(i)
		if !sf.IsExported() || skip[sf.Name] != "" {
			continue
		}
		switch {
		case sf.Type == reflect.TypeOf(sandbox.State("")):
			f.SetString(string(sandbox.StateRunning)) // a state the wire knows
		case sf.Type == reflect.TypeOf(time.Time{}):
			f.Set(reflect.ValueOf(wireTime))
		case sf.Type == reflect.TypeOf(&time.Time{}):
			at := wireTime.Add(time.Hour)
			f.Set(reflect.ValueOf(&at))
		case sf.Type == reflect.TypeOf([]store.Interval{}):
			end := wireTime.Add(time.Minute)
			f.Set(reflect.ValueOf([]store.Interval{{Start: wireTime, End: &end}, {Start: wireTime.Add(time.Hour)}}))
		case sf.Anonymous || sf.Type.Kind() == reflect.Struct:
			fill(t, f, skip)
		case sf.Type.Kind() == reflect.Pointer && sf.Type.Elem().Kind() == reflect.Struct:
			f.Set(reflect.New(sf.Type.Elem()))
			fill(t, f.Elem(), skip)
		case sf.Type.Kind() == reflect.String:
			f.SetString("v-" + sf.Name)
		case sf.Type.Kind() == reflect.Bool:
			f.SetBool(true)
		case sf.Type.Kind() >= reflect.Int && sf.Type.Kind() <= reflect.Int64:
			f.SetInt(int64(7 + i))
		case sf.Type.Kind() >= reflect.Uint && sf.Type.Kind() <= reflect.Uint64:
			f.SetUint(uint64(9 + i))
		case sf.Type == reflect.TypeOf(map[string]string{}):
			f.Set(reflect.ValueOf(map[string]string{"k": sf.Name}))
		case sf.Type == reflect.TypeOf([]string{}):
			f.Set(reflect.ValueOf([]string{"a-" + sf.Name, "b"}))
		case sf.Type == reflect.TypeOf([]api.GitFile{}):
			f.Set(reflect.ValueOf([]api.GitFile{{Path: "a", Status: " M"}, {Path: "b", Status: "??"}}))
		case sf.Type == reflect.TypeOf([]int{}):
			f.Set(reflect.ValueOf([]int{80, 8000 + i}))
		case sf.Type == reflect.TypeOf(json.RawMessage{}):
			f.Set(reflect.ValueOf(json.RawMessage(`{"pid":42}`)))
		default:
			t.Fatalf("field %s (%s): teach fill its kind, then map it in wire.go or list it in notOnTheWire", sf.Name, sf.Type)
		}
	}
}

// Every field the two sides share survives the wire both ways; the ones
// that must not cross (notOnTheWire) do not.
func TestWireCarriesEverySharedField(t *testing.T) {
	r := new(store.SandboxRecord)
	fill(t, reflect.ValueOf(r).Elem(), notOnTheWire)
	back, err := SandboxFromWire(SandboxToWire(r))
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(back, r) {
		t.Fatalf("a sandbox changed on the wire:\n sent %+v\n  got %+v", r, back)
	}
	// The node's own fields stay home.
	private := &store.SandboxRecord{MAC: "02:00:00:00:00:01", Disk: "/d", Layers: []string{"img_1"}, Gen: 3, Pristine: true,
		SecretEnv: map[string]string{"TOKEN": "s"}, LostFrom: sandbox.StateRunning, Kernel: "/k"}
	if back, _ := SandboxFromWire(SandboxToWire(private)); back.MAC != "" || back.Disk != "" || back.Layers != nil || back.Gen != 0 ||
		back.Pristine || back.SecretEnv != nil || back.LostFrom != "" || back.Kernel != "" {
		t.Fatalf("private fields crossed: %+v", back)
	}

	s := new(store.SnapshotRecord)
	fill(t, reflect.ValueOf(s).Elem(), map[string]string{"Image": "the node's image id", "Durable": "the control plane's: read from the image store"})
	sback, err := SnapshotFromWire(SnapshotToWire(s))
	if err != nil || !reflect.DeepEqual(sback, s) {
		t.Fatalf("a snapshot changed on the wire:\n sent %+v\n  got %+v (%v)", s, sback, err)
	}

	c := new(store.NodeCapacity)
	fill(t, reflect.ValueOf(c).Elem(), nil)
	if back := CapacityFromWire(CapacityToWire(*c)); back != *c {
		t.Fatalf("capacity changed on the wire: %+v, got %+v", *c, back)
	}
}

// vmPrivate are the fields of a sandbox record a node of 2.3 keeps in its
// data dir (internal/nodestore): they never cross, not even in its store
// calls.
var vmPrivate = map[string]string{
	"Handle": "-", "Disk": "-", "DiskBase": "-", "Kernel": "-", "Initrd": "-", "KernelArgs": "-",
	"Pristine": "-", "Gen": "-", "NetKept": "-",
	"SecretEnv": "the control plane's; a new row's sealed form crosses once", "ImageDurable": "the control plane's",
}

// A node's store calls (2.3) carry every field of a record but the VM's
// private state, which stays on the node.
func TestStoreCallsCarryAllButVMPrivateState(t *testing.T) {
	r := new(store.SandboxRecord)
	fill(t, reflect.ValueOf(r).Elem(), vmPrivate)
	r.LostFrom = sandbox.StateStopped
	r.SetSealedSecrets("sealed")
	back, err := StoredFromWire(StoredToWire(r))
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(back, r) {
		t.Fatalf("a stored sandbox changed on the wire:\n sent %+v\n  got %+v", r, back)
	}
	priv := new(store.SandboxRecord)
	fill(t, reflect.ValueOf(priv).Elem(), map[string]string{"ImageDurable": "-"})
	back, err = StoredFromWire(StoredToWire(priv))
	if err != nil {
		t.Fatal(err)
	}
	got := reflect.ValueOf(back).Elem()
	for name := range vmPrivate {
		if f := got.FieldByName(name); !f.IsZero() {
			t.Errorf("VM-private %s crossed: %v", name, f.Interface())
		}
	}
}

// The 2.1 messages carry every field of what they map, but the paths of a
// template's files on its node and an upload's reader.
func TestWireCarriesTemplatesAndGuestReads(t *testing.T) {
	tpl := new(sandbox.Template)
	fill(t, reflect.ValueOf(tpl).Elem(), map[string]string{"Kernel": "a path on the node", "Initrd": "a path on the node",
		"BaseDisk": "a path on the node", "Dir": "a path on the node"})
	if back := TemplateFromWire(TemplateToWire(*tpl)); !reflect.DeepEqual(back, *tpl) {
		t.Fatalf("a template changed on the wire:\n sent %+v\n  got %+v", *tpl, back)
	}
	req := new(catalog.BuildRequest)
	fill(t, reflect.ValueOf(req).Elem(), map[string]string{"Upload": "streams after the spec"})
	if back := BuildSpecFromWire(BuildSpecToWire(*req)); !reflect.DeepEqual(back, *req) {
		t.Fatalf("a build spec changed on the wire:\n sent %+v\n  got %+v", *req, back)
	}
	ev := new(catalog.Event)
	fill(t, reflect.ValueOf(ev).Elem(), map[string]string{"Kernel": "-", "Initrd": "-", "BaseDisk": "-", "Dir": "-"})
	if back := EventFromWire(EventToWire(*ev)); !reflect.DeepEqual(back, *ev) {
		t.Fatalf("a build event changed on the wire:\n sent %+v\n  got %+v", *ev, back)
	}
	git := new(api.GitStatus)
	fill(t, reflect.ValueOf(git).Elem(), nil)
	if back := GitStatusFromWire(GitStatusToWire(*git)); !reflect.DeepEqual(back, *git) {
		t.Fatalf("a git status changed on the wire:\n sent %+v\n  got %+v", *git, back)
	}
	desk := new(api.DesktopStatus)
	fill(t, reflect.ValueOf(desk).Elem(), nil)
	if back := DesktopFromWire(DesktopToWire(*desk)); back != *desk {
		t.Fatalf("a desktop status changed on the wire: %+v, got %+v", *desk, back)
	}
}

// A state a newer side sends that this side does not know is refused, not
// read as another.
func TestUnknownStateRefused(t *testing.T) {
	m := SandboxToWire(&store.SandboxRecord{Sandbox: sandbox.Sandbox{ID: "sbx_1", State: sandbox.StateRunning}})
	m.State = 99
	if _, err := SandboxFromWire(m); err == nil {
		t.Fatal("state 99 was read")
	}
}
