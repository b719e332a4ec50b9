package api

import "github.com/zeish/zeish/sandbox"

// BuildTemplateRequest asks for a template built from a container image.
// As JSON, From is "registry:host/repo:tag" (or, for the admin account, a
// path on the server: "docker-archive:/p.tar", "oci:/dir", "oci-archive:/p.tar").
// To upload an archive, send multipart/form-data with a "spec" part holding
// this object (From "docker-archive" or "oci-archive") followed by an
// "image" part holding the archive; it is streamed, never held whole.
type BuildTemplateRequest struct {
	Name     string `json:"name"`
	From     string `json:"from"`
	Username string `json:"username,omitempty"` // registry basic auth
	Password string `json:"password,omitempty"`
	// RegistrySecret names an account secret (PUT /public/secrets/{name})
	// holding the registry's credentials: "user:password" for basic auth,
	// anything without a colon for a bearer token. Not with Username/Password.
	RegistrySecret string   `json:"registry_secret,omitempty"`
	DiskMiB        int      `json:"disk_mib,omitempty"`  // root filesystem size; default 1024
	StartCmd       []string `json:"start_cmd,omitempty"` // default the image's Entrypoint + Cmd
	ReadyCmd       []string `json:"ready_cmd,omitempty"`
	// ReadyTimeoutSeconds bounds the wait for ReadyCmd while the template is
	// warmed; default 600.
	ReadyTimeoutSeconds int  `json:"ready_timeout_seconds,omitempty"`
	Cold                bool `json:"cold,omitempty"`
	// VCPUs and MemoryMiB size the machine the warm image is taken on (0:
	// the default size); sandboxes of exactly that size resume it, others
	// boot cold.
	VCPUs     int `json:"vcpus,omitempty"`
	MemoryMiB int `json:"memory_mib,omitempty"`
}

// TemplateList is GET /public/templates.
type TemplateList struct {
	Templates []sandbox.Template `json:"templates"`
}

// TemplateEvent is one server-sent event of GET /public/templates/{id}/events:
// type progress (a build step), log (a line) or state (the template changed).
type TemplateEvent struct {
	Type     string            `json:"type"`
	Time     string            `json:"time"`
	Message  string            `json:"message,omitempty"`
	Progress *TemplateProgress `json:"progress,omitempty"`
	Template *sandbox.Template `json:"template,omitempty"`
}

// TemplateProgress is a build step: resolve, layer (with bytes of total),
// inject, disk, done.
type TemplateProgress struct {
	Step    string `json:"step"`
	Layer   int    `json:"layer,omitempty"`
	Layers  int    `json:"layers,omitempty"`
	Bytes   int64  `json:"bytes,omitempty"`
	Total   int64  `json:"total,omitempty"`
	Message string `json:"message,omitempty"`
}
