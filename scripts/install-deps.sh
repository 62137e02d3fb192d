#!/usr/bin/env bash
# Installs the Debian packages tinkerd needs to build, test and run, idempotently.
# Also makes OpenBLAS-openmp the libblas.so.3 alternative (the pthread flavour
# fights libtorch's OpenMP pool; see docs/benchmarks.md).
set -euo pipefail

PACKAGES=(
  build-essential cmake g++ make pkg-config
  libtorch-dev libopenblas0-openmp libopenblas-openmp-dev
  python3-torch python3-numpy
  libgtest-dev libgmock-dev libbenchmark-dev
  nlohmann-json3-dev libsqlite3-dev libboost-dev libprotobuf-dev protobuf-compiler libzstd-dev libpcre2-dev libicu-dev
  python3-protobuf python3-zstandard
  clang-format-14 clang-tidy-14
)

missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

SUDO=""
if [ "$(id -u)" != "0" ]; then SUDO="sudo"; fi

if [ ${#missing[@]} -gt 0 ]; then
  echo "install-deps: installing ${missing[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
else
  echo "install-deps: all Debian packages present"
fi

# Pick OpenBLAS-openmp for libblas.so.3 / liblapack.so.3 (never the pthread or reference build).
arch_dir="/usr/lib/$(dpkg-architecture -qDEB_HOST_MULTIARCH 2>/dev/null || echo x86_64-linux-gnu)"
for lib in libblas.so.3 liblapack.so.3; do
  target="$arch_dir/openblas-openmp/$lib"
  name="$lib-$(basename "$arch_dir")"
  if [ -e "$target" ]; then
    current=$(update-alternatives --query "$name" 2>/dev/null | awk '/^Value:/{print $2}')
    if [ "$current" != "$target" ]; then
      $SUDO update-alternatives --set "$name" "$target" >/dev/null
      echo "install-deps: $name -> $target"
    fi
  fi
done
