// Package template builds the artifacts a sandbox boots from: a kernel, an
// initramfs and a read-only root disk image that every sandbox's overlay uses
// as its backing file.
//
// The built-in "base" template is assembled from files already on the host
// (Debian packages linux-image-cloud-amd64, busybox-static, e2fsprogs,
// qemu-utils) plus the static guest agent. Builds are cached by a content hash
// of every input, so a host whose packages or agent change gets a new build
// next to the old one; old builds are never removed because running sandboxes
// reference their base image by path.
package template
