#!/usr/bin/env bash
# Builds edgegossip against a CUDA LibTorch (-DEDGEGOSSIP_CUDA=ON), on a
# machine that has a compiler, CMake, ninja and PyTorch with CUDA for Python
# but not the project's other libraries and no package archive to install
# them from. Those come as Debian bookworm packages (.deb files, downloaded
# on a Debian machine with --download), unpacked into a prefix with dpkg -x:
# nothing is installed.
#
#   scripts/build-cuda.sh --download DIR [--pack FILE]
#       on Debian bookworm: apt-get download the packages below into DIR;
#       with --pack, also unpack them into one FILE (.tar.xz) without their
#       documentation, with links to the shared libraries in place of the
#       static ones (about 24 MB against 35 MB of .deb files, for a
#       transfer with a size limit)
#   scripts/build-cuda.sh [--debs DIR] [--prefix DIR] [--build DIR] [--torch DIR] [--cpu] [TARGET...]
#       --debs DIR    unpack DIR/*.deb and DIR/*.tar.xz (from --pack) into
#                     the prefix first
#       --prefix DIR  the unpacked packages (default: .deps/prefix)
#       --build DIR   the build directory (default: build-cuda)
#       --torch DIR   LibTorch's CMake prefix (default: Python's torch,
#                     torch.utils.cmake_prefix_path)
#       --cpu         EDGEGOSSIP_CUDA=OFF: the same build against a CPU LibTorch
#                     (to check the prefix where no GPU is)
#       TARGET...     what to build (default: everything)
#
# The programs need the prefix's libraries: the script writes the line that
# finds them to BUILD/env.sh (`. build-cuda/env.sh` before running them).
# Every compile error is shown at once (ninja -k 0).
set -euo pipefail
cd "$(dirname "$0")/.."

# The project's libraries and what they need beyond a plain Linux system
# with a C++ compiler (OpenMP included) and Python's torch. LAPACK comes
# without liblapack-dev (its static library is large and unused): the
# script makes the links to it that the alternatives system would make.
packages=(
  libcaf-dev libcaf-core0.17 libcaf-io0.17 libcaf-openssl0.17
  libcapnp-dev libcapnp-0.9.2 capnproto
  librocksdb-dev librocksdb7.8 libgflags-dev libgflags2.2 libsnappy-dev libsnappy1v5
  libbz2-dev libbz2-1.0 liblz4-dev liblz4-1 libzstd-dev libzstd1 zlib1g-dev zlib1g
  libboost-test-dev libboost-test1.74-dev libboost-test1.74.0 libboost1.74-dev
  libtomlplusplus-dev libtomlplusplus3 libcli11-dev
  libspdlog-dev libspdlog1.10 libfmt-dev libfmt9
  libfaiss-dev libblas-dev libblas3 liblapack3 libgfortran5 libquadmath0
  libssl-dev libssl3 nlohmann-json3-dev
  libstb-dev libstb0 libxtensor-dev xtl-dev
  # A node's /metrics: prometheus-cpp, whose CMake package also asks for
  # civetweb's and curl's (the project links neither).
  prometheus-cpp-dev libprometheus-cpp-core1.0 libprometheus-cpp-pull1.0
  libprometheus-cpp-push1.0 libcivetweb-dev libcivetweb1 civetweb
  libcurl4-openssl-dev libcurl4
)

debs="" prefix=".deps/prefix" build="build-cuda" torch_prefix="" cuda=ON
download="" pack=""
targets=()
while [ $# -gt 0 ]; do
  case "$1" in
    --download) download=$2; shift 2 ;;
    --pack) pack=$2; shift 2 ;;
    --debs) debs=$2; shift 2 ;;
    --prefix) prefix=$2; shift 2 ;;
    --build) build=$2; shift 2 ;;
    --torch) torch_prefix=$2; shift 2 ;;
    --cpu) cuda=OFF; shift ;;
    -h|--help) sed -n '2,28p' "$0"; exit 0 ;;
    -*) echo "build-cuda: unknown option $1" >&2; exit 2 ;;
    *) targets+=("$1"); shift ;;
  esac
done

if [ -n "$download" ]; then
  mkdir -p "$download"
  (cd "$download" && apt-get download "${packages[@]}")
  if [ -n "$pack" ]; then
    staging=$(mktemp -d)
    trap 'rm -rf "$staging"' EXIT
    for f in "$download"/*.deb; do dpkg -x "$f" "$staging"; done
    rm -rf "$staging/usr/share/doc" "$staging/usr/share/man"
    # A static library with a shared one beside it becomes a link to that
    # (the packages' CMake files check that it exists, RocksDB's target
    # names it, and the linker reads a file by its contents, not its name);
    # one without (faiss's) stays.
    while IFS= read -r -d '' lib; do
      if [ -e "${lib%.a}.so" ]; then
        ln -sfn "$(basename "${lib%.a}.so")" "$lib"
      fi
    done < <(find "$staging" -name '*.a' -type f -print0)
    tar -C "$staging" -cJf "$pack" .
    echo "build-cuda: packed $(ls "$download"/*.deb | wc -l) packages into $pack ($(du -h "$pack" | cut -f1))"
  fi
  exit 0
fi
[ -n "$pack" ] && { echo "build-cuda: --pack goes with --download" >&2; exit 2; }

mkdir -p "$prefix"
prefix=$(cd "$prefix" && pwd)
arch=$(gcc -dumpmachine 2>/dev/null || echo x86_64-linux-gnu)
libdir="$prefix/usr/lib/$arch"

if [ -n "$debs" ]; then
  shopt -s nullglob
  files=("$debs"/*.deb "$debs"/*.tar.xz)
  if [ ${#files[@]} -eq 0 ]; then
    echo "build-cuda: no .deb or .tar.xz files in $debs" >&2
    exit 2
  fi
  for f in "${files[@]}"; do
    case "$f" in
      # Python's tarfile, since a machine without a package archive may
      # lack the xz program that tar -J runs; the bundle's links are the
      # packages' own, absolute ones included.
      *.tar.xz) python3 - "$f" "$prefix" <<'PY' ;;
import sys, tarfile
trusted = {"filter": "fully_trusted"} if hasattr(tarfile, "fully_trusted_filter") else {}
with tarfile.open(sys.argv[1], "r:xz") as bundle:
    bundle.extractall(sys.argv[2], **trusted)
PY
      *) dpkg -x "$f" "$prefix" ;;
    esac
  done
  # Links that point at the system's root (zlib's, for one) point into the
  # prefix instead, where the file is there.
  while IFS= read -r -d '' link; do
    target=$(readlink "$link")
    case "$target" in
      /*) if [ -e "$prefix$target" ]; then ln -sfn "$prefix$target" "$link"; fi ;;
    esac
  done < <(find "$prefix" -type l -print0)
  # CMake package files that name the system's paths (Snappy's, for one)
  # name the prefix's.
  find "$prefix" -name '*.cmake' -path '*cmake*' -print0 |
    xargs -0 -r sed -i -E "s#([\"; ])/usr/(lib|include|bin)([/\"; )])#\1$prefix/usr/\2\3#g; s#\"/usr\"#\"$prefix/usr\"#g"
  # What update-alternatives would link: the reference BLAS and LAPACK.
  mkdir -p "$libdir"
  [ -e "$libdir/blas/libblas.so.3" ] && ln -sfn blas/libblas.so.3 "$libdir/libblas.so.3"
  [ -e "$libdir/blas/libblas.so.3" ] && ln -sfn blas/libblas.so.3 "$libdir/libblas.so"
  [ -e "$libdir/lapack/liblapack.so.3" ] && ln -sfn lapack/liblapack.so.3 "$libdir/liblapack.so.3"
  [ -e "$libdir/lapack/liblapack.so.3" ] && ln -sfn lapack/liblapack.so.3 "$libdir/liblapack.so"
  echo "build-cuda: unpacked ${#files[@]} files of packages into $prefix"
fi
if [ ! -d "$prefix/usr/include/caf" ]; then
  echo "build-cuda: $prefix holds no CAF headers: give --debs DIR (see --download)" >&2
  exit 2
fi

if [ -z "$torch_prefix" ]; then
  torch_prefix=$(python3 -c 'import torch; print(torch.utils.cmake_prefix_path)') || {
    echo "build-cuda: Python has no torch: give --torch DIR (LibTorch's share/cmake)" >&2
    exit 2
  }
fi
if [ ! -e "$torch_prefix/Torch/TorchConfig.cmake" ]; then
  echo "build-cuda: no Torch/TorchConfig.cmake below $torch_prefix" >&2
  exit 2
fi
torch_lib=$(cd "$torch_prefix/../../lib" 2>/dev/null && pwd || true)

export LD_LIBRARY_PATH="$libdir:$prefix/lib/$arch:$libdir/blas:$libdir/lapack${torch_lib:+:$torch_lib}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export PATH="$prefix/usr/bin:$PATH"

cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DEDGEGOSSIP_CUDA="$cuda" \
  -DCMAKE_PREFIX_PATH="$prefix/usr;$torch_prefix" \
  -DTorch_DIR="$torch_prefix/Torch"
mkdir -p "$build"
# The pip wheel's libtorch.so (2.11) exports std::filesystem functions of
# its own; a program that binds to those (remove_all, for one) calls a null
# pointer and crashes. The compiler's libstdc++ loaded first is found first.
stdcxx=$(g++ -print-file-name=libstdc++.so.6)
{
  echo "export LD_LIBRARY_PATH=\"$LD_LIBRARY_PATH\""
  if [ -e "$stdcxx" ]; then echo "export LD_PRELOAD=\"$stdcxx\""; fi
} > "$build/env.sh"
ninja -C "$build" -k 0 -j "$(nproc)" "${targets[@]}"
echo "build-cuda: built in $build; before running its programs: . $build/env.sh"
