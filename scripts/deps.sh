#!/usr/bin/env bash
# Installs what zeish needs on a Debian host, and is quick when all is there.
set -euo pipefail

packages=(qemu-system-x86 qemu-utils linux-image-cloud-amd64 busybox-static e2fsprogs cpio gzip jq)
# Node.js runs the TypeScript SDK's tests; machines of this kind ship one.
command -v node >/dev/null 2>&1 && command -v npm >/dev/null 2>&1 || packages+=(nodejs npm)
need=()
for p in "${packages[@]}"; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || need+=("$p")
done

if [ ${#need[@]} -gt 0 ]; then
	echo "deps: installing ${need[*]}" >&2
	if [ "$(id -u)" != 0 ]; then
		echo "deps: need root to apt-get install ${need[*]}" >&2
		exit 1
	fi
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -q >&2
	apt-get install -y -q --no-install-recommends "${need[@]}" >&2
fi

if ! command -v go >/dev/null 2>&1 && [ ! -x /usr/local/go/bin/go ]; then
	echo "deps: Go is missing (expected at /usr/local/go)" >&2
	exit 1
fi
