"""Parity of the losses with PyTorch 1.13: F.cross_entropy (ignore_index, label_smoothing),
F.mse_loss and F.binary_cross_entropy_with_logits (pos_weight), forward and backward, for
every reduction, against torch autograd at test time.

Forward values and gradients are compared with assert_close (rtol 1.3e-6, atol 1e-5) on
inputs of moderate magnitude; the parts emb computes with PyTorch's exact float formula are
compared bit for bit (mse backward, mse forward with reduction none). Errors carry torch's
own messages, caught live."""
import ctypes as C
import random

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from embpy import (ERR_DTYPE, ERR_INDEX, ERR_INVALID, ERR_SHAPE, LossOptions, T, assert_close,
                   call, check, lib, ptr, tensor_out)

torch.set_num_threads(1)

REDUCTIONS = {"mean": 0, "sum": 1, "none": 2}


def opts(reduction="mean", ignore_index=-100, label_smoothing=0.0):
    o = lib.emb_loss_options_default()
    o.reduction = REDUCTIONS[reduction]
    o.ignore_index = ignore_index
    o.label_smoothing = label_smoothing
    return o


def loss_buffer(reduction, none_shape):
    return tensor_out(none_shape if reduction == "none" else ())


def grad_of_loss(rng, reduction, none_shape):
    shape = none_shape if reduction == "none" else ()
    return np.array(rng.uniform(0.5, 1.5, size=shape), np.float32)


def torch_error(fn):
    try:
        fn()
    except Exception as e:
        return str(e)
    raise AssertionError("torch did not fail")


def test_defaults():
    o = lib.emb_loss_options_default()
    assert (o.reduction, o.ignore_index, o.label_smoothing) == (0, -100, 0.0)


# ---- cross-entropy ----------------------------------------------------------------------

def ce_case(rng, x, t, reduction, ignore_index, ls, what):
    o = opts(reduction, ignore_index, ls)
    none_shape = t.shape
    xt = torch.from_numpy(x.copy()).requires_grad_()
    want = F.cross_entropy(xt, torch.from_numpy(t), ignore_index=ignore_index,
                           reduction=reduction, label_smoothing=ls)
    g = grad_of_loss(rng, reduction, none_shape)
    want.backward(torch.from_numpy(g))
    loss = loss_buffer(reduction, none_shape)
    check(lib.emb_cross_entropy_forward(T(x), T(t), ptr(o), T(loss)))
    assert_close(loss, want.detach().numpy(), what=f"{what} loss")
    gx = tensor_out(x.shape)
    check(lib.emb_cross_entropy_backward(T(x), T(t), ptr(o), T(g), T(gx)))
    assert_close(gx, xt.grad.numpy(), what=f"{what} grad")


def test_cross_entropy_random():
    rnd = random.Random(2023)
    rng = np.random.default_rng(2023)
    for case in range(400):
        n = 0 if rnd.random() < 0.03 else rnd.randint(1, 40)
        c = rnd.randint(1, 30)
        reduction = rnd.choice(list(REDUCTIONS))
        ls = rnd.choice([0.0, 0.0, 0.1, 0.5, 1.0])
        ignore_index = rnd.choice([-100, -100, -1, rnd.randrange(c)])
        x = (rng.standard_normal((n, c)) * 2).astype(np.float32)
        t = rng.integers(0, c, size=n).astype(np.int64)
        t[rng.random(n) < 0.2] = ignore_index
        ce_case(rng, x, t, reduction, ignore_index, ls,
                f"case {case}: [{n}, {c}] {reduction} ignore {ignore_index} ls {ls}")


def test_cross_entropy_unbatched():
    rng = np.random.default_rng(5)
    for case in range(60):
        c = int(rng.integers(1, 20))
        x = (rng.standard_normal(c) * 2).astype(np.float32)
        t = np.array(rng.integers(0, c) if case % 7 else -100, np.int64)
        for reduction in REDUCTIONS:
            for ls in (0.0, 0.3):
                ce_case(rng, x, t, reduction, -100, ls, f"[{c}] target {int(t)} {reduction} {ls}")


def test_cross_entropy_all_ignored_and_empty():
    rng = np.random.default_rng(6)
    x = rng.standard_normal((4, 5)).astype(np.float32)
    t = np.full(4, -100, np.int64)
    for reduction in REDUCTIONS:
        for ls in (0.0, 0.2):
            ce_case(rng, x, t, reduction, -100, ls, f"all ignored {reduction} {ls}")
    # mean over nothing is nan, as in torch
    loss = tensor_out(())
    check(lib.emb_cross_entropy_forward(T(x), T(t), None, T(loss)))
    assert np.isnan(loss)
    for reduction in REDUCTIONS:
        ce_case(rng, np.zeros((0, 3), np.float32), np.zeros(0, np.int64), reduction, -100, 0.0,
                f"empty batch {reduction}")
    # zero classes with every target ignored (label smoothing divides by C = 0)
    for reduction in REDUCTIONS:
        for ls in (0.0, 0.1):
            ce_case(rng, np.zeros((3, 0), np.float32), np.full(3, -100, np.int64), reduction,
                    -100, ls, f"C = 0 {reduction} {ls}")


def test_cross_entropy_large_logits():
    rng = np.random.default_rng(8)
    x = np.array([[80.0, -80.0, 0.0], [-50.0, 60.0, 59.5]], np.float32)
    t = np.array([1, 2], np.int64)
    for reduction in REDUCTIONS:
        ce_case(rng, x, t, reduction, -100, 0.0, f"large logits {reduction}")


@pytest.mark.parametrize("x,t,kw,status", [
    (np.zeros((3, 4), np.float32), np.array([1, 5, 0]), {}, ERR_INDEX),
    (np.zeros((3, 4), np.float32), np.array([1, -1, 0]), {}, ERR_INDEX),
    (np.zeros((3, 4), np.float32), np.array([1, -100, 0]), {"ignore_index": 2}, ERR_INDEX),
    (np.zeros((3, 4), np.float32), np.array([1, 2]), {}, ERR_SHAPE),
    (np.zeros(4, np.float32), np.array([1]), {}, ERR_SHAPE),
    (np.zeros((3, 4), np.float32), np.array([1, 2, 0], np.int32), {}, ERR_DTYPE),
    (np.zeros((3, 4), np.float32), np.array([1, 2, 0]), {"label_smoothing": 1.5}, ERR_INVALID),
    (np.zeros((3, 0), np.float32), np.array([0, 0, 0]), {}, ERR_INDEX),
])
def test_cross_entropy_errors_match_torch(x, t, kw, status):
    t = np.ascontiguousarray(t)
    want = torch_error(lambda: F.cross_entropy(torch.from_numpy(x), torch.from_numpy(t), **kw))
    o = opts(ignore_index=kw.get("ignore_index", -100),
             label_smoothing=kw.get("label_smoothing", 0.0))
    loss = tensor_out((), fill=3.0)
    st, msg = call(lib.emb_cross_entropy_forward, T(x), T(t), ptr(o), T(loss))
    assert st == status and want in msg, (want, st, msg)
    assert loss == 3.0
    g = np.ones((), np.float32)
    gx = tensor_out(x.shape, fill=3.0)
    st, msg = call(lib.emb_cross_entropy_backward, T(x), T(t), ptr(o), T(g), T(gx))
    assert st == status and want in msg, (want, st, msg)
    assert (gx == 3.0).all()


def test_cross_entropy_other_errors():
    x = np.zeros((2, 3), np.float32)
    t = np.array([0, 1], np.int64)
    loss = tensor_out((), fill=3.0)
    cases = [
        (x, np.array([0.0, 1.0], np.float32), opts(), loss, ERR_DTYPE,
         "class-probability targets are not supported"),
        (x.astype(np.float64), t, opts(), loss, ERR_DTYPE, "logits must be float32"),
        (np.zeros((2, 3, 2), np.float32), t, opts(), loss, ERR_SHAPE,
         "logits must be [N, C] or [C], got shape [2, 3, 2]"),
        (x, t, opts(label_smoothing=-0.5), loss, ERR_INVALID,
         "label_smoothing must be between 0.0 and 1.0. Got: -0.5"),
        (x, t, opts("none"), loss, ERR_SHAPE, "loss has shape [], expected [2]"),
    ]
    for xx, tt, o, out, status, frag in cases:
        st, msg = call(lib.emb_cross_entropy_forward, T(xx), T(tt), ptr(o), T(out))
        assert st == status and frag in msg, (frag, st, msg)
        assert loss == 3.0


# ---- mse --------------------------------------------------------------------------------

def random_shape(rnd, min_rank=0):
    return tuple(rnd.randint(0 if rnd.random() < 0.05 else 1, 6)
                 for _ in range(rnd.randint(min_rank, 4)))


def test_mse_random():
    rnd = random.Random(77)
    rng = np.random.default_rng(77)
    for case in range(300):
        shape = random_shape(rnd)
        reduction = rnd.choice(list(REDUCTIONS))
        x = np.array(rng.standard_normal(shape) * 2, np.float32)
        y = np.array(rng.standard_normal(shape) * 2, np.float32)
        xt = torch.from_numpy(x.copy()).requires_grad_()
        want = F.mse_loss(xt, torch.from_numpy(y), reduction=reduction)
        g = grad_of_loss(rng, reduction, shape)
        want.backward(torch.from_numpy(g))
        o = opts(reduction)
        what = f"case {case}: {shape} {reduction}"
        loss = loss_buffer(reduction, shape)
        check(lib.emb_mse_loss_forward(T(x), T(y), ptr(o), T(loss)))
        assert_close(loss, want.detach().numpy(), exact=(reduction == "none"),
                     what=f"{what} loss")
        gx = tensor_out(shape)
        check(lib.emb_mse_loss_backward(T(x), T(y), ptr(o), T(g), T(gx)))
        assert_close(gx, xt.grad.numpy(), exact=True, what=f"{what} grad")


def test_mse_errors():
    x = np.zeros((3, 4), np.float32)
    loss = tensor_out((), fill=3.0)
    st, msg = call(lib.emb_mse_loss_forward, T(x), T(np.zeros(4, np.float32)), None, T(loss))
    assert st == ERR_SHAPE and "Target size (torch.Size([4])) must be the same as input size " \
        "(torch.Size([3, 4]))" in msg, msg
    st, msg = call(lib.emb_mse_loss_forward, T(x), T(np.zeros((3, 4))), None, T(loss))
    assert st == ERR_DTYPE and "target must be float32, got float64" in msg, msg
    assert loss == 3.0


# ---- binary cross-entropy with logits ---------------------------------------------------

def test_bce_with_logits_random():
    rnd = random.Random(31)
    rng = np.random.default_rng(31)
    for case in range(300):
        use_pw = rnd.random() < 0.5
        shape = random_shape(rnd, min_rank=1 if use_pw else 0)
        reduction = rnd.choice(list(REDUCTIONS))
        x = np.array(rng.standard_normal(shape) * 3, np.float32)
        if rnd.random() < 0.5:
            y = np.array(rng.integers(0, 2, size=shape), np.float32)
        else:
            y = np.array(rng.random(shape), np.float32)
        pw = rng.uniform(0.1, 4.0, size=shape[-1:]).astype(np.float32) if use_pw else None
        xt = torch.from_numpy(x.copy()).requires_grad_()
        want = F.binary_cross_entropy_with_logits(
            xt, torch.from_numpy(y), pos_weight=torch.from_numpy(pw) if use_pw else None,
            reduction=reduction)
        g = grad_of_loss(rng, reduction, shape)
        want.backward(torch.from_numpy(g))
        o = opts(reduction)
        what = f"case {case}: {shape} {reduction} pos_weight {use_pw}"
        loss = loss_buffer(reduction, shape)
        check(lib.emb_bce_with_logits_forward(T(x), T(y), T(pw) if use_pw else None, ptr(o),
                                              T(loss)))
        assert_close(loss, want.detach().numpy(), what=f"{what} loss")
        gx = tensor_out(shape)
        check(lib.emb_bce_with_logits_backward(T(x), T(y), T(pw) if use_pw else None, ptr(o),
                                               T(g), T(gx)))
        assert_close(gx, xt.grad.numpy(), what=f"{what} grad")


def test_bce_with_logits_extreme_logits():
    x = np.array([[90.0, -90.0, 30.0, -30.0, 0.0]], np.float32)
    y = np.array([[0.0, 1.0, 0.25, 0.75, 0.5]], np.float32)
    pw = np.array([2.0, 3.0, 0.5, 1.0, 1.5], np.float32)
    for reduction in REDUCTIONS:
        for use_pw in (False, True):
            xt = torch.from_numpy(x.copy()).requires_grad_()
            want = F.binary_cross_entropy_with_logits(
                xt, torch.from_numpy(y), pos_weight=torch.from_numpy(pw) if use_pw else None,
                reduction=reduction)
            want.backward(torch.ones_like(want))
            o = opts(reduction)
            loss = loss_buffer(reduction, x.shape)
            check(lib.emb_bce_with_logits_forward(T(x), T(y), T(pw) if use_pw else None,
                                                  ptr(o), T(loss)))
            assert np.isfinite(loss).all()
            assert_close(loss, want.detach().numpy(), what=f"{reduction} {use_pw} loss")
            gx = tensor_out(x.shape)
            g = np.ones(loss.shape, np.float32)
            check(lib.emb_bce_with_logits_backward(T(x), T(y), T(pw) if use_pw else None,
                                                   ptr(o), T(g), T(gx)))
            assert_close(gx, xt.grad.numpy(), what=f"{reduction} {use_pw} grad")


def test_bce_with_logits_errors_match_torch():
    x = np.zeros((3, 4), np.float32)
    y = np.zeros((3, 3), np.float32)
    want = torch_error(lambda: F.binary_cross_entropy_with_logits(torch.from_numpy(x),
                                                                  torch.from_numpy(y)))
    loss = tensor_out((), fill=3.0)
    st, msg = call(lib.emb_bce_with_logits_forward, T(x), T(y), None, None, T(loss))
    assert st == ERR_SHAPE and want in msg, (want, msg)
    pw = np.ones(3, np.float32)
    st, msg = call(lib.emb_bce_with_logits_forward, T(x), T(np.zeros((3, 4), np.float32)),
                   T(pw), None, T(loss))
    assert st == ERR_SHAPE and "pos_weight has shape [3], expected [4]" in msg, msg
    assert loss == 3.0
