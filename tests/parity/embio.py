"""ctypes bindings of emb's file API (include/emb/io.h, vocab.h) for the interop tests, and a
~20-line safetensors reader/writer (json + struct + numpy: the `safetensors` package is not
in Debian)."""
import ctypes as C
import json
import struct

import numpy as np

from embpy import lib, Tensor, T, check, MAX_DIMS  # noqa: F401

FMT_AUTO, FMT_SAFETENSORS, FMT_NPY, FMT_W2V_TEXT, FMT_W2V_BINARY, FMT_GLOVE = range(6)


class Vectors(C.Structure):
    _fields_ = [("weight", Tensor), ("vocab", C.c_void_p), ("format", C.c_int),
                ("file_dtype", C.c_int), ("file_rows", C.c_int64), ("duplicates", C.c_int64),
                ("nonfinite", C.c_int64)]


class ReadOptions(C.Structure):
    _fields_ = [("format", C.c_int), ("limit", C.c_int64), ("tensor", C.c_char_p),
                ("check_utf8", C.c_bool)]


class WriteOptions(C.Structure):
    _fields_ = [("format", C.c_int), ("dtype", C.c_int), ("tensor", C.c_char_p),
                ("precision", C.c_int), ("trailing_space", C.c_bool), ("binary_newline", C.c_bool)]


lib.emb_vectors_read_options_default.restype = ReadOptions
lib.emb_vectors_write_options_default.restype = WriteOptions
lib.emb_vocab_word.restype = C.c_void_p
lib.emb_vocab_word.argtypes = [C.c_void_p, C.c_int64, C.POINTER(C.c_size_t)]
lib.emb_vocab_num_words.restype = C.c_int64
lib.emb_vocab_num_words.argtypes = [C.c_void_p]
lib.emb_vocab_count.restype = C.c_int64
lib.emb_vocab_count.argtypes = [C.c_void_p, C.c_int64]
lib.emb_vocab_add.argtypes = [C.c_void_p, C.c_char_p, C.c_size_t, C.c_int64, C.c_void_p, C.c_void_p]
lib.emb_vocab_free.argtypes = [C.c_void_p]
lib.emb_vectors_read.argtypes = [C.c_char_p, C.POINTER(ReadOptions), C.POINTER(Vectors)]
lib.emb_vectors_write.argtypes = [C.c_char_p, C.POINTER(Tensor), C.c_void_p, C.POINTER(WriteOptions)]
lib.emb_vectors_release.argtypes = [C.POINTER(Vectors)]


def read(path, limit=0, fmt=FMT_AUTO, tensor=None):
    """(words or None, float32 array, Vectors metadata dict) of a file read by emb."""
    o = lib.emb_vectors_read_options_default()
    o.limit, o.format = limit, fmt
    if tensor:
        o.tensor = tensor.encode()
    v = Vectors()
    check(lib.emb_vectors_read(str(path).encode(), C.byref(o), C.byref(v)))
    try:
        rows, dim = v.weight.shape[0], v.weight.shape[1]
        n = rows * dim
        arr = (np.ctypeslib.as_array(C.cast(v.weight.data, C.POINTER(C.c_float)), (n,)).copy()
               if n else np.zeros(0, np.float32)).reshape(rows, dim)
        words = None
        if v.vocab:
            words = []
            for i in range(lib.emb_vocab_num_words(v.vocab)):
                ln = C.c_size_t()
                p = lib.emb_vocab_word(v.vocab, i, C.byref(ln))
                words.append(C.string_at(p, ln.value).decode("utf-8", "surrogateescape"))
        meta = dict(format=v.format, file_dtype=v.file_dtype, file_rows=v.file_rows,
                    duplicates=v.duplicates, nonfinite=v.nonfinite)
        return words, arr, meta
    finally:
        lib.emb_vectors_release(C.byref(v))


def write(path, arr, words=None, counts=None, **opts):
    """Writes a float32 table (and words) with emb_vectors_write; opts set WriteOptions fields."""
    arr = np.ascontiguousarray(arr, dtype=np.float32)
    vocab = C.c_void_p()
    if words is not None:
        check(lib.emb_vocab_create(C.byref(vocab)))
    try:
        for i, w in enumerate(words or []):
            b = w.encode("utf-8", "surrogateescape")
            check(lib.emb_vocab_add(vocab, b, len(b), counts[i] if counts else 0, None, None))
        o = lib.emb_vectors_write_options_default()
        for k, val in opts.items():
            setattr(o, k, val.encode() if isinstance(val, str) else val)
        t = T(arr)
        check(lib.emb_vectors_write(str(path).encode(), C.byref(t), vocab if words is not None else None,
                                    C.byref(o)))
    finally:
        if words is not None:
            lib.emb_vocab_free(vocab)


# ---- a minimal safetensors implementation for the tests ----
ST_DTYPES = {"F32": np.float32, "F64": np.float64, "F16": np.float16, "I64": np.int64,
             "I32": np.int32, "U8": np.uint8, "I8": np.int8, "I16": np.int16, "BOOL": np.bool_}


def st_load(path):
    """{name: numpy array (BF16 as uint16 bits)}, metadata."""
    with open(path, "rb") as f:
        b = f.read()
    (n,) = struct.unpack("<Q", b[:8])
    h = json.loads(b[8:8 + n])
    meta = h.pop("__metadata__", {})
    out = {}
    for name, e in h.items():
        s, t = e["data_offsets"]
        dt = np.uint16 if e["dtype"] == "BF16" else ST_DTYPES[e["dtype"]]
        out[name] = np.frombuffer(b[8 + n + s:8 + n + t], dtype=dt).reshape(e["shape"])
    return out, meta


def st_save(path, tensors, metadata=None, dtypes=None):
    """tensors: {name: numpy array}; dtypes: {name: safetensors dtype} to override (BF16)."""
    inv = {np.dtype(v): k for k, v in ST_DTYPES.items()}
    h, off, blobs = {}, 0, []
    if metadata is not None:
        h["__metadata__"] = metadata
    for name, a in tensors.items():
        raw = np.ascontiguousarray(a).tobytes()
        h[name] = {"dtype": (dtypes or {}).get(name) or inv[a.dtype], "shape": list(a.shape),
                   "data_offsets": [off, off + len(raw)]}
        off += len(raw)
        blobs.append(raw)
    hb = json.dumps(h, separators=(",", ":")).encode()
    hb += b" " * (-len(hb) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(hb)) + hb + b"".join(blobs))
