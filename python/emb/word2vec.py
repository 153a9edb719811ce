"""emb.train: word2vec (skip-gram or CBOW with negative sampling) on emb's trainer, with
gensim's argument names and defaults, returning an emb.KeyedVectors, or with character
n-grams (fastText's subwords) an emb.FastTextKeyedVectors."""
import os
import tempfile

from . import _emb
from .keyedvectors import FastTextKeyedVectors, KeyedVectors


def _corpus_file(sentences):
    """A temporary file of the sentences (iterables of str tokens), one per line."""
    f = tempfile.NamedTemporaryFile("w", encoding="utf8", suffix=".txt", delete=False)
    try:
        for n, sentence in enumerate(sentences):
            if isinstance(sentence, str):
                raise TypeError(f"sentence {n} is a str; sentences are lists of tokens "
                                f"(or give the corpus as a file path)")
            for tok in sentence:
                if not isinstance(tok, str) or not tok or any(c.isspace() for c in tok):
                    raise ValueError(f"sentence {n}: token {tok!r} is not a non-empty str "
                                     f"without whitespace")
            f.write(" ".join(sentence))
            f.write("\n")
    except BaseException:
        f.close()
        os.unlink(f.name)
        raise
    f.close()
    return f.name


def _is_path(x):
    return isinstance(x, (str, bytes, os.PathLike))


def train(corpus=None, corpus_file=None, vector_size=100, alpha=0.025, window=5,
          min_count=5, max_final_vocab=None, sample=1e-3, seed=1, workers=3,
          min_alpha=0.0001, sg=0, negative=5, cbow_mean=1, epochs=5, shared_negatives=None,
          lowercase=False, strip_punct=False, max_sentence=1000, lenient=False, phrases=0,
          phrases_min_count=5, phrases_threshold=10.0, phrases_delimiter="_",
          phrases_scoring="default", progress=None, lanes=0, min_n=3, max_n=0,
          bucket=2000000, continue_from=None, save_state=None):
    """Trains word vectors and returns them as an emb.KeyedVectors (rows ordered by
    descending count, as gensim orders them).

    corpus: a path, or a list or tuple of paths, read as `emb train` reads its CORPUS
    operands (docs/word2vec.md, "Corpora"): files and directories one after the other,
    gzip, bzip2, xz or zstd data recognised by its first bytes, "-" for standard input;
    UTF-8 text, tokens separated by whitespace, a line per sentence. Or an iterable of
    sentences (lists of str tokens, gensim's `sentences`). corpus_file: gensim's name for the
    path (or paths). The other arguments are gensim.models.Word2Vec's, with its defaults
    (CBOW, sg=0; hierarchical softmax is not provided, negative >= 1), and emb train's corpus
    options: lowercase, strip_punct, max_sentence, lenient (skip tokens that are not UTF-8 or
    too long, counted in kv.skipped = (invalid, too_long)), and phrases (passes of gensim's
    Phrases applied before training, 0: off; True is one pass) with phrases_min_count,
    phrases_threshold, phrases_delimiter and phrases_scoring ('default' or 'npmi').
    min_n, max_n, bucket: gensim.models.FastText's subwords. With max_n > 0 each word's input
    vector is the mean of its own row and the rows of its character n-grams of min_n..max_n
    characters, hashed into `bucket` shared rows, as fastText trains them (`emb train
    --subwords --minn --maxn --bucket`, the same bits); the result is an
    emb.FastTextKeyedVectors, which gives a vector for any word, seen in training or not, and
    its vectors (the vocabulary's) are what fastText writes to its .vec. max_n=0 (the
    default) trains word2vec without subwords; gensim's FastText class defaults to max_n=6.
    continue_from: a model to train further on this corpus instead of starting afresh, as
    gensim's build_vocab(update=True) and train() (`emb train --continue`,
    docs/word2vec.md, "Continued training"): a fastText .bin (fastText's, or
    save_facebook_model's) or a state file of `emb train --save-state`. Its words keep their
    vectors and new words seen min_count times are added; its vector size and subwords are
    used (vector_size, min_n, max_n and bucket are then ignored).
    save_state: a path where the whole model is written at the end of the run (both tables,
    the words and their counts; `emb train --save-state`), for a later continue_from; a
    run stopped by progress writes what it trained so far. gensim's model.save() keeps the
    same for its own train(); a subword model can also be continued from
    save_facebook_model's .bin.
    shared_negatives: skip-gram draws one set of negatives per window, shared by its context
    words; False draws them per (center, context) pair, as gensim and fastText do. None (the
    default) is True without subwords (faster, as accurate over seeds) and False with them
    (as `emb train --subwords`). CBOW draws once per window either way. lanes: the parts
    of the corpus, each with its own position and random numbers, that the workers share out
    round after round (0: 1 with one worker, 4 per worker with more; docs/word2vec.md,
    "Threads"); with workers=1 the vectors depend on it, and two runs with the same lanes
    and seed are the same bits.

    progress: called every 16,384 tokens (1 worker; n workers: every 8 rounds of 16,384 tokens
    each, and at each epoch's end) with a dict (words_done, words_total, epoch,
    alpha, seconds); returning True stops training, and the vectors trained so far are
    returned (kv.finished is False). Ctrl-C (KeyboardInterrupt) stops training cleanly and
    propagates; so does an exception raised by the callback."""
    if (corpus is None) == (corpus_file is None):
        raise TypeError("give exactly one of corpus and corpus_file")
    path = corpus_file if corpus_file is not None else corpus
    tmp = None
    if isinstance(path, (list, tuple)) and path and all(_is_path(p) for p in path):
        path = [os.fspath(p) for p in path]
    elif corpus_file is not None and not _is_path(path):
        raise TypeError("corpus_file is a path or a list of paths")
    elif _is_path(path):
        path = os.fspath(path)
    else:
        tmp = path = _corpus_file(path)
    if shared_negatives is None:
        shared_negatives = not max_n
    try:
        words, counts, vectors, finished, skipped, model = _emb.train_word2vec(
            path, sg=bool(sg), vector_size=vector_size, window=window,
            negative=negative, sample=sample, min_count=min_count,
            max_vocab=max_final_vocab or 0, epochs=epochs, alpha=alpha, min_alpha=min_alpha,
            cbow_mean=bool(cbow_mean), workers=workers, seed=seed, lowercase=lowercase,
            strip_punct=strip_punct, max_sentence=max_sentence,
            shared_negatives=shared_negatives, progress=progress, lenient=bool(lenient),
            phrases=int(phrases), phrases_min_count=phrases_min_count,
            phrases_threshold=phrases_threshold, phrases_delimiter=phrases_delimiter,
            phrases_scoring=phrases_scoring, lanes=lanes, min_n=min_n, max_n=max_n,
            bucket=bucket,
            **({} if continue_from is None else {"continue_from": os.fspath(continue_from)}),
            **({} if save_state is None else {"save_state": os.fspath(save_state)}))
    finally:
        if tmp is not None:
            os.unlink(tmp)
    if model is not None:
        kv = FastTextKeyedVectors(model)
    else:
        kv = KeyedVectors(vectors=vectors, index_to_key=words, counts=counts)
    kv.finished = finished
    kv.skipped = skipped
    return kv
