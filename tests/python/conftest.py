"""The Python package's tests: `import emb` from the build folder (EMB_BUILD_DIR/python, set by
ctest; default build/), torch, numpy and gensim as the oracles, compared at test time."""
import os
import sys

import numpy as np

_here = os.path.dirname(os.path.abspath(__file__))
BUILD = os.environ.get("EMB_BUILD_DIR", os.path.join(_here, "..", "..", "build"))
sys.path.insert(0, os.path.join(BUILD, "python"))


def same_bits(got, want, what="value"):
    """Bitwise equality of two float32 arrays (NaN payloads and signed zeros included), with
    the first differences in the message."""
    got = np.ascontiguousarray(np.asarray(got))
    want = np.ascontiguousarray(np.asarray(want))
    assert got.shape == want.shape, f"{what}: shape {got.shape} != {want.shape}"
    assert got.dtype == want.dtype, f"{what}: dtype {got.dtype} != {want.dtype}"
    g = got.view(np.uint8).reshape(got.size, -1) if got.size else got
    w = want.view(np.uint8).reshape(want.size, -1) if want.size else want
    if got.size == 0:
        return
    bad = np.nonzero((g != w).any(axis=1))[0]
    assert bad.size == 0, (f"{what}: {bad.size} of {got.size} elements differ; first: " +
                           ", ".join(f"[{i}] {got.ravel()[i]!r} != {want.ravel()[i]!r}"
                                     for i in bad[:5]))
