package server

import "testing"

func TestHostPort(t *testing.T) {
	const suffix = ".sbx.example.com"
	tests := []struct {
		host, port, id string
		ok             bool
	}{
		{"8080-sbx-9h80ayv5qv2jaxex5ej0.sbx.example.com", "8080", "sbx_9h80ayv5qv2jaxex5ej0", true},
		{"8080-SBX-9H80AYV5QV2JAXEX5EJ0.SBX.example.com:443", "8080", "sbx_9h80ayv5qv2jaxex5ej0", true},
		{"70000-sbx-abc.sbx.example.com", "70000", "sbx_abc", true}, // the port is checked by the caller
		{"8080-my-name.sbx.example.com", "8080", "my-name", true},   // a name, not an id
		{"api.sbx.example.com", "", "", false},
		{"a.8080-sbx-abc.sbx.example.com", "", "", false},
		{"8080-sbx-abc.other.example.com", "", "", false},
		{"sbx.example.com", "", "", false},
	}
	for _, tc := range tests {
		port, id, ok := hostPort(tc.host, suffix)
		if port != tc.port || id != tc.id || ok != tc.ok {
			t.Errorf("%s: %q %q %v, want %q %q %v", tc.host, port, id, ok, tc.port, tc.id, tc.ok)
		}
	}
}
