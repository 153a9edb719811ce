"""Parity of emb's generator (include/emb/random.h, through the package: emb.Generator and
emb.default_generator()) with PyTorch's CPU generator, bit for bit.

Every expected value is produced by torch during the test: torch.manual_seed /
torch.Generator, Tensor.normal_, torch.randn, Tensor.uniform_, torch.randint, and
Generator.get_state/set_state. Raw engine outputs are read through torch as
randint(-2^31, 2^31, dtype=int32) + 2^31 (one 32-bit draw, recovered exactly) and
random_(-2^63, None) on int64 (one 64-bit draw, reinterpreted).
"""
import random
import warnings

import numpy as np
import pytest
import torch

import emb
from parity_util import assert_close

# The dtypes of the arrays the generators fill (numpy's types; torch's equivalents below).
FLOAT32, FLOAT64, INT64, INT32 = np.float32, np.float64, np.int64, np.int32

M64 = 2 ** 64 - 1
NP = {t: t for t in (FLOAT32, FLOAT64, INT64, INT32)}
# A number per dtype, for the seeds of the cases (emb's dtype codes, include/emb/core.h)
CODE = {FLOAT32: 0, INT64: 1, INT32: 2, FLOAT64: 3}
TD = {FLOAT32: torch.float32, FLOAT64: torch.float64, INT64: torch.int64, INT32: torch.int32}
COUNT = {"cases": 0}

torch.set_num_threads(1)


class Pair:
    """A torch generator and an emb generator kept in lockstep. default=True uses both
    libraries' default generators (torch.default_generator and emb's NULL)."""

    def __init__(self, seed, default=False):
        self.default = default
        if default:
            self.tg = None
            self.eg = None
            torch.manual_seed(seed)
            emb.manual_seed(seed & M64)
            self.eg = emb.default_generator()
        else:
            self.tg = torch.Generator()
            self.tg.manual_seed(seed)
            self.eg = emb.Generator(seed & M64)

    def free(self):
        self.eg = None

    def seed(self, s):
        if self.default:
            torch.manual_seed(s)
        else:
            self.tg.manual_seed(s)
        self.eg.seed(s & M64)

    def kw(self):
        return {} if self.default else {"generator": self.tg}

    def tgen(self):
        return torch.default_generator if self.default else self.tg

    # ---- operations: each returns (emb result, torch result) ----
    def normal(self, n, dtype=FLOAT32, mean=None, std=None, shape=None):
        shape = shape or (n,)
        t = torch.empty(shape, dtype=TD[dtype])
        a = np.full(shape, np.nan, NP[dtype])
        if mean is None:
            if self.default and shape == (n,) and n % 3 == 0:
                want = torch.randn(shape, dtype=TD[dtype])
            elif not self.default and n % 3 == 0:
                want = torch.randn(shape, dtype=TD[dtype], generator=self.tg)
            else:
                want = t.normal_(**self.kw())
            self.eg.randn_(a)
        else:
            want = t.normal_(mean, std, **self.kw())
            self.eg.normal_(a, mean, std)
        return a, want.numpy()

    def uniform(self, n, lo, hi, dtype=FLOAT32):
        want = torch.empty(n, dtype=TD[dtype]).uniform_(lo, hi, **self.kw())
        a = np.full(n, np.nan, NP[dtype])
        self.eg.uniform_(a, lo, hi)
        return a, want.numpy()

    def randint(self, n, lo, hi, dtype=INT64):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # torch warns about floats beyond 2^24 / 2^53
            want = torch.randint(lo, hi, (n,), dtype=TD[dtype], **self.kw())
        a = np.zeros(n, NP[dtype])
        self.eg.randint_(a, lo, hi)
        return a, want.numpy()

    def raw32(self, n):
        want = torch.randint(-2 ** 31, 2 ** 31, (n,), dtype=torch.int32, **self.kw())
        want = want.numpy().astype(np.int64) + 2 ** 31
        got = np.array([self.eg.random() for _ in range(n)], np.int64)
        return got, want

    def raw64(self, n):
        want = torch.empty(n, dtype=torch.int64).random_(-2 ** 63, None, **self.kw())
        got = np.array([self.eg.random64() for _ in range(n)], np.uint64)
        return got, want.numpy().view(np.uint64)


def call(fn, *args):
    """(exception class, message) of a package call: (None, "") or the emb.Error it raised."""
    try:
        fn(*args)
    except emb.Error as e:
        return type(e), str(e)
    return None, ""


def same(got, want, what):
    COUNT["cases"] += 1
    assert_close(got, want, exact=True, what=what)


def lockstep(p, what):
    """The next raw draw of both generators agrees (and the cache: one scalar normal)."""
    g, w = p.normal(1)
    same(g, w, what + " / next scalar normal")
    g, w = p.raw32(1)
    same(g, w, what + " / next draw")


SEEDS = [0, 1, 123, 2 ** 32, 2 ** 32 + 123, 2 ** 64 - 1, 2 ** 63, 0xFFFFFFFF, -1, -5,
         -2 ** 63, 67280421310721, 5489]


@pytest.mark.parametrize("default", [True, False])
def test_seeds_initial_seed_and_raw_streams(default):
    rng = random.Random(11 + default)
    seeds = SEEDS + [rng.getrandbits(64) for _ in range(60)] + \
        [-rng.getrandbits(63) for _ in range(20)]
    for s in seeds:
        p = Pair(s, default)
        want_seed = torch.initial_seed() if default else p.tg.initial_seed()
        assert want_seed == s & M64
        assert p.eg.initial_seed() == want_seed, f"seed {s}"
        COUNT["cases"] += 1
        n = rng.choice([1, 5, 623, 624, 625, 700, 1300])
        g, w = p.raw32(n)
        same(g, w, f"seed {s}: random() x{n}")
        g, w = p.raw64(rng.randint(1, 400))
        same(g, w, f"seed {s}: random64()")
        lockstep(p, f"seed {s}")
        p.free()
    # 2^32 and 0 give the same stream; -1 and 2^32-1 too.
    for a, b in [(0, 2 ** 32), (-1, 2 ** 32 - 1), (123, 2 ** 40 + 123)]:
        pa, pb = Pair(a), Pair(b)
        ga, _ = pa.raw32(700)
        gb, _ = pb.raw32(700)
        same(ga, gb, f"stream of seed {a} vs {b}")
        pa.free()
        pb.free()


@pytest.mark.parametrize("dtype", [FLOAT32, FLOAT64])
@pytest.mark.parametrize("default", [True, False])
def test_normal_sizes(dtype, default):
    """Every n in 1..64 (straddling the 16-element switch) and random larger sizes, with and
    without a cached normal left by an earlier scalar draw, default and random mean/std."""
    rng = random.Random(100 + 2 * CODE[dtype] + default)
    sizes = list(range(1, 65)) + [rng.randint(65, 2000) for _ in range(30)] + \
        [rng.randint(2000, 100000) for _ in range(6)] + [100000, 99999, 1024, 1023]
    for n in sizes:
        p = Pair(rng.getrandbits(64), default)
        if rng.random() < 0.5:  # leave a cached sin value behind
            g, w = p.normal(rng.choice([1, 3, 5]), dtype)
            same(g, w, f"prior scalar draw (n={n})")
        if rng.random() < 0.5:
            mean, std = None, None
        else:
            mean = rng.uniform(-10, 10) * 10 ** rng.randint(-3, 3)
            std = rng.choice([0.0, rng.uniform(0, 5) * 10 ** rng.randint(-4, 4)])
        shape = (n,)
        if n % 4 == 0 and n > 4:
            shape = (4, n // 4)
        g, w = p.normal(n, dtype, mean, std, shape)
        same(g, w, f"normal_ n={n} dtype={dtype} mean={mean} std={std}")
        lockstep(p, f"after normal_ n={n}")
        p.free()


def test_normal_cache_sequences():
    """normal_ of 1, then 100, then 1 returns the cached sin value; random sequences of
    sizes around 16 on float32 and float64 keep the cache in step."""
    p = Pair(2024)
    a1, w1 = p.normal(1)
    a2, w2 = p.normal(100)
    a3, w3 = p.normal(1)
    same(np.concatenate([a1, a2, a3]), np.concatenate([w1, w2, w3]), "1, 100, 1")
    q = Pair(2024)
    pair, _ = q.normal(2)
    same(np.array([a1[0], a3[0]]), pair, "cos then the cached sin across the vector path")
    p.free()
    q.free()
    rng = random.Random(7)
    for k in range(60):
        p = Pair(rng.getrandbits(32), default=bool(k % 2))
        for _ in range(30):
            n = rng.choice([1, 1, 2, 3, 7, 15, 16, 17, 31, 32, 33, 100])
            dt = rng.choice([FLOAT32, FLOAT64])
            g, w = p.normal(n, dt, rng.uniform(-2, 2), rng.uniform(0, 3))
            same(g, w, f"sequence {k}: normal_ n={n} dtype={dt}")
        lockstep(p, f"sequence {k}")
        p.free()


def _range(rng):
    kind = rng.randint(0, 7)
    if kind == 0:
        return rng.uniform(-1, 1), rng.uniform(1, 2)
    if kind == 1:  # negative
        a = -rng.uniform(0, 1000)
        return a, a + rng.uniform(0, 500)
    if kind == 2:  # tiny width
        a = rng.uniform(-1, 1)
        return a, a + rng.uniform(0, 1) * 10 ** rng.randint(-30, -5)
    if kind == 3:  # huge
        a = -rng.uniform(0, 1) * 10 ** rng.randint(20, 37)
        return a, rng.uniform(0, 1) * 10 ** rng.randint(20, 37)
    if kind == 4:  # equal ends
        a = rng.uniform(-5, 5)
        return a, a
    if kind == 5:  # integers, kaiming-like symmetric bounds
        b = 1.0 / rng.randint(1, 1000) ** 0.5
        return -b, b
    if kind == 6:  # tiny magnitudes
        a = rng.uniform(-1, 1) * 1e-30
        return a, a + 1e-30
    return float(rng.randint(-100, 0)), float(rng.randint(1, 100))


@pytest.mark.parametrize("default", [True, False])
def test_uniform(default):
    rng = random.Random(31 + default)
    p = Pair(rng.getrandbits(64), default)
    for k in range(1500):
        lo, hi = _range(rng)
        n = rng.choice([1, 2, 3, 16, 17, rng.randint(1, 300)])
        dt = FLOAT32 if k % 3 else FLOAT64
        g, w = p.uniform(n, lo, hi, dt)
        same(g, w, f"uniform_({lo!r}, {hi!r}) n={n} dtype={dt}")
        if k % 100 == 0:
            p.seed(rng.getrandbits(64))
    lockstep(p, "after uniform_")
    p.free()


def _int_range(rng):
    kind = rng.randint(0, 9)
    if kind == 0:  # small
        lo = rng.randint(-50, 50)
        return lo, lo + rng.randint(1, 100)
    if kind == 1:  # near 2^31
        lo = rng.randint(-2 ** 31, -2 ** 31 + 1000)
        return lo, rng.randint(2 ** 31 - 1000, 2 ** 31)
    if kind == 2:  # range near 2^32 (both sides of the 32/64-bit switch)
        lo = rng.randint(-2 ** 40, 2 ** 40)
        return lo, lo + 2 ** 32 + rng.randint(-3, 3)
    if kind == 3:  # >= 2^32
        lo = rng.randint(-2 ** 62, 2 ** 62)
        return lo, lo + rng.randint(2 ** 32, 2 ** 62)
    if kind == 4:  # anywhere in int64
        lo = rng.randint(-2 ** 63, 2 ** 63 - 2)
        return lo, rng.randint(lo + 1, 2 ** 63 - 1)
    if kind == 5:  # the full int32 range
        return -2 ** 31, 2 ** 31
    if kind == 6:  # negative low, power-of-two ranges
        lo = -rng.randint(1, 2 ** 20)
        return lo, lo + 2 ** rng.randint(0, 40)
    if kind == 7:  # around float32's 2^24 and float64's 2^53 limits
        e = rng.choice([24, 25, 30, 53, 54, 60])
        lo = rng.choice([-1, 1]) * (2 ** e + rng.randint(-5, 5))
        return lo, lo + rng.randint(1, 2 ** rng.randint(1, 40))
    if kind == 8:  # extreme ends
        return -2 ** 63, rng.choice([-2 ** 63 + 1, 0, 2 ** 63 - 1])
    lo = rng.randint(0, 10)
    return lo, lo + 1


@pytest.mark.parametrize("default", [True, False])
def test_randint(default):
    """torch.randint for int64, int32, float32 and float64 outputs, including the ranges
    torch rejects (messages compared) and float bounds torch moves (update_from/to)."""
    rng = random.Random(51 + default)
    p = Pair(rng.getrandbits(64), default)
    errors = 0
    for k in range(2000):
        lo, hi = _int_range(rng)
        dt = [INT64, INT32, FLOAT32, FLOAT64][k % 4]
        n = rng.choice([1, 2, 5, rng.randint(1, 200)])
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                torch.randint(lo, hi, (1,), dtype=TD[dt], generator=torch.Generator())
        except RuntimeError as e:  # the same error, nothing drawn
            errors += 1
            msg = str(e).split("\n")[0]
            a = np.full(n, 7, NP[dt])
            st, got = call(p.eg.randint_, a, lo, hi)
            assert (st, got) == (emb.InvalidArgumentError, msg), f"randint({lo}, {hi}) dtype {dt}"
            assert (a == 7).all()
            COUNT["cases"] += 1
            continue
        g, w = p.randint(n, lo, hi, dt)
        same(g, w, f"randint({lo}, {hi}) n={n} dtype={dt}")
    assert errors > 50
    lockstep(p, "after randint")
    p.free()


def _mixed_op(p, rng):
    op = rng.randint(0, 5)
    if op == 0:
        n = rng.choice([1, 2, 3, 15, 16, 17, rng.randint(1, 500)])
        return p.normal(n, rng.choice([FLOAT32, FLOAT64]),
                        *rng.choice([(None, None), (rng.uniform(-3, 3), rng.uniform(0, 3))]))
    if op == 1:
        lo, hi = _range(rng)
        return p.uniform(rng.randint(1, 100), lo, hi, rng.choice([FLOAT32, FLOAT64]))
    if op == 2:
        lo = rng.randint(-1000, 1000)
        return p.randint(rng.randint(1, 100), lo, lo + rng.choice([1, 7, 2 ** 31, 2 ** 33]),
                         rng.choice([INT64, FLOAT64]))
    if op == 3:
        return p.raw32(rng.randint(1, 20))
    if op == 4:
        return p.raw64(rng.randint(1, 10))
    return p.normal(rng.randint(16, 5000))


def test_interleaved_default_and_explicit():
    """Long mixed sequences on the default generators and two explicit generators at once:
    each pair stays in lockstep and none disturbs another."""
    rng = random.Random(77)
    for k in range(6):
        pairs = [Pair(rng.getrandbits(64), default=True), Pair(rng.getrandbits(64)),
                 Pair(rng.getrandbits(32))]
        for step in range(400):
            i = rng.randrange(3)
            g, w = _mixed_op(pairs[i], rng)
            same(g, w, f"run {k} step {step} generator {i}")
            if rng.random() < 0.01:
                pairs[i].seed(rng.getrandbits(64) - 2 ** 63)
        for i, p in enumerate(pairs):
            lockstep(p, f"run {k} generator {i}")
            p.free()


def test_state_round_trip():
    """emb_generator_get_state/set_state replays the stream exactly as torch's
    Generator.get_state/set_state does, including a cached normal."""
    rng = random.Random(88)
    for k in range(40):
        p = Pair(rng.getrandbits(64), default=bool(k % 2))
        for _ in range(rng.randint(0, 10)):
            _mixed_op(p, rng)
        if k % 4 < 2:
            p.normal(1)  # save while a normal is cached
        tstate = p.tgen().get_state()
        buf = p.eg.get_state()
        ops_rng_state = rng.getstate()
        first = [_mixed_op(p, rng) for _ in range(8)]
        p.tgen().set_state(tstate)
        p.eg.set_state(buf)
        rng.setstate(ops_rng_state)
        second = [_mixed_op(p, rng) for _ in range(8)]
        for j, ((g1, w1), (g2, w2)) in enumerate(zip(first, second)):
            same(g1, w1, f"state {k} op {j} first run")
            same(g2, w2, f"state {k} op {j} after set_state")
            same(g2, g1, f"state {k} op {j} replayed")
        lockstep(p, f"state {k}")
        p.free()


def test_errors_match_torch_and_draw_nothing():
    p = Pair(5)
    f = np.full(20, 3.0, np.float32)
    d = np.full(20, 3.0, np.float64)
    cases = [
        (lambda: torch.empty(20).normal_(0, -1),
         lambda: call(p.eg.normal_, f, 0, -1)),
        (lambda: torch.empty(3).normal_(2, -0.5),
         lambda: call(p.eg.normal_, f[:3], 2, -0.5)),
        (lambda: torch.empty(20, dtype=torch.float64).normal_(0, float("nan")),
         lambda: call(p.eg.normal_, d, 0, float("nan"))),
        (lambda: torch.empty(20).uniform_(2, 1),
         lambda: call(p.eg.uniform_, f, 2, 1)),
        (lambda: torch.empty(20, dtype=torch.float64).uniform_(2.5, 1.25),
         lambda: call(p.eg.uniform_, d, 2.5, 1.25)),
        (lambda: torch.empty(20).uniform_(0, float("inf")),
         lambda: call(p.eg.uniform_, f, 0, float("inf"))),
        (lambda: torch.empty(20).uniform_(1e39, 1e40),
         lambda: call(p.eg.uniform_, f, 1e39, 1e40)),
        (lambda: torch.empty(20).uniform_(float("nan"), 1),
         lambda: call(p.eg.uniform_, f, float("nan"), 1)),
        (lambda: torch.empty(20, dtype=torch.float64).uniform_(0, float("inf")),
         lambda: call(p.eg.uniform_, d, 0, float("inf"))),
        (lambda: torch.empty(20).uniform_(-3.4e38, 3.4e38),
         lambda: call(p.eg.uniform_, f, -3.4e38, 3.4e38)),
        (lambda: torch.empty(20, dtype=torch.float64).uniform_(-1.7e308, 1.7e308),
         lambda: call(p.eg.uniform_, d, -1.7e308, 1.7e308)),
        (lambda: torch.randint(5, 5, (20,)),
         lambda: call(p.eg.randint_, d.view(np.int64), 5, 5)),
        (lambda: torch.randint(5, 3, (20,), dtype=torch.float32),
         lambda: call(p.eg.randint_, f, 5, 3)),
        (lambda: torch.randint(2 ** 30 + 1, 2 ** 30 + 2, (20,), dtype=torch.float32),
         lambda: call(p.eg.randint_, f, 2 ** 30 + 1, 2 ** 30 + 2)),
    ]
    for k, (tf, ef) in enumerate(cases):
        with pytest.raises(RuntimeError) as ei:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                tf()
        msg = str(ei.value).split("\n")[0]
        st, got = ef()
        assert st is emb.InvalidArgumentError, (k, st)
        assert got == msg, k
        COUNT["cases"] += 1
    assert (f == 3.0).all() and (d == 3.0).all()
    lockstep(p, "after errors")
    # Deliberate differences (documented in random.h): emb rejects non-finite mean/std, which
    # torch accepts; a dtype other than float32/float64 is a dtype error.
    for mean, std in [(float("nan"), 1.0), (float("inf"), 1.0), (0.0, float("inf"))]:
        st, msg = call(p.eg.normal_, f, mean, std)
        assert st is emb.InvalidArgumentError and "finite mean and std" in msg
    i = np.zeros(4, np.int64)
    st, msg = call(p.eg.normal_, i, 0.0, 1.0)
    assert st is emb.DtypeError and "got int64" in msg
    assert (f == 3.0).all() and (i == 0).all()
    g, _ = p.raw32(1)
    q = Pair(5)
    q.normal(1)
    q.raw32(1)
    want, _ = q.raw32(1)
    same(g, want, "nothing drawn by the rejected calls")
    p.free()
    q.free()


def test_case_count():
    """Runs last (pytest keeps file order): the suite compared at least 10,000 cases."""
    print(f"{COUNT['cases']} cases compared")
    assert COUNT["cases"] >= 10000, COUNT["cases"]
