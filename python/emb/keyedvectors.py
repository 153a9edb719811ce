"""emb.KeyedVectors: gensim's KeyedVectors API (names, defaults and results) over emb's file
readers and its cosine k-NN index (docs/python.md, "gensim users")."""
import itertools
import os
from numbers import Integral

import numpy as np

from . import _emb, gensimfile

_FORMATS = {".safetensors", ".npy", ".bin", ".vec", ".txt"}


def _unitvec(v):
    """gensim.matutils.unitvec for a float vector: v / ||v|| (unchanged when the norm is 0)."""
    v = np.asarray(v)
    norm = np.linalg.norm(v)
    return v / norm if norm else v


def _argsort_desc(x, topn):
    """The indices of the topn largest values, largest first, found the way gensim's
    matutils.argsort(x, topn, reverse=True) finds them (so that ties come out in its order)."""
    x = -x
    if topn >= x.size:
        return np.argsort(x)[:topn]
    most_extreme = np.argpartition(x, topn)[:topn]
    return most_extreme.take(np.argsort(x.take(most_extreme)))


def _ensure_list(value):
    if value is None:
        return []
    if isinstance(value, (str, int, np.integer)) or (isinstance(value, np.ndarray) and
                                                    value.ndim == 1):
        return [value]
    return list(value)


class KeyedVectors:
    """Word vectors with their words: ``kv["king"]``, ``kv.most_similar(positive=[...],
    negative=[...], topn=10)``, ``kv.similarity(a, b)``, ``kv.doesnt_match(words)``,
    ``kv.evaluate_word_pairs(path)``, ``kv.evaluate_word_analogies(path)``, as in gensim 4.

    vectors: float32 [len(index_to_key), vector_size] (a read-only memory map for
    ``load(..., mmap='r')``); index_to_key: the words in row order; key_to_index: word ->
    row. Searches run emb's k-NN index, whose cosines equal gensim's within float32
    rounding (a few ulps; docs/search.md)."""

    def __init__(self, vector_size=None, count=0, dtype=np.float32, vectors=None,
                 index_to_key=None, counts=None):
        if vectors is None:
            vectors = np.zeros((count, vector_size or 0), dtype=dtype)
        self.vectors = vectors
        self.index_to_key = list(index_to_key) if index_to_key is not None else \
            [str(i) for i in range(len(vectors))]
        self.key_to_index = {}
        for i, k in enumerate(self.index_to_key):
            self.key_to_index.setdefault(k, i)
        self.counts = list(counts) if counts is not None else None
        self.norms = None
        self._index = {}

    # ---- construction from files ----

    @classmethod
    def load_word2vec_format(cls, fname, fvocab=None, binary=False, encoding="utf8",
                             unicode_errors="strict", limit=None, datatype=np.float32,
                             no_header=False):
        """gensim's reader arguments: word2vec text (binary=False), word2vec binary
        (binary=True), or text without a header line (no_header=True: GloVe)."""
        if encoding.replace("-", "").lower() != "utf8":
            raise ValueError("emb reads UTF-8 word files only")
        fmt = "glove" if no_header else ("word2vec-binary" if binary else "word2vec-text")
        kv = cls._read(fname, limit=limit or 0, format=fmt,
                       check_utf8=unicode_errors == "strict")
        if fvocab is not None:  # gensim: "word count" lines give the counts
            counts = {}
            with open(fvocab, encoding="utf8") as f:
                for line in f:
                    w, c = line.rstrip("\n").rsplit(" ", 1)
                    counts[w] = int(c)
            kv.counts = [counts.get(w, 0) for w in kv.index_to_key]
        if datatype is not np.float32 and np.dtype(datatype) != np.float32:
            kv.vectors = kv.vectors.astype(datatype)
        return kv

    @classmethod
    def load(cls, fname, mmap=None, limit=0, tensor=None):
        """Any table file emb reads, its format found from the content: safetensors (with
        the words emb stores in its metadata), npy (with a "<stem>.vocab" file beside it),
        word2vec text or binary, GloVe, fastText .vec. mmap='r' maps a float32 safetensors
        file read-only instead of reading it (vectors is then a read-only view of the
        mapping). A file written by gensim's KeyedVectors.save() (a pickle, the large arrays
        in "<fname>.vectors.npy" beside it) is read without gensim by an unpickler that
        rebuilds nothing but the words, vectors and counts (emb.gensimfile: no code from the
        file runs); mmap='r' then maps the separate .npy files as gensim does."""
        fname = os.fspath(fname)
        if gensimfile.is_gensim_pickle(fname):
            words, vectors, counts = gensimfile.read(fname, mmap=mmap)
            if limit:
                words, vectors = words[:limit], vectors[:limit]
                counts = counts[:limit] if counts is not None else None
            return cls(vectors=vectors, index_to_key=words, counts=counts)
        if mmap is not None:
            if mmap != "r":
                raise ValueError("mmap must be None or 'r' (emb maps files read-only)")
            table = _emb.QTable.map(os.fspath(fname))
            if table.qtype != "f32":
                raise ValueError(f"mmap='r' needs a float32 table; this one is {table.qtype}")
            vectors = np.asarray(table).view(np.float32)
            kv = cls(vectors=vectors, index_to_key=table.words, counts=table.counts)
            kv._mapped = table
            return kv
        return cls._read(fname, limit=limit, format="auto", tensor=tensor)

    @classmethod
    def _read(cls, fname, **kw):
        words, counts, vectors, info = _emb.read_vectors(os.fspath(fname), **kw)
        if counts is not None and not any(counts):
            counts = None
        return cls(vectors=vectors, index_to_key=words, counts=counts)

    def save(self, fname, dtype="float32"):
        """Writes the vectors and words in the format the file name says (.safetensors,
        .npy, .bin, .vec, .txt), atomically."""
        _emb.write_vectors(os.fspath(fname), self._f32(), words=self.index_to_key,
                           counts=self.counts, dtype=dtype)

    def save_word2vec_format(self, fname, fvocab=None, binary=False, write_header=True):
        if not write_header and binary:
            raise ValueError("the word2vec binary format has a header")
        fmt = "word2vec-binary" if binary else ("word2vec-text" if write_header else "glove")
        _emb.write_vectors(os.fspath(fname), self._f32(), words=self.index_to_key,
                           counts=self.counts, format=fmt)
        if fvocab is not None:
            with open(fvocab, "w", encoding="utf8") as f:
                for i, w in enumerate(self.index_to_key):
                    f.write(f"{w} {self.counts[i] if self.counts else 0}\n")

    def _f32(self):
        return np.ascontiguousarray(self.vectors, dtype=np.float32)

    # ---- access ----

    def __len__(self):
        return len(self.index_to_key)

    def __contains__(self, key):
        return self.has_index_for(key)

    def has_index_for(self, key):
        return self.get_index(key, -1) >= 0

    @property
    def vector_size(self):
        return self.vectors.shape[1]

    def get_index(self, key, default=None):
        if isinstance(key, (Integral, np.integer)) and 0 <= key < len(self.index_to_key):
            return int(key)
        val = self.key_to_index.get(key, -1)
        if val >= 0:
            return val
        if default is not None:
            return default
        raise KeyError(f"Key '{key}' not present")

    def get_vector(self, key, norm=False):
        index = self.get_index(key)
        if norm:
            self.fill_norms()
            return self.vectors[index] / self.norms[index]
        return self.vectors[index]

    def __getitem__(self, key_or_keys):
        if isinstance(key_or_keys, (str, Integral, np.integer)):
            return self.get_vector(key_or_keys)
        return np.vstack([self.get_vector(k) for k in key_or_keys])

    def get_vecattr(self, key, attr):
        if attr != "count" or self.counts is None:
            raise KeyError(attr)
        return self.counts[self.get_index(key)]

    def fill_norms(self, force=False):
        if self.norms is None or force:
            self.norms = np.linalg.norm(self.vectors, axis=1)

    def get_normed_vectors(self):
        self.fill_norms()
        return self.vectors / self.norms[..., np.newaxis]

    def get_mean_vector(self, keys, weights=None, pre_normalize=True, post_normalize=False,
                        ignore_missing=True):
        """gensim's weighted mean of (normalised) vectors."""
        if len(keys) == 0:
            raise ValueError("cannot compute mean with no input")
        weights = np.ones(len(keys)) if weights is None else np.asarray(weights)
        if len(keys) != weights.shape[0]:
            raise ValueError("keys and weights array must have same number of elements")
        mean = np.zeros(self.vector_size, self.vectors.dtype)
        total = 0
        for w, key in zip(weights, keys):
            if isinstance(key, np.ndarray):
                mean += w * key
                total += abs(w)
            elif key in self:
                mean += w * self.get_vector(key, norm=pre_normalize)
                total += abs(w)
            elif not ignore_missing:
                raise KeyError(f"Key '{key}' not present in vocabulary")
        if total > 0:
            mean = mean / total
        if post_normalize:
            mean = _unitvec(mean).astype(np.float32)
        return mean

    # ---- similarity ----

    def _knn(self, num_rows):
        """emb's cosine index over the first num_rows rows (cached; rebuilt when the vectors
        object changes)."""
        key = (num_rows, id(self.vectors))
        if key not in self._index:
            self._index = {k: v for k, v in self._index.items() if k[1] == id(self.vectors)}
            self._index[key] = _emb.Knn(self._table(), num_rows)
        return self._index[key]

    def _table(self):
        mapped = getattr(self, "_mapped", None)
        if mapped is not None:
            return mapped
        if self.vectors.dtype != np.float32 or not self.vectors.flags.c_contiguous:
            self.vectors = self._f32()
        return self.vectors

    def most_similar(self, positive=None, negative=None, topn=10, clip_start=0,
                     clip_end=None, restrict_vocab=None, indexer=None):
        """The topn keys nearest to the weighted mean of the unit vectors of positive (+1)
        and negative (-1) keys, by cosine similarity, excluding the query keys; topn=None:
        the similarities of every key (numpy, as gensim computes them)."""
        if isinstance(topn, Integral) and topn < 1:
            return []
        positive = _ensure_list(positive)
        negative = _ensure_list(negative)
        self.fill_norms()
        clip_end = clip_end or len(self.vectors)
        if restrict_vocab:
            clip_start, clip_end = 0, restrict_vocab
        keys = []
        weight = np.concatenate((np.ones(len(positive)), -1.0 * np.ones(len(negative))))
        for i, item in enumerate(positive + negative):
            if isinstance(item, (str, Integral, np.integer, np.ndarray)):
                keys.append(item)
            else:
                keys.append(item[0])
                weight[i] = item[1]
        mean = self.get_mean_vector(keys, weight, pre_normalize=True, post_normalize=True,
                                    ignore_missing=False)
        all_keys = [self.get_index(k) for k in keys
                    if not isinstance(k, np.ndarray) and self.has_index_for(k)]
        if indexer is not None and isinstance(topn, int):
            return indexer.most_similar(mean, topn)
        if not topn or clip_start:
            dists = np.dot(self.vectors[clip_start:clip_end], mean) / \
                self.norms[clip_start:clip_end]
            if not topn:
                return dists
            best = np.argsort(-dists, kind="stable")[:topn + len(all_keys)]
            result = [(self.index_to_key[s + clip_start], float(dists[s])) for s in best
                      if s + clip_start not in all_keys]
            return result[:topn]
        k = min(topn, clip_end)
        exclude = np.array([all_keys or [-1]], dtype=np.int64)
        ids, scores = self._knn(clip_end).search(mean[np.newaxis, :], k, exclude)
        return [(self.index_to_key[i], float(s)) for i, s in zip(ids[0], scores[0]) if i >= 0]

    def most_similar_cosmul(self, positive=None, negative=None, topn=10, restrict_vocab=None):
        """The topn keys best by Levy and Goldberg's multiplicative objective (3CosMul):
        the product of the positive keys' cosines over the product of the negative keys'
        cosines (+1e-6), each cosine shifted to [0, 1] as (1 + cos) / 2; the query keys are
        left out. gensim's formula and order, computed the same way with numpy; topn=None:
        the scores of every key. restrict_vocab=n searches the first n keys only (gensim 4.2
        accepts the argument and ignores it)."""
        if isinstance(topn, Integral) and topn < 1:
            return []
        positive = _ensure_list(positive)
        negative = _ensure_list(negative)
        self.fill_norms()
        all_words = {self.get_index(w) for w in positive + negative
                     if not isinstance(w, np.ndarray) and w in self.key_to_index}
        positive = [self.get_vector(w, norm=True) if isinstance(w, str) else w for w in positive]
        negative = [self.get_vector(w, norm=True) if isinstance(w, str) else w for w in negative]
        if not positive:
            raise ValueError("cannot compute similarity with no input")
        vectors, norms = self.vectors, self.norms
        if restrict_vocab:
            vectors, norms = vectors[:restrict_vocab], norms[:restrict_vocab]
        pos_dists = [((1 + np.dot(vectors, term) / norms) / 2) for term in positive]
        neg_dists = [((1 + np.dot(vectors, term) / norms) / 2) for term in negative]
        dists = np.prod(pos_dists, axis=0) / (np.prod(neg_dists, axis=0) + 0.000001)
        if not topn:
            return dists
        best = _argsort_desc(dists, topn + len(all_words))
        result = [(self.index_to_key[i], float(dists[i])) for i in best if i not in all_words]
        return result[:topn]

    def similar_by_word(self, word, topn=10, restrict_vocab=None):
        return self.most_similar(positive=[word], topn=topn, restrict_vocab=restrict_vocab)

    def similar_by_vector(self, vector, topn=10, restrict_vocab=None):
        return self.most_similar(positive=[vector], topn=topn, restrict_vocab=restrict_vocab)

    def similarity(self, w1, w2):
        """The cosine similarity of two keys."""
        return np.dot(_unitvec(self[w1]), _unitvec(self[w2]))

    def n_similarity(self, ws1, ws2):
        if not len(ws1) or not len(ws2):
            raise ZeroDivisionError("At least one of the passed list is empty.")
        a = np.array([self[k] for k in ws1]).mean(axis=0)
        b = np.array([self[k] for k in ws2]).mean(axis=0)
        return np.dot(_unitvec(a), _unitvec(b))

    def distance(self, w1, w2):
        return 1 - self.similarity(w1, w2)

    def rank_by_centrality(self, words, use_norm=True):
        used = [w for w in words if w in self]
        if not used:
            raise ValueError("cannot select a word from an empty list")
        vectors = np.vstack([self.get_vector(w, norm=use_norm) for w in used]).astype(np.float32)
        mean = self.get_mean_vector(vectors, post_normalize=True)
        dists = np.dot(vectors, mean)
        return sorted(zip(dists, used), reverse=True)

    def doesnt_match(self, words):
        """The key furthest from the mean of the others' unit vectors."""
        return self.rank_by_centrality(words)[-1][1]

    # ---- evaluations ----

    def _ok_vocab(self, restrict_vocab, case_insensitive):
        ok_keys = self.index_to_key[:restrict_vocab]
        if case_insensitive:
            return {k.upper(): self.get_index(k) for k in reversed(ok_keys)}
        return {k: self.get_index(k) for k in reversed(ok_keys)}

    def evaluate_word_pairs(self, pairs, delimiter="\t", encoding="utf8", restrict_vocab=300000,
                            case_insensitive=True, dummy4unknown=False):
        """((pearson r, p), (spearman rho, p), oov %) against a file of "word word score"
        lines, as gensim computes them (the p-values with scipy when it is installed, else
        NaN)."""
        ok_vocab = self._ok_vocab(restrict_vocab, case_insensitive)
        gold, model = [], []
        oov = 0
        with open(pairs, encoding=encoding) as fin:
            for line in fin:
                if not line or line.startswith("#"):
                    continue
                try:
                    parts = line.split(delimiter)
                    a, b, sim = [w.upper() for w in parts] if case_insensitive else parts
                    sim = float(sim)
                except (ValueError, TypeError):
                    continue
                if a not in ok_vocab or b not in ok_vocab:
                    oov += 1
                    if dummy4unknown:
                        model.append(0.0)
                        gold.append(sim)
                    continue
                gold.append(sim)
                model.append(self.similarity(ok_vocab[a], ok_vocab[b]))
        if not gold:
            raise ValueError(f"No valid similarity judgements found in {pairs}: either invalid "
                             f"format or all are out-of-vocabulary in {self}")
        pearson, spearman = _correlations(np.array(gold, np.float64), np.array(model, np.float64))
        total = len(gold) if dummy4unknown else len(gold) + oov
        return pearson, spearman, float(oov) / total * 100

    def evaluate_word_analogies(self, analogies, restrict_vocab=300000, case_insensitive=True,
                                dummy4unknown=False, similarity_function="most_similar"):
        """(accuracy, sections) on a questions-words file, gensim's 3CosAdd rule: the answer
        is the first of the 5 nearest keys to b - a + c (among the first restrict_vocab)
        that is not a, b or c. The questions run through emb's batched analogy search."""
        if similarity_function != "most_similar":
            raise ValueError("only similarity_function='most_similar' (3CosAdd) is provided")
        ok_vocab = self._ok_vocab(restrict_vocab, case_insensitive)
        sections, section = [], None
        questions = []  # (section, a, b, c, expected) in file order
        oov = quadruplets = 0
        with open(analogies, "rb") as fin:
            for line_no, raw in enumerate(fin):
                line = raw.decode("utf8")
                if line.startswith(": "):
                    section = {"section": line.lstrip(": ").strip(), "correct": [],
                               "incorrect": []}
                    sections.append(section)
                    continue
                if section is None:
                    raise ValueError(f"Missing section header before line #{line_no} in "
                                     f"{analogies}")
                try:
                    words = [w.upper() for w in line.split()] if case_insensitive else \
                        line.split()
                    a, b, c, expected = words
                except ValueError:
                    continue
                quadruplets += 1
                if any(w not in ok_vocab for w in (a, b, c, expected)):
                    oov += 1
                    if dummy4unknown:
                        questions.append((section, a, b, c, expected, False))
                    continue
                questions.append((section, a, b, c, expected, True))
        asked = [q for q in questions if q[5]]
        if asked:
            abc = np.array([[ok_vocab[q[1]], ok_vocab[q[2]], ok_vocab[q[3]]] for q in asked],
                           dtype=np.int64)
            k = min(5, min(restrict_vocab, len(self.vectors)))
            ids, _ = self._knn(min(restrict_vocab, len(self.vectors))).analogy(abc, k)
        row = 0
        for sec, a, b, c, expected, ok in questions:
            predicted = None
            if ok:
                ignore = {a, b, c}
                for i in ids[row]:
                    if i < 0:
                        break
                    w = self.index_to_key[i]
                    predicted = w.upper() if case_insensitive else w
                    if predicted in ok_vocab and predicted not in ignore:
                        break
                row += 1
            (sec["correct"] if ok and predicted == expected else sec["incorrect"]).append(
                (a, b, c, expected))
        total = {"section": "Total accuracy",
                 "correct": list(itertools.chain.from_iterable(s["correct"] for s in sections)),
                 "incorrect": list(itertools.chain.from_iterable(s["incorrect"]
                                                                 for s in sections))}
        n = len(total["correct"]) + len(total["incorrect"])
        score = len(total["correct"]) / n if n else 0.0
        sections.append(total)
        return score, sections

    def __repr__(self):
        return f"<KeyedVectors: {len(self)} keys, vector_size {self.vector_size}>"


class FastTextKeyedVectors(KeyedVectors):
    """gensim's FastTextKeyedVectors over a fastText model (.bin, as fastText 0.9.2 or
    ``emb train --subwords --save-model`` writes it): the vocabulary's vectors as in
    KeyedVectors (``vectors``, fastText's .vec), and a vector for any other word, the mean of
    its character n-grams' rows, computed as fastText computes it (``fasttext
    print-word-vectors``, bit for bit; gensim's within float32 rounding). As in gensim,
    ``word in kv`` is true for every word that has n-grams, ``kv.has_index_for(word)`` only
    for the vocabulary's; ``kv[word]``, ``similarity``, ``most_similar(positive=[...])`` and
    the other queries take unseen words, and searches return vocabulary words. A word without
    n-grams outside the vocabulary is a KeyError, as in gensim."""

    def __init__(self, model):
        words, counts, vectors = model.vectors()
        super().__init__(vectors=vectors, index_to_key=words, counts=counts)
        self._model = model
        self.min_n, self.max_n, self.bucket = model.minn, model.maxn, model.bucket

    @classmethod
    def load(cls, fname, mmap=None):
        """The model file read into memory (mmap is accepted for gensim's signature and
        ignored: the n-gram rows are read when a word needs them)."""
        return cls(_emb.FastText(os.fspath(fname)))

    def __contains__(self, key):
        if self.has_index_for(key):
            return True
        return isinstance(key, str) and self._model.num_subwords(key) > 0

    def get_vector(self, key, norm=False):
        if self.has_index_for(key):
            return super().get_vector(key, norm)
        if not isinstance(key, str) or self._model.num_subwords(key) == 0:
            raise KeyError("cannot calculate vector for OOV word without ngrams")
        v = self._model.word_vector(key)
        return v / np.linalg.norm(v) if norm else v

    def __repr__(self):
        return (f"<FastTextKeyedVectors: {len(self)} keys, vector_size {self.vector_size}, "
                f"n-grams {self.min_n}-{self.max_n} in {self.bucket} buckets>")


def load_facebook_vectors(path, encoding="utf-8"):
    """gensim.models.fasttext.load_facebook_vectors: the word vectors of a fastText model
    (.bin) as an emb.FastTextKeyedVectors (words seen in training or not)."""
    if encoding.replace("-", "").lower() != "utf8":
        raise ValueError("emb reads UTF-8 word files only")
    return FastTextKeyedVectors.load(path)


def save_facebook_model(model, path, encoding="utf-8"):
    """gensim.models.fasttext.save_facebook_model: writes an emb.FastTextKeyedVectors (from
    emb.train(max_n=...) or load_facebook_vectors) as a fastText .bin, atomically: the
    model's arguments, words and counts, word and n-gram rows and output rows, as fastText
    0.9.2 writes them (`fasttext` loads it; a model read from a .bin fastText wrote is written
    back byte for byte). A supervised model (a classifier) is refused."""
    if encoding.replace("-", "").lower() != "utf8":
        raise ValueError("emb writes UTF-8 word files only")
    if not isinstance(model, FastTextKeyedVectors):
        raise TypeError("save_facebook_model takes an emb.FastTextKeyedVectors, got "
                        f"{type(model).__name__}")
    model._model.save(os.fspath(path))


def _correlations(x, y):
    """(pearson, spearman) as scipy.stats gives them (gensim's evaluate_word_pairs)."""
    try:
        from scipy import stats
    except ImportError:  # the statistics without p-values
        rho = _emb.spearman(x, y)
        r = float(np.corrcoef(x, y)[0, 1])
        return (r, float("nan")), (rho, float("nan"))
    return stats.pearsonr(x, y), stats.spearmanr(x, y)
