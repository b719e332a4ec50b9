// Package deploy holds how operators run zeish on many hosts: systemd
// units (systemd/) and a Kubernetes manifest set (kubernetes/). It has no
// code; its test decodes every file strictly and checks that each names
// only settings zeishd reads.
package deploy
