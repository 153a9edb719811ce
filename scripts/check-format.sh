#!/usr/bin/env bash
# Checks that the C sources are formatted as .clang-format says (clang-format in dry-run
# mode; make test runs it). With --fix, formats them in place instead.
# The formatter is clang-format 14 (Debian 12's; scripts/deps.sh test installs it): other
# versions format some constructs differently, so another version is refused, not trusted.
set -euo pipefail
cd "$(dirname "$0")/.."
fix=0
[ "${1:-}" = "--fix" ] && fix=1
cf=""
for c in clang-format-14 clang-format; do
  if command -v "$c" >/dev/null 2>&1 && "$c" --version | grep -q 'version 14\.'; then cf=$c; break; fi
done
if [ -z "$cf" ]; then
  echo "check-format: clang-format 14 is needed (Debian 12: apt-get install clang-format-14;" >&2
  echo "  scripts/deps.sh test installs it)" >&2
  exit 2
fi
mapfile -t files < <(git ls-files 'src/*.[ch]' 'include/*.h' 'tools/*.[ch]' 'tests/unit/*.[ch]' \
  'tests/fuzz/*.[ch]' 'tests/mpi/*.[ch]' 'examples/*.[ch]' 'bench/*.[ch]' 'python/src/*.[ch]')
if [ $fix -eq 1 ]; then
  "$cf" -i "${files[@]}"
  exit 0
fi
if ! "$cf" --dry-run --Werror "${files[@]}" 2>/tmp/check-format.$$; then
  grep -E '^[^ ].*: (error|warning):' /tmp/check-format.$$ | head -20 >&2
  n=$(grep -cE ': (error|warning):' /tmp/check-format.$$ || true)
  rm -f /tmp/check-format.$$
  echo "check-format: $n places differ from .clang-format; scripts/check-format.sh --fix formats them" >&2
  exit 1
fi
rm -f /tmp/check-format.$$
echo "check-format: ${#files[@]} files formatted as .clang-format says ($cf)"
