package errdefs

// Codes of templates (and the account secrets a template build names).
// Their own file keeps this work out of the main list's way; All and
// ByCode see them like any other.
var (
	ErrUnknownSecret = def("unknown_secret", ClassInvalid, "The secret named in the request (registry_secret) is not one of the account's secrets (PUT /public/secrets/{name}).")
	ErrDiskTooSmall  = def("disk_too_small", ClassInvalid, "disk_mib is smaller than the template's disk; the message names the template's size.")
)
