"""emb's file API (include/emb/io.h) for the interop tests, through the Python package `emb`
(python/; conftest.py puts $EMB_BUILD_DIR/python on the path), and a ~20-line safetensors
reader/writer (json + struct + numpy: the `safetensors` package is not in Debian)."""
import json
import os
import struct

import numpy as np

import emb

FMT_AUTO, FMT_SAFETENSORS, FMT_NPY, FMT_W2V_TEXT, FMT_W2V_BINARY, FMT_GLOVE = range(6)
_FORMAT_NAMES = ["auto", "safetensors", "npy", "word2vec-text", "word2vec-binary", "glove"]
# emb_dtype codes (include/emb/core.h) of the element types the files hold
_DTYPE_CODES = {"float32": 0, "int64": 1, "int32": 2, "float64": 3, "float16": 4,
                "bfloat16": 5, "int8": 6, "uint8": 7, "int16": 8, "bool": 9}
_DTYPE_NAMES = {v: k for k, v in _DTYPE_CODES.items()}


def read(path, limit=0, fmt=FMT_AUTO, tensor=None):
    """(words or None, float32 array, metadata dict) of a file read by emb (emb_vectors_read);
    the metadata's format and file_dtype are the C enum values."""
    words, _, arr, info = emb.read_vectors(os.fspath(path), limit=limit,
                                           format=_FORMAT_NAMES[fmt], tensor=tensor)
    meta = dict(info)
    meta["format"] = _FORMAT_NAMES.index(info["format"])
    meta["file_dtype"] = _DTYPE_CODES[info["file_dtype"]]
    return words, arr, meta


def write(path, arr, words=None, counts=None, **opts):
    """Writes a float32 table (and words) with emb_vectors_write; opts are emb_write_options
    fields (format and dtype as the C enum values)."""
    if "format" in opts:
        opts["format"] = _FORMAT_NAMES[opts["format"]]
    if "dtype" in opts:
        opts["dtype"] = _DTYPE_NAMES[opts["dtype"]]
    emb.write_vectors(os.fspath(path), np.ascontiguousarray(arr, dtype=np.float32), words=words,
                      counts=counts, **opts)


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
