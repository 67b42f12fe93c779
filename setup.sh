#!/usr/bin/env bash
# edgegossip set-up: installs the Debian packages the project needs (only when
# missing), builds the project, then runs what was asked.
#
#   ./setup.sh run [edgegossip run options]   build the binary, then train the embedded default cluster
#   ./setup.sh test [ctest options]           build, then run the whole test suite
#   ./setup.sh build                          build only
#
# BUILD_DIR (default: build) and BUILD_TYPE (default: Release) may be set in
# the environment; EDGEGOSSIP_SANITIZE=ON builds with ASan + UBSan.
set -euo pipefail
cd "$(dirname "$0")"

# What the build and a run need (`./setup.sh run`, `build`).
packages=(
  cmake ninja-build g++ pkg-config
  libcaf-dev libtorch-dev libcapnp-dev capnproto librocksdb-dev
  libboost-test-dev libtomlplusplus-dev libcli11-dev libspdlog-dev
  libfaiss-dev zlib1g-dev liblapack-dev libblas-dev libssl-dev
  dataset-fashion-mnist nlohmann-json3-dev
  # The data layer's readers: images (stb_image), NumPy arrays (xtensor).
  libstb-dev libxtensor-dev
  # LibTorch calls the system BLAS (libblas.so.3) for every fully connected
  # layer; without this it is the reference BLAS, and LeNet-5 trains at 0.6x
  # the speed. The pthread build: its calls are safe from several threads
  # (each platform is one); edgegossip runs it with OPENBLAS_NUM_THREADS=1.
  libopenblas0-pthread
  # A node's cpu_limit where no cgroup may be written (not root, a read-only
  # cgroup tree): the duty-cycle limiter (system/cpu_limit.hpp).
  cpulimit
  # A node's /metrics (prometheus-cpp, built in).
  prometheus-cpp-dev
  # The linker (CMakeLists.txt, EDGEGOSSIP_FAST_BUILD): mold links the binary
  # and each test program against LibTorch in a fraction of GNU ld's time.
  mold
)
# What only the test suite (and the benchmarks) need besides (`./setup.sh test`).
test_packages=(
  gnuplot-nox stress-ng tmux
  # The data tests read a real CSV data set that scikit-learn ships.
  python3-sklearn
  # TLS (cluster.tls): scripts/make-test-ca.sh makes a test CA and node
  # certificates with the openssl program.
  openssl
  # The models test loads the exported TorchScript model (model_scripted.pt)
  # in Python's torch and checks it gives the accuracy the run computed; it
  # is skipped where Python has no torch.
  python3-torch
  # The slow-link test runs three nodes in a network namespace whose loopback
  # goes through a token bucket (ip netns, tc); skipped where not allowed.
  iproute2
  # The Debian package (cpack -G DEB) finds its dependencies with
  # dpkg-shlibdeps.
  dpkg-dev
  # The metrics test scrapes a run with Debian's Prometheus server, checks
  # the text with promtool, and reads pages with curl.
  prometheus curl
)

what=${1:-build}
[ "$what" = test ] && packages+=("${test_packages[@]}")
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  sudo_cmd=()
  [ "$(id -u)" -eq 0 ] || sudo_cmd=(sudo)
  "${sudo_cmd[@]}" apt-get update -qq
  DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -qq "${missing[@]}"
fi

build_dir=${BUILD_DIR:-build}
build_type=${BUILD_TYPE:-Release}
jobs=$(nproc)
if [ ! -f "$build_dir/build.ninja" ]; then
  cmake -S . -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE="$build_type" \
    -DEDGEGOSSIP_SANITIZE="${EDGEGOSSIP_SANITIZE:-OFF}"
fi
[ $# -gt 0 ] && shift
# A run needs the binary only; the test suite's programs are built for
# `test` and `build`.
targets=()
[ "$what" = run ] && targets=(--target edgegossip)
cmake --build "$build_dir" -j "$jobs" "${targets[@]}"

case "$what" in
  build) ;;
  run) exec "$build_dir/edgegossip" run "$@" ;;
  test) cd "$build_dir" && exec ctest --output-on-failure "$@" ;;
  *) echo "setup: unknown command '$what' (use run, test or build)" >&2; exit 2 ;;
esac
