"""emb.train: word2vec (skip-gram or CBOW with negative sampling) on emb's trainer, with
gensim's argument names and defaults, returning an emb.KeyedVectors."""
import os
import tempfile

from . import _emb
from .keyedvectors import KeyedVectors


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


def train(corpus=None, corpus_file=None, vector_size=100, alpha=0.025, window=5,
          min_count=5, max_final_vocab=None, sample=1e-3, seed=1, workers=3,
          min_alpha=0.0001, sg=0, negative=5, cbow_mean=1, epochs=5, shared_negatives=False,
          lowercase=False, strip_punct=False, max_sentence=1000, progress=None):
    """Trains word vectors and returns them as an emb.KeyedVectors (rows ordered by
    descending count, as gensim orders them).

    corpus: a path to a UTF-8 text file (tokens separated by whitespace, a line per
    sentence), or an iterable of sentences (lists of str tokens, gensim's `sentences`);
    corpus_file: gensim's name for the path. The other arguments are gensim.models.Word2Vec's,
    with its defaults (CBOW, sg=0; hierarchical softmax is not provided, negative >= 1).

    progress: called about every 100,000 words with a dict (words_done, words_total, epoch,
    alpha, seconds); returning True stops training, and the vectors trained so far are
    returned (kv.finished is False). Ctrl-C (KeyboardInterrupt) stops training cleanly and
    propagates; so does an exception raised by the callback."""
    if (corpus is None) == (corpus_file is None):
        raise TypeError("give exactly one of corpus and corpus_file")
    path = corpus_file if corpus_file is not None else corpus
    tmp = None
    if not isinstance(path, (str, bytes, os.PathLike)):
        tmp = path = _corpus_file(path)
    try:
        words, counts, vectors, finished = _emb.train_word2vec(
            os.fspath(path), sg=bool(sg), vector_size=vector_size, window=window,
            negative=negative, sample=sample, min_count=min_count,
            max_vocab=max_final_vocab or 0, epochs=epochs, alpha=alpha, min_alpha=min_alpha,
            cbow_mean=bool(cbow_mean), workers=workers, seed=seed, lowercase=lowercase,
            strip_punct=strip_punct, max_sentence=max_sentence,
            shared_negatives=shared_negatives, progress=progress)
    finally:
        if tmp is not None:
            os.unlink(tmp)
    kv = KeyedVectors(vectors=vectors, index_to_key=words, counts=counts)
    kv.finished = finished
    return kv
