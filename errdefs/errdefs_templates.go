package errdefs

// Codes of templates (and the account secrets a template build names).
// Their own file keeps this work out of the main list's way; All and
// ByCode see them like any other.
var (
	ErrUnknownSecret = def("unknown_secret", ClassInvalid, "The secret named in the request (registry_secret) is not one of the account's secrets (PUT /public/secrets/{name}).")
	ErrDiskTooSmall  = def("disk_too_small", ClassInvalid, "disk_mib is smaller than the template's disk; the message names the template's size.")
	// Per-account template quotas (internal/catalog/quota.go).
	ErrTemplateQuota  = def("template_quota_reached", ClassConflict, "The account keeps as many templates, or as many bytes of template images, as its quota allows (ZEISH_PLAN_TEMPLATES, ZEISH_PLAN_TEMPLATE_MIB); the message says which. Delete a template first.")
	ErrUploadTooLarge = def("upload_too_large", ClassTooLarge, "The uploaded archive passes 32 GiB or what the account's template bytes quota (ZEISH_PLAN_TEMPLATE_MIB) has left; nothing of it is kept.")
	ErrTooManyUploads = def("too_many_uploads", ClassRateLimited, "The account already streams as many template uploads as it may at once (ZEISH_PLAN_TEMPLATE_UPLOADS); retry when one has finished.")
)
