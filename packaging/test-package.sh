#!/usr/bin/env bash
# The Debian package in a clean Debian root: builds the .deb (cpack), makes a
# bookworm root from the archive with mmdebstrap, installs the package there
# with apt (which resolves its dependencies to Debian's runtime packages),
# checks the system user, the conffiles and the units (systemd-analyze
# verify), trains one short run with the installed binary inside the root,
# then has the installed binary's node train with two nodes of the build tree.
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
# The installed binary's node trains with two others: node a in the root,
# nodes b and c of the build tree beside it, on loopback (the root shares
# the network).
read -r pa_port pb_port pc_port < <(python3 -c '
import socket
out = []
while len(out) < 3:
    s = socket.socket(); s.bind(("127.0.0.1", 0)); p = s.getsockname()[1]; s.close()
    t = socket.socket()
    try:
        t.bind(("127.0.0.1", p + 1)); out.append(p)
    except OSError:
        pass
    t.close()
print(" ".join(map(str, out)))')
work=$(mktemp -d)
{
  printf '[cluster]\nid = "package"\nsecret = "package-test"\n'
  printf '[data]\ntrain_samples = 6000\ntest_samples = 1000\n'
  printf '[train]\nmodel = "logreg"\nepochs = 2\n'
  for n in a b c; do
    case $n in a) p=$pa_port ;; b) p=$pb_port ;; c) p=$pc_port ;; esac
    printf '[[nodes]]\nname = "%s"\nport = %s\n  [[nodes.platforms]]\n  name = "%s0"\n' "$n" "$p" "$n"
  done
} > "$root/tmp/three.toml"
chroot "$root" env OPENBLAS_NUM_THREADS=1 sh -c \
  'cd /tmp && timeout 300 edgegossip node --config /tmp/three.toml --node a' \
  > "$build/test-package-a.log" 2>&1 &
pids=$!
for n in b c; do
  (cd "$work" && OPENBLAS_NUM_THREADS=1 timeout 300 "$build/edgegossip" node \
     --config "$root/tmp/three.toml" --node $n > "$build/test-package-$n.log" 2>&1) &
  pids="$pids $!"
done
codes=0
for p in $pids; do wait "$p" || codes=1; done
rm -rf "$work"
if [ $codes -eq 0 ] && grep -q "epoch 2/2:" "$build/test-package-a.log"; then
  echo "ok: the installed binary's node a trained with nodes b and c of the build:" \
       "$(grep -o 'epoch 2/2:.*accuracy [0-9.]*' "$build/test-package-a.log" | tail -1)"
else
  echo "FAILED: three nodes, a installed (see $build/test-package-{a,b,c}.log)"; fail=1
fi
exit $fail
