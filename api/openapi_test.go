package api_test

import (
	"reflect"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/getkin/kin-openapi/openapi3"

	"github.com/zeish/zeish/api"
	"github.com/zeish/zeish/guest"
	"github.com/zeish/zeish/sandbox"
)

// schemaTypes pairs every schema of openapi.yaml that mirrors a Go wire type
// with that type.
var schemaTypes = map[string]any{
	"Error":                 api.ErrorBody{},
	"Health":                api.Health{},
	"CreateSandboxRequest":  api.CreateSandboxRequest{},
	"Sandbox":               sandbox.Sandbox{},
	"SandboxList":           api.SandboxList{},
	"WaitRequest":           api.WaitRequest{},
	"AccessRequest":         api.AccessRequest{},
	"Access":                api.Access{},
	"CloneRequest":          api.CloneRequest{},
	"CloneResponse":         api.CloneResponse{},
	"LineageEntry":          api.LineageEntry{},
	"Lineage":               api.Lineage{},
	"CreateSnapshotRequest": api.CreateSnapshotRequest{},
	"Snapshot":              sandbox.Snapshot{},
	"SnapshotList":          api.SnapshotList{},
	"RestoreResponse":       api.RestoreResponse{},
	"Event":                 api.Event{},
	"ExecRequest":           api.ExecRequest{},
	"ExecEvent":             api.ExecEvent{},
	"ExecResult":            guest.ExecResult{},
	"FileInfo":              guest.FileInfo{},
	"FileList":              api.FileList{},
	"MkdirRequest":          api.MkdirRequest{},
	"Process":               guest.Process{},
	"ProcessList":           api.ProcessList{},
	"KillRequest":           api.KillRequest{},
	"DesktopAction":         api.DesktopAction{},
	"DesktopActionResult":   api.DesktopActionResult{},
	"DesktopStatus":         api.DesktopStatus{},
	"Account":               api.Account{},
	"CreateAccountRequest":  api.CreateAccountRequest{},
	"AccountList":           api.AccountList{},
	"APIKey":                api.APIKey{},
	"CreatedAPIKey":         api.CreatedAPIKey{},
	"APIKeyList":            api.APIKeyList{},
	"Prices":                api.Prices{},
	"Usage":                 api.Usage{},
	"SandboxUsage":          api.SandboxUsage{},
	"UsageReport":           api.UsageReport{},
	"PriceEstimate":         api.PriceEstimate{},
}

// requestSchemas are decoded by the server, which refuses unknown fields.
var requestSchemas = []string{"CreateSandboxRequest", "WaitRequest", "AccessRequest", "CloneRequest",
	"CreateSnapshotRequest", "ExecRequest", "MkdirRequest", "KillRequest", "CreateAccountRequest",
	"DesktopAction"}

func loadDoc(t *testing.T) *openapi3.T {
	t.Helper()
	loader := openapi3.NewLoader()
	doc, err := loader.LoadFromData(api.OpenAPI)
	if err != nil {
		t.Fatal(err)
	}
	if err := doc.Validate(loader.Context); err != nil {
		t.Fatal(err)
	}
	return doc
}

// TestSchemasMatchGoTypes checks that each schema has exactly the Go type's
// JSON fields, requires exactly those the encoder always writes (no
// omitempty), and gives each a matching JSON type, recursively.
func TestSchemasMatchGoTypes(t *testing.T) {
	doc := loadDoc(t)
	for name, v := range schemaTypes {
		ref := doc.Components.Schemas[name]
		if ref == nil {
			t.Errorf("no schema %s for %T", name, v)
			continue
		}
		checkStruct(t, name, ref.Value, reflect.TypeOf(v))
	}
	for _, name := range requestSchemas {
		s := doc.Components.Schemas[name].Value
		if s.AdditionalProperties.Has == nil || *s.AdditionalProperties.Has {
			t.Errorf("%s: a request body needs additionalProperties: false (the server refuses unknown fields)", name)
		}
	}
}

// resolve steps through a property's allOf wrapper (used to give a $ref its
// own description) to the schema it wraps.
func resolve(s *openapi3.Schema) *openapi3.Schema {
	if len(s.AllOf) == 1 && s.Type == nil && len(s.Properties) == 0 {
		return s.AllOf[0].Value
	}
	return s
}

func checkStruct(t *testing.T, where string, s *openapi3.Schema, typ reflect.Type) {
	t.Helper()
	s = resolve(s)
	if !s.Type.Is("object") {
		t.Errorf("%s: type %v, want object for %s", where, s.Type.Slice(), typ)
		return
	}
	var fields, required []string
	for i := 0; i < typ.NumField(); i++ {
		f := typ.Field(i)
		tag := f.Tag.Get("json")
		name, opts, _ := strings.Cut(tag, ",")
		if name == "-" || !f.IsExported() {
			continue
		}
		if name == "" {
			name = f.Name
		}
		fields = append(fields, name)
		if !strings.Contains(opts, "omitempty") {
			required = append(required, name)
		}
		prop := s.Properties[name]
		if prop == nil {
			continue // reported below
		}
		checkType(t, where+"."+name, prop.Value, f.Type)
	}
	var props []string
	for p := range s.Properties {
		props = append(props, p)
	}
	sort.Strings(fields)
	sort.Strings(props)
	sort.Strings(required)
	req := slices.Clone(s.Required)
	sort.Strings(req)
	if !slices.Equal(fields, props) {
		t.Errorf("%s: properties %v, want the JSON fields of %s: %v", where, props, typ, fields)
	}
	if !slices.Equal(required, req) {
		t.Errorf("%s: required %v, want the fields %s always encodes: %v", where, req, typ, required)
	}
}

var timeType = reflect.TypeOf(time.Time{})

func checkType(t *testing.T, where string, s *openapi3.Schema, typ reflect.Type) {
	t.Helper()
	s = resolve(s)
	for typ.Kind() == reflect.Pointer {
		typ = typ.Elem()
	}
	want := ""
	switch {
	case typ == timeType:
		want = "string"
		if s.Format != "date-time" {
			t.Errorf("%s: format %q, want date-time", where, s.Format)
		}
	case typ.Kind() == reflect.Slice && typ.Elem().Kind() == reflect.Uint8:
		want = "string"
		if s.Format != "byte" {
			t.Errorf("%s: format %q, want byte (base64)", where, s.Format)
		}
	case typ.Kind() == reflect.String:
		want = "string"
	case typ.Kind() == reflect.Bool:
		want = "boolean"
	case typ.Kind() >= reflect.Int && typ.Kind() <= reflect.Uint64:
		want = "integer"
		if (typ.Kind() == reflect.Int64 || typ.Kind() == reflect.Uint64) && s.Format != "int64" {
			t.Errorf("%s: format %q, want int64", where, s.Format)
		}
	case typ.Kind() == reflect.Float32 || typ.Kind() == reflect.Float64:
		want = "number"
	case typ.Kind() == reflect.Slice:
		want = "array"
		if s.Items != nil {
			checkType(t, where+"[]", s.Items.Value, typ.Elem())
		}
	case typ.Kind() == reflect.Map:
		want = "object"
		if s.AdditionalProperties.Schema != nil {
			checkType(t, where+"{}", s.AdditionalProperties.Schema.Value, typ.Elem())
		}
	case typ.Kind() == reflect.Struct:
		checkStruct(t, where, s, typ)
		return
	default:
		t.Errorf("%s: no JSON type for %s", where, typ)
		return
	}
	if !s.Type.Is(want) {
		t.Errorf("%s: type %v, want %s for %s", where, s.Type.Slice(), want, typ)
	}
}

// TestSizesAndStatesMatchGo checks the enums and bounds the document states
// against the Go definitions they come from.
func TestSizesAndStatesMatchGo(t *testing.T) {
	doc := loadDoc(t)
	schemas := doc.Components.Schemas
	var states []string
	for _, v := range schemas["State"].Value.Enum {
		states = append(states, v.(string))
	}
	want := []string{string(sandbox.StateStarting), string(sandbox.StateRunning), string(sandbox.StatePaused),
		string(sandbox.StateStopping), string(sandbox.StateStopped), string(sandbox.StateDeleting),
		string(sandbox.StateDestroyed), string(sandbox.StateError)}
	if !slices.Equal(states, want) {
		t.Errorf("State enum %v, want %v", states, want)
	}

	// Every error_code, of sandboxes and of templates, is in the
	// document's enum and described there.
	for _, ec := range []struct {
		schema string
		codes  []string
	}{{"Sandbox", sandbox.ErrorCodes}, {"Template", sandbox.TemplateErrorCodes}} {
		var codes []string
		errCode := schemas[ec.schema].Value.Properties["error_code"].Value
		for _, v := range errCode.Enum {
			codes = append(codes, v.(string))
		}
		if !slices.Equal(codes, ec.codes) {
			t.Errorf("%s.error_code enum %v, want %v", ec.schema, codes, ec.codes)
		}
		for _, c := range ec.codes {
			if !strings.Contains(errCode.Description, "`"+c+"`") {
				t.Errorf("%s.error_code does not describe %s", ec.schema, c)
			}
		}
	}

	var presets []string
	for _, v := range schemas["SizePreset"].Value.Enum {
		presets = append(presets, v.(string))
	}
	var wantPresets []string
	for name, size := range sandbox.Presets {
		wantPresets = append(wantPresets, name)
		desc := schemas["SizePreset"].Value.Description
		if !strings.Contains(desc, "`"+name+"`") || !strings.Contains(desc, strconv.Itoa(size.MemoryMiB)+" MiB") ||
			!strings.Contains(desc, strconv.Itoa(size.DiskMiB)+" MiB") {
			t.Errorf("SizePreset description does not state %s = %+v", name, size)
		}
	}
	sort.Strings(presets)
	sort.Strings(wantPresets)
	if !slices.Equal(presets, wantPresets) {
		t.Errorf("SizePreset enum %v, want %v", presets, wantPresets)
	}

	create := schemas["CreateSandboxRequest"].Value.Properties
	bounds := []struct {
		field    string
		min, max int
	}{
		{"vcpus", sandbox.MinVCPUs, sandbox.MaxVCPUs},
		{"memory_mib", sandbox.MinMemoryMiB, sandbox.MaxMemoryMiB},
		{"disk_mib", sandbox.MinDiskMiB, sandbox.MaxDiskMiB},
	}
	for _, b := range bounds {
		s := create[b.field].Value
		if s.Min == nil || s.Max == nil || int(*s.Min) != b.min || int(*s.Max) != b.max {
			t.Errorf("CreateSandboxRequest.%s: bounds %v..%v, want %d..%d", b.field, s.Min, s.Max, b.min, b.max)
		}
	}
	if c := schemas["CloneRequest"].Value.Properties["count"].Value; c.Max == nil || int(*c.Max) != api.MaxCloneCount {
		t.Errorf("CloneRequest.count: maximum %v, want %d", c.Max, api.MaxCloneCount)
	}

	// Ids: the patterns accept what the server generates and nothing else.
	for schema, prefix := range map[string]string{"SandboxID": sandbox.PrefixSandbox, "SnapshotID": sandbox.PrefixSnapshot, "AccountID": sandbox.PrefixAccount} {
		s := schemas[schema].Value
		if err := s.VisitJSON(sandbox.NewID(prefix)); err != nil {
			t.Errorf("%s refuses a generated id: %v", schema, err)
		}
		for _, bad := range []string{"", prefix, "xyz_00000000000000000000", sandbox.NewID(prefix) + "0", strings.ToUpper(sandbox.NewID(prefix))} {
			if s.VisitJSON(bad) == nil {
				t.Errorf("%s accepts %q", schema, bad)
			}
		}
	}
	if err := schemas["AccountID"].Value.VisitJSON(sandbox.PrefixAccount + "admin"); err != nil {
		t.Errorf("AccountID refuses the admin account: %v", err)
	}
	name := schemas["SandboxName"].Value
	for i := 0; i < 20; i++ {
		if n := sandbox.NewName(); name.VisitJSON(n) != nil || sandbox.CheckName(n) != nil {
			t.Errorf("SandboxName refuses generated name %q", n)
		}
	}
	for _, bad := range []string{"", "-a", "a-", "A", "a_b", strings.Repeat("a", 64)} {
		if name.VisitJSON(bad) == nil {
			t.Errorf("SandboxName accepts %q", bad)
		}
	}
}
