"""What the parity suites share besides the package itself: the project's comparison rule
(PyTorch's assert_close, or bitwise), output buffers pre-filled with a sentinel, and the
kernel tiers this CPU can run (docs/semantics.md, "Kernel tiers"). emb is reached through
the Python package `emb` (python/), never through a private binding."""
import numpy as np

import emb
import machine

# The tier this run is under, from EMB_KERNELS in the environment (`make test-machines` runs
# the suites under each tier): tests that switch tiers go back to it, not to "auto".
RUN_KERNEL_MODE = emb.get_kernel_mode()
# The tier a test means by "the fast kernels" (CBLAS, SLEEF, SIMD twins): the run's tier,
# unless the run is under the reference kernels.
FAST_KERNEL_MODE = RUN_KERNEL_MODE if RUN_KERNEL_MODE != "ref" else "auto"


def kernel_modes():
    """The kernel modes that select distinct variants on this CPU, the reference first:
    "ref", "avx2" (AVX2 and FMA), "auto" when it means AVX-512 (F and VL)."""
    f = machine.cpu_flags()
    modes = ["ref"]
    if machine.AVX2 <= f:
        modes.append("avx2")
        if machine.AVX512 <= f:
            modes.append("auto")
    return modes


def assert_close(got, want, exact=False, rtol=1.3e-6, atol=1e-5, what="value"):
    """|got - want| <= atol + rtol*|want| elementwise (NaN equals NaN), or bitwise equality
    with exact=True. On failure raises AssertionError naming the worst error and the first
    mismatches."""
    if hasattr(want, "detach"):
        want = want.detach().numpy()
    got = np.asarray(got)
    want = np.asarray(want)
    assert got.shape == want.shape, f"{what}: shape {got.shape} != expected {want.shape}"
    if got.size == 0:
        return
    if exact:
        gb = np.ascontiguousarray(got).view(np.uint8).reshape(got.size, -1)
        wb = np.ascontiguousarray(want.astype(got.dtype)).view(np.uint8).reshape(got.size, -1)
        bad = np.nonzero((gb != wb).any(axis=1))[0]
    else:
        g = got.astype(np.float64).ravel()
        w = want.astype(np.float64).ravel()
        both_nan = np.isnan(g) & np.isnan(w)
        with np.errstate(invalid="ignore"):
            ok = (np.abs(g - w) <= atol + rtol * np.abs(w)) | both_nan | (g == w)
        bad = np.nonzero(~ok)[0]
    if bad.size:
        g = got.ravel().astype(np.float64)
        w = want.ravel().astype(np.float64)
        with np.errstate(invalid="ignore"):
            err = np.abs(g - w)
        err = np.where(np.isnan(err), np.inf, err)
        worst = int(np.argmax(err))
        lines = [f"{what}: {bad.size} of {got.size} elements differ"
                 f"{' (bit-exact required)' if exact else f' (rtol {rtol}, atol {atol})'};"
                 f" worst |err| {err[worst]:.3g} at flat index {worst}"
                 f" (got {g[worst]!r}, want {w[worst]!r})"]
        for i in bad[:5]:
            gi, wi = got.ravel()[i], want.ravel()[i]
            if exact and got.dtype == np.float32:  # the bits: NaN payloads, signs of zero
                gi = f"{gi!r} (0x{int(np.float32(gi).view(np.uint32)):08x})"
                wi = f"{wi!r} (0x{int(np.float32(wi).view(np.uint32)):08x})"
            lines.append(f"  [{i}] got {gi} want {wi}")
        raise AssertionError("\n".join(lines))


def tensor_out(shape, dtype=np.float32, fill=np.nan):
    """A numpy output buffer pre-filled with a sentinel."""
    a = np.empty(shape, dtype=dtype)
    a.fill(fill if np.issubdtype(a.dtype, np.floating) else 0)
    return a
