#!/usr/bin/env bash
# The Debian package in a clean Debian root: builds the .deb (cpack), makes a
# bookworm root from the archive with mmdebstrap, installs the package there
# with apt (which resolves its dependencies to Debian's runtime packages),
# checks the system user, the conffile and the unit (systemd-analyze verify),
# and trains one short run with the installed binary inside the root.
#
#   packaging/test-package.sh [BUILD_DIR]     (root; needs mmdebstrap and the archive)
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
build="$(cd "${1:-$here/build}" && pwd)"
[ "$(id -u)" -eq 0 ] || { echo "test-package: needs root (mmdebstrap, chroot)"; exit 77; }
command -v mmdebstrap >/dev/null || { echo "test-package: needs mmdebstrap"; exit 77; }
(cd "$build" && cpack -G DEB >/dev/null)
deb=$(ls -t "$build"/edgegossip_*_amd64.deb | head -1)
root=$(mktemp -d)
trap 'umount -R "$root/proc" 2>/dev/null || true; rm -rf "$root"' EXIT
mirror=$(sed -n 's/^URIs: *//p' /etc/apt/sources.list.d/debian.sources 2>/dev/null | head -1)
echo "test-package: a clean bookworm root with $(basename "$deb")"
mmdebstrap --quiet --variant=apt --include=systemd,dataset-fashion-mnist \
  --customize-hook="copy-in $deb /tmp" \
  --customize-hook='chroot "$1" apt-get install -y -qq /tmp/'"$(basename "$deb")" \
  bookworm "$root" ${mirror:+"$mirror"}
fail=0
check() { if "$@"; then echo "ok: ${*: -1}"; else echo "FAILED: $*"; fail=1; fi; }
check chroot "$root" getent passwd edgegossip
check grep -qx /etc/edgegossip/cluster.toml "$root/var/lib/dpkg/info/edgegossip.conffiles"
check chroot "$root" systemd-analyze verify /usr/lib/systemd/system/edgegossip-node@.service
check chroot "$root" systemd-analyze verify /usr/lib/systemd/system/edgegossip-join@.service
check grep -qx /etc/edgegossip/join.env "$root/var/lib/dpkg/info/edgegossip.conffiles"
check test "$(stat -c %a "$root/etc/edgegossip/join.env")" = 600
mount -t proc proc "$root/proc"
if chroot "$root" env OPENBLAS_NUM_THREADS=1 sh -c 'cd /tmp && edgegossip run --set train.epochs=1 \
     --set data.train_samples=20000 --set data.test_samples=2000' > "$build/test-package.log" 2>&1; then
  echo "ok: $(grep -o 'epoch 1/1:.*accuracy [0-9.]*' "$build/test-package.log" | tail -1)"
else
  echo "FAILED: the installed binary's run (see $build/test-package.log)"; fail=1
fi
exit $fail
