"""emb.torch: drop-in replacements for torch.nn.Embedding and torch.nn.EmbeddingBag whose
forward and backward run emb's kernels.

    from emb.torch import Embedding, EmbeddingBag
    model.emb = Embedding(10000, 64, sparse=True)      # instead of nn.Embedding(...)

They ARE torch's modules (subclasses: same constructor arguments, parameters, initialisation,
state_dict, from_pretrained and repr); only forward differs: it calls a
torch.autograd.Function whose forward and backward are emb's lookup, bag pooling and
gradients, computed on the parameter's own memory (no copies) with the GIL released. The
gradients are bit-identical to torch's, so training with torch's optimizers gives the same
parameters bit for bit (docs/python.md). Inputs emb does not serve (a weight that is not a
float32 CPU tensor) go to torch's own forward.

Dense gradients of 256 KiB and more are written into memory kept from gradients freed
earlier (up to four blocks, 1 GiB in all), which is already mapped: a fresh allocation that
size is faulted in and zeroed by the kernel page by page, which costs as much as the
backward itself. empty_cache() gives that memory back.

apply_optimizer_in_backward(torch.optim.Adagrad, params, {"lr": 0.1}) is TorchRec's call of
that name: the parameters are updated by emb's implementation of that torch optimizer as the
backward reaches them, instead of by optimizer.step() afterwards; the weights of these
modules with the backward and the step fused (no gradient tensor at all), with the same bits.
"""
import weakref

import numpy as np
import torch
from torch import nn

from . import _emb

__all__ = ["Embedding", "EmbeddingBag", "embedding", "embedding_bag", "empty_cache",
           "apply_optimizer_in_backward", "remove_optimizer_in_backward"]


def empty_cache():
    """Frees the memory kept for reuse from dense gradients freed earlier (as
    torch.cuda.empty_cache() does for torch's GPU tensors); gradients still in use keep
    theirs."""
    _emb.empty_cache()


def _view(t):
    """A numpy view of a CPU tensor's memory (a contiguous copy when it is not contiguous).
    The common case (a contiguous tensor outside autograd) costs one call."""
    if t.requires_grad or not t.is_contiguous():
        t = t.detach().contiguous()
    return t.numpy()


def _sparse(rows, values, shape, input=None):
    """torch's sparse gradient of an embedding from emb's (rows, values). When the rows are
    the int64 `input` tensor's entries in order (all of them: no padding), the gradient's
    indices are that tensor, as in torch's own gradient."""
    if input is not None and input.dtype is torch.int64 and rows.shape[0] == input.numel():
        idx = input.reshape(1, -1)
    else:
        idx = torch.from_numpy(rows).unsqueeze(0)
    return torch._sparse_coo_tensor_unsafe(idx, torch.from_numpy(values), shape)


_NONE6 = (None,) * 6


class _EmbeddingFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, weight, indices, padding_idx, max_norm, norm_type, scale_grad_by_freq,
                sparse):
        idx = _view(indices)
        w = weight.detach().numpy()
        out = _emb.embedding(w, idx, max_norm, norm_type)
        # saved as torch saves it, so that an in-place change of the indices before the
        # backward is an error there (the backward reads them)
        ctx.save_for_backward(indices)
        ctx.shape = w.shape
        ctx.rows = None
        ctx.fused = weight.__dict__.get("_emb_in_backward")
        if sparse and padding_idx is None and not scale_grad_by_freq and idx.dtype == np.int64:
            # emb_embedding_backward_sparse_view's case (and torch's): the gradient's entries
            # are the forward's indices (validated here) and grad_output, both borrowed as
            # torch tensors: the input itself when idx is its memory, as in torch's gradient
            ctx.rows = indices if indices.dtype is torch.int64 and indices.is_contiguous() \
                else torch.from_numpy(idx)
        if ctx.rows is None or ctx.fused is not None:
            ctx.weight = w
            ctx.indices = idx
            ctx.opts = (padding_idx, scale_grad_by_freq, sparse)
        return torch.from_numpy(out)

    @staticmethod
    def backward(ctx, grad_output):
        ctx.saved_tensors  # torch's check that nothing saved was changed in place
        if ctx.fused is not None and ctx.fused.uses <= 1:  # the step instead of a gradient
            ctx.fused.embedding_step(ctx.weight, ctx.indices, _view(grad_output), *ctx.opts)
            return _NONE6 + (None,)
        rows = ctx.rows
        if rows is not None:
            # views with the sizes given (cheaper than reshape's -1); a grad_output that is
            # not contiguous is copied, as torch's reshape does
            shape = ctx.shape
            n = rows.numel()
            go = grad_output.view(n, shape[1]) if grad_output.is_contiguous() else \
                grad_output.reshape(n, shape[1])
            return (torch._sparse_coo_tensor_unsafe(rows.view(1, n), go, shape),) + _NONE6
        padding_idx, scale, sparse = ctx.opts
        g = _emb.embedding_backward(ctx.weight, ctx.indices, _view(grad_output), padding_idx,
                                    scale, sparse)
        grad = _sparse(g[0], g[1], ctx.weight.shape) if sparse else torch.from_numpy(g)
        return (grad,) + _NONE6


def _served(weight, *tensors):
    """True when emb can run the call: a float32 strided CPU weight and CPU index tensors
    (is_cpu and layout are attribute reads; weight.device builds an object per call)."""
    if weight.dtype is not torch.float32 or not weight.is_cpu or \
            weight.layout is not torch.strided:
        return False
    return all(t is None or t.is_cpu for t in tensors)


def _count_use(weight):
    """A use of a weight with an optimizer in backward by a graph being built: with more
    than one before its backward, the uses return gradients, which autograd sums, and the
    AccumulateGrad hook steps the sum, as torch's optimizer would."""
    st = weight.__dict__.get("_emb_in_backward")
    if st is not None and torch.is_grad_enabled():
        st.uses += 1


def embedding(input, weight, padding_idx=None, max_norm=None, norm_type=2.0,
              scale_grad_by_freq=False, sparse=False):
    """F.embedding on emb's kernels (same arguments)."""
    if not _served(weight, input):
        return torch.nn.functional.embedding(input, weight, padding_idx, max_norm, norm_type,
                                             scale_grad_by_freq, sparse)
    if padding_idx is not None:  # F.embedding's normalisation and check
        if padding_idx > 0:
            assert padding_idx < weight.size(0), "Padding_idx must be within num_embeddings"
        elif padding_idx < 0:
            assert padding_idx >= -weight.size(0), "Padding_idx must be within num_embeddings"
            padding_idx = weight.size(0) + padding_idx
    _count_use(weight)
    return _EmbeddingFunction.apply(weight, input, padding_idx, max_norm, norm_type,
                                    scale_grad_by_freq, sparse)


class Embedding(nn.Embedding):
    """torch.nn.Embedding with emb's forward and backward (same arguments and behaviour)."""

    def forward(self, input):
        w = self.weight
        if self.padding_idx is None and _served(w, input):  # embedding()'s path, shorter
            _count_use(w)
            return _EmbeddingFunction.apply(w, input, None, self.max_norm, self.norm_type,
                                            self.scale_grad_by_freq, self.sparse)
        return embedding(input, w, self.padding_idx, self.max_norm, self.norm_type,
                         self.scale_grad_by_freq, self.sparse)


class _BagFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, weight, psw, input, offsets, mode, padding_idx, max_norm, norm_type,
                scale_grad_by_freq, sparse, include_last_offset):
        inp = _view(input)
        off = None if offsets is None else _view(offsets)
        p = None if psw is None else _view(psw)
        w = weight.detach().numpy()
        out, max_indices = _emb.embedding_bag(w, inp, off, p, mode, padding_idx, max_norm,
                                              norm_type, include_last_offset)
        ctx.weight = w
        ctx.input = input
        ctx.args = (inp, off, p, max_indices)
        ctx.opts = dict(mode=mode, padding_idx=padding_idx, scale_grad_by_freq=scale_grad_by_freq,
                        include_last_offset=include_last_offset)
        ctx.sparse = sparse
        ctx.fused = weight.__dict__.get("_emb_in_backward")
        # what the backward reads, saved as torch saves it (the weight only for the gradient
        # of per_sample_weights), so that an in-place change before the backward is an error
        ctx.save_for_backward(input, offsets, psw, weight if psw is not None else None)
        return torch.from_numpy(out)

    @staticmethod
    def backward(ctx, grad_output):
        ctx.saved_tensors  # torch's check that nothing saved was changed in place
        inp, off, p, mi = ctx.args
        w = ctx.weight
        go = _view(grad_output)
        gw = gp = None
        if ctx.needs_input_grad[1]:  # first: it reads the weight, which a fused step changes
            gp = torch.from_numpy(_emb.embedding_bag_backward(
                w, inp, go, off, None, None, what="per_sample_weights", **ctx.opts))
        if ctx.needs_input_grad[0] and ctx.fused is not None and ctx.fused.uses <= 1:
            ctx.fused.bag_step(w, inp, go, off, p, mi, ctx.sparse, ctx.opts)
        elif ctx.needs_input_grad[0]:
            what = "sparse" if ctx.sparse else "dense"
            g = _emb.embedding_bag_backward(w, inp, go, off, p, mi, what=what, **ctx.opts)
            if not ctx.sparse:
                gw = torch.from_numpy(g)
            else:  # rows = the input's entries in order when nothing is left out (no padding)
                gw = _sparse(g[0], g[1], w.shape, ctx.input if ctx.opts["padding_idx"] is None
                             else None)
        return (gw, gp) + (None,) * 9


def embedding_bag(input, weight, offsets=None, max_norm=None, norm_type=2,
                  scale_grad_by_freq=False, mode="mean", sparse=False, per_sample_weights=None,
                  include_last_offset=False, padding_idx=None):
    """F.embedding_bag on emb's kernels (same arguments)."""
    if not _served(weight, input, offsets, per_sample_weights) or (
            per_sample_weights is not None and per_sample_weights.dtype != torch.float32):
        return torch.nn.functional.embedding_bag(
            input, weight, offsets, max_norm, norm_type, scale_grad_by_freq, mode, sparse,
            per_sample_weights, include_last_offset, padding_idx)
    if input.dim() == 2 and offsets is not None:
        raise ValueError("if input is 2D, then offsets has to be None, as input is treated is "
                         "a mini-batch of fixed length sequences. However, found offsets of "
                         f"type {type(offsets)}")
    if padding_idx is not None and padding_idx < 0:
        padding_idx = weight.size(0) + padding_idx
    _count_use(weight)
    return _BagFunction.apply(weight, per_sample_weights, input, offsets, mode, padding_idx,
                              max_norm, float(norm_type), scale_grad_by_freq, sparse,
                              include_last_offset)


class EmbeddingBag(nn.EmbeddingBag):
    """torch.nn.EmbeddingBag with emb's forward and backward (same arguments and behaviour)."""

    def forward(self, input, offsets=None, per_sample_weights=None):
        return embedding_bag(input, self.weight, offsets, self.max_norm, self.norm_type,
                             self.scale_grad_by_freq, self.mode, self.sparse,
                             per_sample_weights, self.include_last_offset, self.padding_idx)


# ---- optimizers applied in the backward (TorchRec's apply_optimizer_in_backward) ----

_IN_BACKWARD = {torch.optim.SGD: "SGD", torch.optim.Adagrad: "Adagrad", torch.optim.Adam: "Adam",
                torch.optim.AdamW: "AdamW", torch.optim.SparseAdam: "SparseAdam"}
# torch's constructor arguments that emb's optimizers do not take, with the values that mean
# what emb computes (torch.optim's single-tensor path on CPU)
_TORCH_ONLY = {"foreach": (None, False), "differentiable": (False,), "capturable": (False,),
               "fused": (None, False)}


class _InBackward:
    """The optimizer of one parameter, applied as the backward reaches it."""

    def __init__(self, opt, array):
        self.opt = opt
        self.ptr = array.__array_interface__["data"][0]
        self.tables = {}  # emb tables over the parameter's memory, by module options
        self.uses = 0  # uses by the graph being built (_count_use); its backward resets it

    def _check(self, w):
        if w.__array_interface__["data"][0] != self.ptr:
            raise RuntimeError("the parameter's memory changed after apply_optimizer_in_backward "
                               "(its .data was replaced): apply it again to the parameter")

    def _table(self, key, make):
        t = self.tables.get(key)
        if t is None:
            t = self.tables[key] = make()
        return t

    def embedding_step(self, w, idx, go, padding_idx, scale, sparse):
        self._check(w)
        if sparse and not scale:  # backward and step in one (emb_optimizer_step_fused)
            from . import Embedding as Table
            t = self._table(("embedding", padding_idx), lambda: Table.from_pretrained(
                w, freeze=False, padding_idx=padding_idx, sparse=True))
            self.opt.step_fused(0, t, idx, go)
            return
        self._step(_emb.embedding_backward(w, idx, go, padding_idx, scale, sparse), sparse)

    def bag_step(self, w, inp, go, off, psw, max_indices, sparse, opts):
        self._check(w)
        mode = opts["mode"]
        if sparse and mode != "max" and not opts["scale_grad_by_freq"]:  # fused
            from . import EmbeddingBag as Bag
            key = ("bag", mode, opts["padding_idx"], opts["include_last_offset"])
            b = self._table(key, lambda: Bag.from_pretrained(
                w, freeze=False, mode=mode, sparse=True, padding_idx=opts["padding_idx"],
                include_last_offset=opts["include_last_offset"]))
            self.opt.step_fused_bag(0, b, inp, go, offsets=off, per_sample_weights=psw)
            return
        self._step(_emb.embedding_bag_backward(w, inp, go, off, psw, max_indices,
                                               what="sparse" if sparse else "dense", **opts),
                   sparse)

    def _step(self, g, sparse):
        """Steps a gradient emb's backward formed: (rows, values) when sparse."""
        if sparse:
            self.opt.step_sparse(0, g[0], g[1])
        else:
            self.opt.step(0, g)


def _after_accumulate(ref, state):
    """The hook on a parameter's AccumulateGrad: a gradient torch computed (the parameter
    used by another module, or by torch's own ops) is stepped and cleared."""
    def hook(_, incoming):
        state.uses = 0  # the parameter's part of this backward is done
        p = ref()
        g = None if p is None or incoming[0] is None else p.grad
        if g is None:  # no gradient reached it (the modules' fused backward returns none)
            return
        p.grad = None
        state._check(p.detach().numpy())
        if g.is_sparse:
            state.opt.step_sparse(0, g._indices()[0].contiguous().numpy(),
                                  g._values().contiguous().numpy(), coalesced=g.is_coalesced())
        else:
            state.opt.step(0, _view(g))
    return hook


def apply_optimizer_in_backward(optimizer_class, params, optimizer_kwargs):
    """TorchRec's apply_optimizer_in_backward(optimizer_class, params, optimizer_kwargs):
    each parameter gets its own optimizer, emb's implementation of optimizer_class
    (torch.optim.SGD, Adagrad, Adam, AdamW or SparseAdam: torch 1.13's update rules, bit for
    bit) with optimizer_kwargs (torch's names and defaults), stepped during the backward as
    soon as the parameter's gradient is known; .grad stays None and optimizer.step() is not
    called for these parameters. The weights of emb.torch's modules take the step inside
    their backward: a sparse module's gradient is never formed (emb_optimizer_step_fused),
    a dense one's is formed and stepped by emb; any other parameter is stepped from the
    gradient torch accumulated, by a hook on its AccumulateGrad. Each parameter's optimizer
    is param._in_backward_optimizers[0] (an emb.Optimizer: state_dict() / load_state_dict(),
    lr). The parameters after training are bit for bit those of optimizer_class stepped
    after each backward; a weight that the graph uses more than once is stepped once on the
    summed gradient (its uses return their gradients and the hook steps the sum).
    Parameters: float32 contiguous CPU leaf tensors that require grad, whose memory stays
    theirs (replacing .data is refused at the next step)."""
    name = _IN_BACKWARD.get(optimizer_class)
    if name is None:
        raise TypeError(f"apply_optimizer_in_backward: {optimizer_class!r} is not one of "
                        f"torch.optim.SGD, Adagrad, Adam, AdamW, SparseAdam")
    kw = dict(optimizer_kwargs)
    for k, ok in _TORCH_ONLY.items():
        if k in kw and kw.pop(k) not in ok:
            raise ValueError(f"apply_optimizer_in_backward: {k}={optimizer_kwargs[k]!r} is not "
                             f"provided (emb computes torch's single-tensor path, {k}={ok[0]})")
    from . import SGD, Adagrad, Adam, AdamW, SparseAdam
    make = {"SGD": SGD, "Adagrad": Adagrad, "Adam": Adam, "AdamW": AdamW,
            "SparseAdam": SparseAdam}[name]
    params = list(params)
    for p in params:
        if not isinstance(p, torch.Tensor) or not p.is_leaf or not p.requires_grad:
            raise ValueError("apply_optimizer_in_backward: the parameters are leaf tensors "
                             "that require grad")
        if p.dtype is not torch.float32 or not p.is_cpu or p.layout is not torch.strided \
                or not p.is_contiguous():
            raise TypeError(f"apply_optimizer_in_backward: a parameter is a "
                            f"{p.dtype} {p.layout} tensor on {p.device}; emb steps float32 "
                            f"contiguous CPU tensors")
        if "_emb_in_backward" in p.__dict__:
            raise ValueError("apply_optimizer_in_backward: a parameter already has an "
                             "optimizer applied in backward")
    for p in params:
        a = p.detach().numpy()
        opt = make([a], **kw)
        state = _InBackward(opt, a)
        acc = p.view_as(p).grad_fn.next_functions[0][0]
        state.hook = acc.register_hook(_after_accumulate(weakref.ref(p), state))
        # torch keeps a parameter's AccumulateGrad only while a graph uses it; this reference
        # keeps it, and the hook, for the graphs to come. The node holds the parameter, in
        # C++ where Python's collector cannot see it: remove_optimizer_in_backward breaks it.
        state.acc = acc
        p._emb_in_backward = state
        p._in_backward_optimizers = [opt]


def remove_optimizer_in_backward(params):
    """Undoes apply_optimizer_in_backward for the parameters that have one (the others are
    left alone): the hook is removed, the optimizer and its state are dropped, and the
    parameter's gradients accumulate in .grad again. A parameter with an optimizer in
    backward is kept alive by the AccumulateGrad node its hook lives on, which holds the
    parameter in C++: a model given optimizers in backward is freed only after this call.
    Returns the number of parameters it undid."""
    n = 0
    for p in list(params):
        state = p.__dict__.pop("_emb_in_backward", None) if isinstance(p, torch.Tensor) else None
        if state is None:
            continue
        state.hook.remove()
        state.acc = state.hook = None
        state.tables.clear()
        p.__dict__.pop("_in_backward_optimizers", None)
        n += 1
    return n
