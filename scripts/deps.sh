#!/usr/bin/env bash
# Installs what zeish needs on a Debian host, and is quick when all is there.
# QEMU comes from bookworm-backports (QEMU 10): its multifd zero-page detection
# is what makes a re-fork's background copy cheap (see ARCHITECTURE.md).
set -euo pipefail

packages=(qemu-system-x86 qemu-utils linux-image-cloud-amd64 busybox-static e2fsprogs cpio gzip jq
	mmdebstrap nftables iproute2 postgresql chromium xvfb openbox git
	protobuf-compiler libprotobuf-dev umoci iperf3
	python3-httpx python3-pytest python3-yaml python3-setuptools python3-wheel mypy)
backported=(qemu-system-x86 qemu-utils)
# The Python SDK (sdk/python) needs python3-httpx at run time; its tests
# python3-pytest, mypy, python3-yaml (tools/gen_schema.py) and setuptools/wheel
# (the wheel build check), all from Debian: these machines reach no PyPI.
# Node.js runs the TypeScript SDK's tests; machines of this kind ship one.
command -v node >/dev/null 2>&1 && command -v npm >/dev/null 2>&1 || packages+=(nodejs npm)

export DEBIAN_FRONTEND=noninteractive
root() {
	if [ "$(id -u)" != 0 ]; then
		echo "deps: need root to $*" >&2
		exit 1
	fi
}

# bookworm-backports, on the same mirror as the host's own bookworm sources.
codename=$(. /etc/os-release && echo "${VERSION_CODENAME:-}")
bpo=""
if [ "$codename" = bookworm ]; then
	bpo=bookworm-backports
	if ! grep -rqs "bookworm-backports" /etc/apt/sources.list /etc/apt/sources.list.d/; then
		root "add bookworm-backports"
		mirror=$(grep -hs '^URIs:' /etc/apt/sources.list.d/debian.sources | awk '{print $2}' | grep -v security | head -n1)
		mirror=${mirror:-http://deb.debian.org/debian}
		cat >/etc/apt/sources.list.d/zeish-backports.sources <<SRC
Types: deb
URIs: $mirror
Suites: bookworm-backports
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
SRC
		apt-get update -q >&2
	fi
fi

need=()
for p in "${packages[@]}"; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || need+=("$p")
done
# QEMU older than 10 is upgraded from backports.
if [ -n "$bpo" ] && dpkg-query -W -f='${Version}' qemu-system-x86 2>/dev/null | grep -q '^1:[0-9]\.'; then
	need+=(qemu-system-x86)
fi

if [ ${#need[@]} -gt 0 ]; then
	echo "deps: installing ${need[*]}" >&2
	root "apt-get install ${need[*]}"
	apt-get update -q >&2
	plain=()
	for p in "${need[@]}"; do
		[[ " ${backported[*]} " == *" $p "* ]] || plain+=("$p")
	done
	[ ${#plain[@]} -eq 0 ] || apt-get install -y -q --no-install-recommends "${plain[@]}" >&2
	if [ -n "$bpo" ]; then
		apt-get install -y -q --no-install-recommends -t "$bpo" "${backported[@]}" >&2
	else
		apt-get install -y -q --no-install-recommends "${backported[@]}" >&2
	fi
fi

if ! command -v go >/dev/null 2>&1 && [ ! -x /usr/local/go/bin/go ]; then
	echo "deps: Go is missing (expected at /usr/local/go)" >&2
	exit 1
fi

# versitygw, an S3 gateway over a folder: the real S3 server the image
# store's tests start on loopback (internal/imagestore). Built once from the
# Go module proxy (~2 min) and kept under a name that carries its version,
# so a machine that has it skips the build and a new version is built anew.
versitygw_version=v1.8.0
versitygw_bin=/usr/local/bin/versitygw-$versitygw_version
if [ ! -x "$versitygw_bin" ]; then
	root "install $versitygw_bin"
	echo "deps: building versitygw $versitygw_version" >&2
	gobin=$(mktemp -d)
	PATH=$PATH:/usr/local/go/bin GOBIN=$gobin GOFLAGS=-buildvcs=false \
		go install "github.com/versity/versitygw/cmd/versitygw@$versitygw_version" >&2
	install -m 0755 "$gobin/versitygw" "$versitygw_bin"
	rm -rf "$gobin"
fi
