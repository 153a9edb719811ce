#!/usr/bin/env bash
# Finds a C compiler that builds libFuzzer harnesses with AddressSanitizer and
# UndefinedBehaviorSanitizer (tests/fuzz), and prints its command name.
#
#   scripts/find-fuzz-cc.sh
#
# Tries $FUZZ_CC when set (and only it), otherwise clang, then clang-19 down to clang-14, the
# first found on PATH: each is asked to compile and link a one-line fuzz target with
# -fsanitize=fuzzer,address,undefined, and the first that succeeds is printed. `make fuzz`
# and `make test` use it (FUZZ_CC=... overrides). Exit status: 0 found, 1 none works (what
# was tried and what to install on stderr).
set -euo pipefail

if [ -n "${FUZZ_CC:-}" ]; then
  candidates=("$FUZZ_CC")
else
  candidates=(clang clang-19 clang-18 clang-17 clang-16 clang-15 clang-14)
fi

work=$(mktemp -d "${TMPDIR:-/tmp}/emb-fuzz-cc.XXXXXX")
trap 'rm -rf "$work"' EXIT
cat >"$work/t.c" <<'EOF'
#include <stddef.h>
#include <stdint.h>
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) { return size && data[0] == 1; }
EOF

tried=()
for cc in "${candidates[@]}"; do
  if ! command -v "$cc" >/dev/null 2>&1; then
    continue
  fi
  if "$cc" -fsanitize=fuzzer,address,undefined "$work/t.c" -o "$work/t" >"$work/log" 2>&1; then
    echo "$cc"
    exit 0
  fi
  tried+=("$cc ($(head -n 1 "$work/log"))")
done

{
  if [ -n "${FUZZ_CC:-}" ]; then
    echo "find-fuzz-cc.sh: FUZZ_CC=$FUZZ_CC cannot build a libFuzzer harness with ASan and UBSan"
  else
    echo "find-fuzz-cc.sh: no clang that builds libFuzzer harnesses with ASan and UBSan (tried: ${candidates[*]})"
  fi
  for t in "${tried[@]+"${tried[@]}"}"; do echo "  $t"; done
  echo "  install clang with its runtime libraries (Debian 12: apt-get install clang-14"
  echo "  libclang-rt-14-dev; scripts/deps.sh test does this), or set FUZZ_CC to such a compiler"
} >&2
exit 1
