"""Parity of emb.tensor_repr (emb_tensor_repr) with torch 1.13's repr(tensor).

Every expected string is produced by torch during the test (repr of the same data under the
same torch.set_printoptions), except the seed notebooks' printed outputs, which are checked
against both torch and emb. Every comparison is exact string equality."""
import contextlib
import warnings

import numpy as np
import pytest
import torch

import emb

NP_DTYPES = [np.float32, np.float64, np.int64, np.int32, np.int16, np.int8, np.uint8, np.bool_]


def emb_repr(arr, suffixes=(), **opts):
    """repr via emb (emb.tensor_repr); the options are torch.set_printoptions'."""
    return emb.tensor_repr(arr, suffixes=suffixes, **opts)


@contextlib.contextmanager
def torch_opts(precision=4, threshold=1000, edgeitems=3, linewidth=80, sci_mode=None):
    torch.set_printoptions(precision=precision, threshold=threshold, edgeitems=edgeitems,
                           linewidth=linewidth, sci_mode=sci_mode)
    try:
        yield
    finally:
        torch.set_printoptions(profile="default")  # also resets sci_mode to None


def torch_repr(x, **opts):
    if isinstance(x, np.ndarray):
        x = torch.from_numpy(np.array(x))  # a copy, so torch never shares our buffer
    with torch_opts(**opts):
        return repr(x)


def same(got, want, what=""):
    assert got == want, f"{what}\n--- emb ---\n{got}\n--- torch ---\n{want}"


# ---------------------------------------------------------------------------------------
# Random cases
# ---------------------------------------------------------------------------------------

def random_shape(rng, max_numel):
    rank = int(rng.integers(0, 6))
    while True:
        shape = []
        for _ in range(rank):
            r = rng.random()
            if r < 0.05:
                shape.append(0)
            elif r < 0.75:
                shape.append(int(rng.integers(1, 5)))
            elif r < 0.95:
                shape.append(int(rng.integers(5, 12)))
            else:
                shape.append(int(rng.integers(12, 60)))
        if int(np.prod(shape)) <= max_numel:
            return tuple(shape)


def big_shape(rng):
    """Shapes around the default threshold: wrapped rows and summarised dimensions."""
    return [(int(rng.integers(900, 2100)),),
            (int(rng.integers(20, 60)), int(rng.integers(20, 60))),
            (int(rng.integers(2, 12)), int(rng.integers(5, 15)), int(rng.integers(8, 30))),
            (3, 4, int(rng.integers(40, 100)), 2),
            (1, int(rng.integers(990, 1010))),
            ][int(rng.integers(0, 5))]


def random_floats(rng, shape, dtype):
    n = int(np.prod(shape))
    kind = rng.integers(0, 9)
    big = 300 if dtype == np.float64 else 36
    if kind == 0:    # normal with a random scale, possibly sci
        v = rng.standard_normal(n) * 10.0 ** rng.uniform(-10, 10)
    elif kind == 1:  # magnitudes spread over a random range of decades (ratio > 1000 or not)
        lo = rng.uniform(-12, 10)
        hi = lo + rng.uniform(0, 6)
        v = np.where(rng.random(n) < 0.5, -1, 1) * 10.0 ** rng.uniform(lo, hi, n)
    elif kind == 2:  # integral values (int mode), small or > 1e8
        v = np.round(rng.standard_normal(n) * 10.0 ** rng.integers(0, 11))
    elif kind == 3:  # exact binary fractions: rounding ties at every precision
        v = rng.integers(-4096, 4096, n) / 2.0 ** rng.integers(1, 12)
    elif kind == 4:  # plain randn, the common case
        v = rng.standard_normal(n)
    elif kind == 5:  # extreme exponents (3-digit exponents in float64)
        v = np.where(rng.random(n) < 0.5, -1, 1) * 10.0 ** rng.uniform(-big, big, n)
    elif kind == 6:  # values that round up across a digit boundary (9.99995 ...)
        v = (10.0 ** rng.integers(-5, 9, n)) * (1 - 10.0 ** -rng.uniform(3, 9, n))
        v *= np.where(rng.random(n) < 0.5, -1, 1)
    elif kind == 7:  # mostly zeros
        v = np.where(rng.random(n) < 0.8, 0.0, rng.standard_normal(n))
    else:            # small integers mixed with -0.0
        v = rng.integers(-3, 4, n).astype(np.float64)
    v = v.astype(dtype)
    if rng.random() < 0.35:  # sprinkle specials
        p = rng.uniform(0.05, 1.0)
        mask = rng.random(n) < p
        specials = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, -np.nan], dtype=dtype)
        v[mask] = specials[rng.integers(0, len(specials), int(mask.sum()))]
    return v.reshape(shape)


def random_ints(rng, shape, dtype):
    n = int(np.prod(shape))
    if dtype == np.bool_:
        return (rng.random(n) < rng.random()).reshape(shape)
    info = np.iinfo(dtype)
    r = rng.random()
    if r < 0.3:
        lo, hi = 0, 10
    elif r < 0.6:
        lo, hi = -1000, 1000
    else:
        lo, hi = int(info.min), int(info.max)
    lo, hi = max(lo, int(info.min)), min(hi, int(info.max))
    v = rng.integers(lo, hi, n, dtype=dtype, endpoint=True)
    if n and rng.random() < 0.2:
        v[int(rng.integers(0, n))] = info.min
    return v.reshape(shape)


def random_array(rng, shape, dtype):
    if np.issubdtype(dtype, np.floating):
        return random_floats(rng, shape, dtype)
    return random_ints(rng, shape, dtype)


def random_opts(rng):
    if rng.random() < 0.4:
        return {}
    o = {}
    if rng.random() < 0.5:
        o["precision"] = int(rng.integers(0, 12))
    if rng.random() < 0.5:
        o["threshold"] = int(rng.choice([0, 1, 5, 20, 100, 500, 1000, 5000]))
    if rng.random() < 0.5:
        o["edgeitems"] = int(rng.integers(1, 6))
    if rng.random() < 0.5:
        o["linewidth"] = int(rng.choice([1, 5, 10, 20, 40, 60, 79, 80, 81, 120, 200]))
    if rng.random() < 0.5:
        o["sci_mode"] = [None, True, False][int(rng.integers(0, 3))]
    return o


def run_case(rng, shape, dtype, opts, what):
    arr = random_array(rng, shape, dtype)
    same(emb_repr(arr, **opts), torch_repr(arr, **opts),
         f"{what}: dtype {np.dtype(dtype).name} shape {shape} opts {opts}")


@pytest.mark.parametrize("chunk", range(8))
def test_random_small(chunk):
    rng = np.random.default_rng(1000 + chunk)
    for i in range(400):
        dtype = NP_DTYPES[int(rng.integers(0, len(NP_DTYPES)))]
        if rng.random() < 0.5:  # floats are where most of the rules are
            dtype = [np.float32, np.float64][int(rng.integers(0, 2))]
        run_case(rng, random_shape(rng, 400), dtype, random_opts(rng), f"case {chunk}/{i}")


@pytest.mark.parametrize("chunk", range(4))
def test_random_large(chunk):
    """Shapes large enough to wrap rows and to be summarised (numel > threshold)."""
    rng = np.random.default_rng(2000 + chunk)
    for i in range(40):
        dtype = NP_DTYPES[int(rng.integers(0, len(NP_DTYPES)))]
        opts = random_opts(rng)
        opts.pop("threshold", None) if rng.random() < 0.5 else None
        run_case(rng, big_shape(rng), dtype, opts, f"large case {chunk}/{i}")


def test_every_dtype_and_rank():
    rng = np.random.default_rng(7)
    for dtype in NP_DTYPES:
        for rank in range(0, 10):
            shape = tuple(int(rng.integers(1, 4)) for _ in range(rank))
            for opts in ({}, {"threshold": 3, "edgeitems": 1}):
                run_case(rng, shape, dtype, opts, f"rank {rank}")


def test_empty_tensors():
    for dtype in NP_DTYPES:
        for shape in [(0,), (0, 3), (2, 0), (3, 0, 2), (1, 1, 0), (0, 0, 0, 0, 0)]:
            arr = np.zeros(shape, dtype=dtype)
            for opts in ({}, {"linewidth": 10}, {"linewidth": 25}):
                same(emb_repr(arr, **opts), torch_repr(arr, **opts), f"{dtype} {shape} {opts}")


def test_special_values():
    nan, inf = float("nan"), float("inf")
    cases = [[nan], [inf], [-inf], [0.0], [-0.0], [nan, inf, -inf], [0.0, -0.0],
             [1.0, -inf], [1.5, nan], [1e-10, nan, 0.0], [1e10, -0.0, inf],
             [0.0, 0.0, 1.0], [-0.0, 2.0], [-0.0, 0.5], [123456789.0, 1.0],
             [1e8, 1.0], [100000000.5, 1.0], [1e-4, 1.0], [9.99999e-5, 1.0], [1000.0, 1.0],
             [1001.0, 1.0], [0.001, 1.0], [0.00099, 1.0], [-1e-5, 2.0], [5e-324, 1.0],
             [1.7976931348623157e308, -1.0], [0.5, 1.5, 2.5], [0.00005, 0.00015, 0.00025],
             [9.99995, 0.1], [99999.5, 1.0], [-99999.99999, 1.0]]
    for vals in cases:
        for dtype in (np.float32, np.float64):
            with np.errstate(over="ignore"):  # 1.8e308 becomes inf in float32, on purpose
                arr = np.array(vals, dtype=dtype)
            for opts in ({}, {"sci_mode": True}, {"sci_mode": False}, {"precision": 0},
                         {"precision": 1}, {"precision": 9}):
                same(emb_repr(arr, **opts), torch_repr(arr, **opts), f"{vals} {dtype} {opts}")
                same(emb_repr(arr[:1].reshape(()), **opts),
                     torch_repr(arr[:1].reshape(()), **opts), f"0-d {vals[0]} {opts}")


def test_scalars():
    rng = np.random.default_rng(11)
    for i in range(300):
        dtype = NP_DTYPES[i % len(NP_DTYPES)]
        run_case(rng, (), dtype, random_opts(rng), f"scalar {i}")


def test_number_formatting_stress():
    """Python's '{:.Nf}' / '{:.Ne}' against emb's on random bit patterns, ties and
    near-ties, at precisions 0 to 12, through 1-D tensors printed in full."""
    rng = np.random.default_rng(13)
    for dtype, itype in ((np.float64, np.uint64), (np.float32, np.uint32)):
        bits = rng.integers(0, np.iinfo(itype).max, 600, dtype=itype, endpoint=True)
        rand_bits = bits.view(dtype)
        rand_bits = rand_bits[np.isfinite(rand_bits)]
        ties = (rng.integers(-10**6, 10**6, 600) / 2.0 ** rng.integers(0, 20, 600)).astype(dtype)
        near = (np.round(rng.standard_normal(600) * 1e4) / 1e4).astype(dtype)  # 4-decimal data
        for vals in (rand_bits, ties, near):
            for precision in range(0, 13):
                for sci in (True, False):
                    if not sci and dtype == np.float64 and vals is rand_bits:
                        continue  # up to 300-digit numbers; covered by sci and the others
                    opts = {"precision": precision, "sci_mode": sci, "threshold": 10**6}
                    same(emb_repr(vals, **opts), torch_repr(vals, **opts),
                         f"{np.dtype(dtype).name} precision {precision} sci {sci}")


def test_large_summarised_and_full():
    """A 10^6-element tensor summarised, and a 3000-element one printed in full."""
    rng = np.random.default_rng(5)
    arr = rng.standard_normal((1000, 1000)).astype(np.float32)
    same(emb_repr(arr), torch_repr(arr), "1000x1000")
    arr = rng.standard_normal(3000)
    same(emb_repr(arr, threshold=100000), torch_repr(arr, threshold=100000), "3000 full")


# ---------------------------------------------------------------------------------------
# Suffixes
# ---------------------------------------------------------------------------------------

def test_requires_grad_suffix():
    rng = np.random.default_rng(21)
    for i in range(200):
        dtype = [np.float32, np.float64][i % 2]
        shape = random_shape(rng, 200) if i % 5 else big_shape(rng)
        arr = random_array(rng, shape, dtype)
        opts = random_opts(rng)
        x = torch.from_numpy(arr.copy()).requires_grad_()
        same(emb_repr(arr, suffixes=["requires_grad=True"], **opts), torch_repr(x, **opts),
             f"requires_grad case {i} {shape} {opts}")


GRAD_OPS = [
    lambda w: torch.nn.functional.embedding(torch.tensor([[1, 0, 2]]), w),
    lambda w: w * 1,
    lambda w: w + 0,
    lambda w: w.clone(),
    lambda w: w.t() if w.dim() == 2 else w.flip(0),
    lambda w: w.reshape(-1),
    lambda w: w[0],
    lambda w: w.double(),
    lambda w: torch.relu(w),
]


def test_grad_fn_suffix():
    """Expected strings are torch's repr of a tensor that has the grad_fn."""
    rng = np.random.default_rng(31)
    for i in range(300):
        shape = (int(rng.integers(3, 8)), int(rng.integers(1, 15)))
        w = torch.from_numpy(random_floats(rng, shape, np.float32)).requires_grad_()
        y = GRAD_OPS[i % len(GRAD_OPS)](w)
        name = type(y.grad_fn).__name__
        opts = random_opts(rng)
        same(emb_repr(y.detach().numpy(), suffixes=[f"grad_fn=<{name}>"], **opts),
             torch_repr(y, **opts), f"grad_fn case {i} {name} {opts}")


def test_several_suffixes_and_null_entries():
    """requires_grad plus names: two suffixes after the dtype; NULL entries are skipped."""
    rng = np.random.default_rng(41)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # named tensors are experimental in 1.13
        for i in range(200):
            dtype = [np.float32, np.float64][i % 2]
            shape = (int(rng.integers(1, 6)), int(rng.integers(1, 12)))
            arr = random_floats(rng, shape, dtype)
            names = [("N", "C"), ("batch", "features"), ("a_rather_long_name", "another")][i % 3]
            x = torch.from_numpy(arr.copy()).refine_names(*names).requires_grad_()
            sufs = ["requires_grad=True", f"names={x.names}"]
            sufs = [[None, sufs[0], None, sufs[1]], sufs, [sufs[0], None, sufs[1]]][i % 3]
            opts = random_opts(rng)
            same(emb_repr(arr, suffixes=sufs, **opts), torch_repr(x, **opts),
                 f"names case {i} {opts}")


def test_empty_with_suffix():
    for shape in [(0,), (0, 3), (2, 0, 5)]:
        for dtype in (np.float32, np.float64):
            arr = np.zeros(shape, dtype=dtype)
            x = torch.from_numpy(arr.copy()).requires_grad_()
            for lw in (80, 20, 30):
                same(emb_repr(arr, suffixes=["requires_grad=True"], linewidth=lw),
                     torch_repr(x, linewidth=lw), f"{shape} {dtype} lw {lw}")


# ---------------------------------------------------------------------------------------
# The seed notebooks' printed outputs (shared/seeds), rebuilt from their printed values
# ---------------------------------------------------------------------------------------

SEED_002 = (
    "tensor([[[-0.1633,  0.2602, -1.3810, -0.9100, -1.3273,  0.0258,  1.2236,\n"
    "           0.0988,  1.5362, -0.0035]]], grad_fn=<EmbeddingBackward0>)")
SEED_004_WEIGHT = (
    "tensor([[ 1.4610, -0.8082, -0.7816, -0.3135],\n"
    "        [ 0.1052, -0.0626, -0.7115, -1.1456],\n"
    "        [-0.3115,  1.5333,  0.6740, -1.8035],\n"
    "        [-0.1831, -2.3549,  1.2970, -0.4006],\n"
    "        [ 1.8532,  0.2546,  0.4889,  0.4106],\n"
    "        [ 1.0876,  1.1219, -0.5330,  0.1026],\n"
    "        [-0.4453, -0.8550, -0.0360,  2.3146],\n"
    "        [ 0.7443, -0.3514,  0.6963, -0.9283],\n"
    "        [-1.3944,  0.0908,  0.6961,  1.0211],\n"
    "        [-0.2815,  2.1397, -2.8740, -0.4085]], requires_grad=True)")
SEED_004_SEQUENCE = (
    "tensor([[0, 6, 7],\n"
    "        [3, 2, 2],\n"
    "        [2, 5, 2],\n"
    "        [0, 8, 3],\n"
    "        [4, 6, 3]])")
SEED_001_VECTOR = (
    "tensor([-0.5269,  1.0298, -0.6908,  1.8272, -0.9981,  0.0789, -2.8797,  1.0594,\n"
    "         1.1529, -1.0838])")
SEED_000_ROW = "tensor([[ 1.5410, -0.2934]])"
SEED_003_WRAPPED = (
    "tensor([[ 1.3010,  1.2753, -0.2010, -0.1606, -0.4015]],\n"
    "       grad_fn=<EmbeddingBackward0>)")
SEED_003_MM = (
    "tensor([[ 0.6957, -1.8061, -1.1589,  0.3255, -0.6315],\n"
    "        [-2.8400, -0.7849, -1.4096, -0.4076,  0.7953],\n"
    "        [ 1.3010,  1.2753, -0.2010, -0.1606, -0.4015]], grad_fn=<MmBackward0>)")


def seed_numbers(text, dtype):
    body = text[text.index("(") + 1:text.rindex("]") + 1]
    nums = body.replace("[", " ").replace("]", " ").replace(",", " ").split()
    return np.array([float(x) for x in nums]).astype(dtype)


@pytest.mark.parametrize("text,shape,dtype,suffix", [
    (SEED_002, (1, 1, 10), np.float32, "grad_fn=<EmbeddingBackward0>"),
    (SEED_004_WEIGHT, (10, 4), np.float32, "requires_grad=True"),
    (SEED_004_SEQUENCE, (5, 3), np.int64, None),
    (SEED_001_VECTOR, (10,), np.float32, None),
    (SEED_000_ROW, (1, 2), np.float32, None),
    (SEED_003_WRAPPED, (1, 5), np.float32, "grad_fn=<EmbeddingBackward0>"),
    (SEED_003_MM, (3, 5), np.float32, "grad_fn=<MmBackward0>"),
])
def test_seed_outputs(text, shape, dtype, suffix):
    arr = seed_numbers(text, dtype).reshape(shape)
    same(emb_repr(arr, suffixes=[suffix] if suffix else []), text, "emb vs seed")
    w = torch.from_numpy(arr.copy())
    if suffix is None:
        x = w
    elif suffix == "requires_grad=True":
        x = w.requires_grad_()
    elif suffix == "grad_fn=<EmbeddingBackward0>":  # one lookup of every row, in order
        w = w.reshape(-1, shape[-1]).requires_grad_()
        idx = torch.arange(w.shape[0]).reshape(shape[:-1])
        x = torch.nn.functional.embedding(idx, w)
    else:  # MmBackward0: identity @ values, exact
        x = torch.mm(torch.eye(shape[0]), w.requires_grad_())
    same(repr(x), text, "torch vs seed")


# print() and the arguments emb refuses (the C function's snprintf-style truncation and
# emb_tensor_print's FILE output are checked by tests/unit/test_print.c)
# ---------------------------------------------------------------------------------------

def test_print_matches_print():
    """print(x) is repr plus a newline: emb.tensor_repr of 40 random arrays, each followed by
    a newline, is what print() of the same tensors writes."""
    rng = np.random.default_rng(9)
    arrays = [random_array(rng, random_shape(rng, 300), NP_DTYPES[i % len(NP_DTYPES)])
              for i in range(40)]
    got = "".join(emb.tensor_repr(a) + "\n" for a in arrays)
    want = "".join(str(torch.from_numpy(a.copy())) + "\n" for a in arrays)
    same(got, want, "tensor_repr + newline vs print()")


def test_bad_arguments_are_refused():
    a = np.ones(3, np.float32)
    with pytest.raises(TypeError, match="sci_mode must be None, True or False"):
        emb.tensor_repr(a, sci_mode=1)
    with pytest.raises(TypeError, match="suffixes must be a sequence"):
        emb.tensor_repr(a, suffixes="requires_grad=True")
    with pytest.raises(TypeError, match="suffix 1 must be a str or None, got int"):
        emb.tensor_repr(a, suffixes=["a", 3])
    with pytest.raises(ValueError, match="at most 4 suffixes, got 5"):
        emb.tensor_repr(a, suffixes=["a"] * 5)
    with pytest.raises(emb.InvalidArgumentError, match="precision"):
        emb.tensor_repr(a, precision=101)
    with pytest.raises(TypeError, match="float16"):
        emb.tensor_repr(np.ones(3, np.float16))
