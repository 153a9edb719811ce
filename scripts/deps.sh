#!/usr/bin/env bash
# Installs what emb needs from Debian's packages, or says exactly what to install.
#   scripts/deps.sh build   compiler, cmake, OpenBLAS (its OpenMP build, see CMakeLists.txt),
#                           zlib, libbz2, liblzma and libzstd (compressed corpora),
#                           SLEEF (the exp/log PyTorch's log_softmax uses), libmicrohttpd
#                           (emb serve's HTTP server), python3-dev and python3-numpy (the
#                           Python package, python/)
#   scripts/deps.sh run     build + npm when no npm is on PATH (make run fetches its corpus)
#   scripts/deps.sh test    build + cmocka, python3-torch, python3-numpy, pytest, clang-14 with
#                           its sanitizer/libFuzzer runtimes (tests/fuzz), scikit-learn (the
#                           reference of emb_pca and emb_tsne), chromium (emb serve's page is
#                           tested in the headless browser), Open MPI (libopenmpi-dev,
#                           openmpi-bin) for libemb_mpi and its tests under mpirun, clang-format
#                           14 (scripts/check-format.sh)
#   scripts/deps.sh bench   what the benchmarks need (the test set: torch is the comparison;
#                           wrk and Flask for bench/serve.py)
# As root it runs apt-get; otherwise it prints the apt-get command and exits 1.
set -euo pipefail
mode=${1:-build}
pkgs=(build-essential cmake pkg-config libopenblas-openmp-dev libjansson-dev libsleef-dev
      libmicrohttpd-dev python3-dev python3-numpy zlib1g-dev libbz2-dev liblzma-dev libzstd-dev)
case "$mode" in
  build) ;;
  run) command -v npm >/dev/null 2>&1 || pkgs+=(npm) ;;
  test) pkgs+=(libcmocka-dev python3-torch python3-numpy python3-pytest python3-gensim clang-14
               libclang-rt-14-dev python3-sklearn chromium libopenmpi-dev openmpi-bin fasttext
               clang-format-14) ;;
  bench) pkgs+=(libcmocka-dev python3-torch python3-numpy python3-pytest python3-gensim fasttext
                wrk python3-flask) ;;
  *) echo "usage: $0 build|run|test|bench" >&2; exit 2 ;;
esac
# EMB_DEPS_EXTRA: more packages to require (the tests use it to exercise the not-root path).
# shellcheck disable=SC2206
pkgs+=(${EMB_DEPS_EXTRA:-})
missing=()
for p in "${pkgs[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
[ ${#missing[@]} -eq 0 ] && exit 0
if [ "$(id -u)" -ne 0 ]; then
  echo "emb needs these Debian packages: ${missing[*]}" >&2
  echo "install them as root with:" >&2
  echo "  apt-get update && apt-get install -y ${missing[*]}" >&2
  exit 1
fi
echo "installing: ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq >&2
apt-get install -y -qq --no-install-recommends "${missing[@]}" >&2
