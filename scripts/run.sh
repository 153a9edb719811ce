#!/usr/bin/env bash
# What `make run` does: learn word vectors from the State of the Union addresses with
# `emb train`, then look at them: nearest neighbours of a few words, two analogies, the
# accuracy on the word2vec analogy test set, and an SVG map of the most frequent words.
#
#   scripts/run.sh [BUILD_DIR]      (default build; the emb binary is BUILD_DIR/emb)
#
# The corpus is fetched once by scripts/fetch-corpus.sh (checksum verified, cached); the
# vectors and the picture go to ${EMB_RUN_DIR:-BUILD_DIR/run}.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
emb=$build/emb
out=${EMB_RUN_DIR:-$build/run}
threads=$(nproc 2>/dev/null || echo 2)
corpus=$(scripts/fetch-corpus.sh sotu)
mkdir -p "$out"
vectors=$out/sotu.bin

echo "== emb train: skip-gram, dim 100, window 5, negative 5, 5 epochs, $threads threads"
"$emb" train "$corpus" -o "$vectors" --lowercase --strip-punct --threads "$threads"

echo
echo "== emb nn: nearest neighbours by cosine similarity"
"$emb" nn "$vectors" war peace economy freedom slavery congress -k 6

echo
echo "== emb analogy: a is to b as c is to ?"
for q in "treaty treaties war" "he his she" "england london france"; do
  echo "-- $q -> $("$emb" analogy "$vectors" $q -k 3 | tr '\n' ' ')"
done

echo
echo "== emb eval-analogies: questions-words.txt over the 30,000 most frequent words"
"$emb" eval-analogies "$vectors" data/eval/questions-words.txt | tail -n 4

echo
"$emb" plot "$vectors" -o "$out/sotu-words.svg" --top 150 \
  --title "State of the Union: the 150 most frequent words, PCA of their emb vectors"
echo "== vectors: $vectors (word2vec binary; gensim, fastText and emb read it)"
echo "== picture: $out/sotu-words.svg (open it in a browser)"
