"""Reading gensim 4's KeyedVectors.save() files without gensim and without running code from
the file.

gensim saves a KeyedVectors object as a pickle; arrays of sep_limit bytes or more (10 MiB by
default) go beside it in "<file>.<attribute>.npy" (".npz" when the file name ends in .gz or
.bz2, the pickle then compressed too). A pickle names the classes it rebuilds, and the
standard unpickler imports and calls whatever it names. This reader's unpickler knows a
fixed list of names: gensim's KeyedVectors classes (rebuilt as an inert attribute holder,
no gensim code runs) and the numpy functions that rebuild an array and its dtype. Any other
name makes it stop with pickle.UnpicklingError, so a file cannot run code.
"""
import bz2
import gzip
import io
import pickle

import numpy as np

# The gensim classes whose pickles hold word vectors (gensim 4 pickles Word2VecKeyedVectors
# as KeyedVectors; older 4.x files may name the alias).
_GENSIM_CLASSES = {
    ("gensim.models.keyedvectors", "KeyedVectors"),
    ("gensim.models.keyedvectors", "Word2VecKeyedVectors"),
}
# What numpy's pickles of arrays and dtypes call (numpy 1.x and 2.x module names).
_NUMPY = {
    ("numpy.core.multiarray", "_reconstruct"): np.core.multiarray._reconstruct,
    ("numpy._core.multiarray", "_reconstruct"): np.core.multiarray._reconstruct,
    ("numpy.core.multiarray", "scalar"): np.core.multiarray.scalar,
    ("numpy._core.multiarray", "scalar"): np.core.multiarray.scalar,
    ("numpy", "ndarray"): np.ndarray,
    ("numpy", "dtype"): np.dtype,
}


class _Saved:
    """The stand-in for a gensim class: takes the pickled attributes, runs nothing."""

    def __setstate__(self, state):
        if not isinstance(state, dict):
            raise pickle.UnpicklingError("unexpected state for a gensim KeyedVectors object")
        self.__dict__.update(state)


class _Unpickler(pickle.Unpickler):
    def find_class(self, module, name):
        if (module, name) in _GENSIM_CLASSES:
            return _Saved
        fn = _NUMPY.get((module, name))
        if fn is None:
            raise pickle.UnpicklingError(
                f"{module}.{name} is not part of a gensim KeyedVectors file; emb does not load "
                f"pickles that name other classes or functions")
        return fn


def _compressed(fname):
    return fname.endswith(".gz") or fname.endswith(".bz2")


def _open(fname):
    if fname.endswith(".gz"):
        return gzip.open(fname, "rb")
    if fname.endswith(".bz2"):
        return bz2.open(fname, "rb")
    return open(fname, "rb")


def is_gensim_pickle(fname):
    """True when the file starts as a pickle of protocol 2 or later does (and is not a
    safetensors file, whose first 8 bytes are its header's length, then '{')."""
    try:
        with _open(fname) as f:
            head = f.read(9)
    except (OSError, EOFError):
        return False
    return len(head) == 9 and head[0] == 0x80 and 2 <= head[1] <= 5 and head[8:9] != b"{"


def read(fname, mmap=None):
    """(index_to_key, vectors, counts or None) of a gensim KeyedVectors.save() file; the
    separate arrays are memory-mapped with numpy.load(mmap_mode=mmap) as gensim does."""
    with _open(fname) as f:
        data = f.read()
    obj = _Unpickler(io.BytesIO(data)).load()
    if not isinstance(obj, _Saved):
        raise pickle.UnpicklingError(f"{fname} does not hold a gensim KeyedVectors object")
    attrs = obj.__dict__
    if attrs.get("__scipys") or attrs.get("__recursive_saveloads"):
        raise ValueError(f"{fname}: sparse or nested objects are not part of KeyedVectors files")
    compress = _compressed(fname)
    for name in attrs.get("__numpys", []):
        if not isinstance(name, str):
            raise pickle.UnpicklingError(f"{fname}: bad list of separate arrays")
        if compress:
            if mmap:
                raise OSError(f"Cannot mmap compressed object {name} in file {fname}.{name}.npz. "
                              f"Use `load(fname, mmap=None)` or uncompress files manually.")
            with np.load(f"{fname}.{name}.npz", allow_pickle=False) as z:
                attrs[name] = z["val"]
        else:
            attrs[name] = np.load(f"{fname}.{name}.npy", mmap_mode=mmap, allow_pickle=False)
    words = attrs.get("index_to_key")
    if words is None:  # files of gensim before 4.0
        words = attrs.get("index2word", attrs.get("index2entity"))
    vectors = attrs.get("vectors", attrs.get("syn0"))
    if not isinstance(words, list) or not isinstance(vectors, np.ndarray) or vectors.ndim != 2:
        raise ValueError(f"{fname}: no words and 2-D vectors in this gensim file")
    if len(words) != vectors.shape[0]:
        raise ValueError(f"{fname}: {len(words)} words for {vectors.shape[0]} vectors")
    expandos = attrs.get("expandos") or {}
    counts = expandos.get("count") if isinstance(expandos, dict) else None
    if counts is not None:
        counts = [int(c) for c in counts]
    return words, vectors, counts
