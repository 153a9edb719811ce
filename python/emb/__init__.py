"""emb: embedding layers in C (PyTorch's nn.Embedding and nn.EmbeddingBag, bit for bit), from
Python.

    import emb, numpy as np
    emb.manual_seed(0)                 # torch.manual_seed(0)
    table = emb.Embedding(6, 2)        # nn.Embedding(6, 2): the same numbers
    table(np.array([2]))               # array([[-1.0845, -1.3986]], dtype=float32)

Arrays cross without copies through the buffer protocol: ``numpy.asarray(table)`` (or
``table.weight``) is a live view of the table's memory, read-only for a read-only table.
``emb.torch`` has drop-in replacements for torch's modules; ``emb.KeyedVectors`` and
``emb.train`` are shaped like gensim's. docs/python.md is the guide.
"""
import os as _os

import numpy as _np

from . import _emb
from ._emb import (  # noqa: F401  (the public names)
    Error, InvalidArgumentError, NullArgumentError, OutOfMemoryError, IndexOutOfRangeError,
    DtypeError, ShapeError, UnsupportedError, StateError, FormatError, ReadOnlyError,
    CancelledError, NumericError, Knn, QTable, Generator, default_generator,
    QTableWriter, quantize_rows, qtype_row_nbytes,
    set_num_threads, get_num_threads, set_kernel_mode, get_kernel_mode,
    manual_seed, initial_seed, log_softmax, spearman, pca, tsne,
    tensor_repr, Linear, one_hot, embedding, embedding_bag, embedding_renorm_, SparseGrad,
    sparse_coalesce_order,
)

__version__ = _emb.__version__

__all__ = [
    "Embedding", "EmbeddingBag", "Optimizer", "SGD", "Adagrad", "Adam", "AdamW", "SparseAdam",
    "QTable", "Knn", "KeyedVectors", "FastTextKeyedVectors", "load_facebook_vectors",
    "save_facebook_model", "train",
    "manual_seed", "initial_seed", "Generator",
    "QTableWriter", "quantize_rows", "qtype_row_nbytes",
    "default_generator", "pca", "tsne", "tensor_repr", "Linear", "one_hot",
    "embedding", "embedding_bag", "embedding_renorm_", "SparseGrad", "sparse_coalesce_order",
    "cross_entropy", "nll_loss", "mse_loss", "binary_cross_entropy_with_logits", "log_softmax",
    "read_vectors", "write_vectors", "load_npy", "save_npy", "load_safetensors",
    "save_safetensors", "map_safetensors", "Error", "set_num_threads", "get_num_threads",
]


class Embedding(_emb.Embedding):
    """nn.Embedding(num_embeddings, embedding_dim, padding_idx=None, max_norm=None,
    norm_type=2.0, scale_grad_by_freq=False, sparse=False, _weight=None).

    The weight is drawn from emb's default generator exactly as torch draws it from its own
    (``emb.manual_seed(s)`` then ``Embedding(V, D)`` equals ``torch.manual_seed(s)`` then
    ``nn.Embedding(V, D)``). ``table(indices)`` / ``table.forward(indices)`` looks rows up
    (int64 or int32 indices of any shape); ``backward`` and ``backward_sparse`` give the
    weight's gradient. ``table.weight`` is a numpy view of the table itself."""

    @classmethod
    def from_pretrained(cls, embeddings, freeze=True, padding_idx=None, max_norm=None,
                        norm_type=2.0, scale_grad_by_freq=False, sparse=False):
        """Embedding.from_pretrained: the table IS `embeddings` (no copy, as in torch): a
        C-contiguous float32 [V, D] array, kept alive by the table. A read-only array (a
        numpy memmap opened with mode 'r', say) gives a read-only table."""
        arr = embeddings if hasattr(embeddings, "__array_interface__") or isinstance(
            embeddings, memoryview) else _np.asarray(embeddings)
        shape = _np.shape(arr)
        if len(shape) != 2:
            raise ValueError(f"Embeddings parameter is expected to be 2-dimensional, got "
                             f"{len(shape)} dimensions")
        return cls(shape[0], shape[1], padding_idx=padding_idx, max_norm=max_norm,
                   norm_type=norm_type, scale_grad_by_freq=scale_grad_by_freq, sparse=sparse,
                   _weight=arr, _freeze=freeze)

    def __array__(self, dtype=None):
        a = _np.asarray(memoryview(self))
        return a if dtype is None else a.astype(dtype)


class EmbeddingBag(_emb.EmbeddingBag):
    """nn.EmbeddingBag(num_embeddings, embedding_dim, max_norm=None, norm_type=2.0,
    scale_grad_by_freq=False, mode='mean', sparse=False, _weight=None,
    include_last_offset=False, padding_idx=None): pooled lookups.
    ``bag(input, offsets=None, per_sample_weights=None)``."""

    @classmethod
    def from_pretrained(cls, embeddings, freeze=True, max_norm=None, norm_type=2.0,
                        scale_grad_by_freq=False, mode="mean", sparse=False,
                        include_last_offset=False, padding_idx=None):
        """EmbeddingBag.from_pretrained: shares `embeddings` (see Embedding.from_pretrained)."""
        arr = embeddings if hasattr(embeddings, "__array_interface__") else _np.asarray(embeddings)
        shape = _np.shape(arr)
        if len(shape) != 2:
            raise ValueError(f"Embeddings parameter is expected to be 2-dimensional, got "
                             f"{len(shape)} dimensions")
        return cls(shape[0], shape[1], max_norm=max_norm, norm_type=norm_type,
                   scale_grad_by_freq=scale_grad_by_freq, mode=mode, sparse=sparse,
                   _weight=arr, include_last_offset=include_last_offset,
                   padding_idx=padding_idx, _freeze=freeze)

    def __array__(self, dtype=None):
        a = _np.asarray(memoryview(self))
        return a if dtype is None else a.astype(dtype)


# ---- optimizers: torch.optim's names and defaults, over arrays and tables ----

class Optimizer(_emb.Optimizer):
    """Optimizer(kind, lr=None, ...): torch.optim's update rules and state over float32
    arrays and tables it updates in place (and keeps alive). kind: 'sgd', 'adagrad',
    'adam', 'adamw', 'sparse_adam'; options left None take torch's defaults. add_param(p)
    -> id; step(id, grad), step_sparse(id, rows, values), step_fused(id, table, indices,
    grad_output), step_fused_bag(id, bag, input, grad_output, offsets=None,
    per_sample_weights=None); state_dict() -> bytes, load_state_dict(bytes); lr (settable)."""
    param_ids = ()


def _optimizer(kind, params, kw):
    opt = Optimizer(kind, **kw)
    opt.param_ids = [opt.add_param(p) for p in params]
    return opt


def SGD(params, lr=1e-3, momentum=0.0, dampening=0.0, weight_decay=0.0, nesterov=False,
        maximize=False):
    """torch.optim.SGD over float32 arrays and tables (updated in place); returns an
    Optimizer whose param_ids follow the order of `params`."""
    return _optimizer("sgd", params, dict(lr=lr, momentum=momentum, dampening=dampening,
                                          weight_decay=weight_decay, nesterov=nesterov,
                                          maximize=maximize))


def Adagrad(params, lr=1e-2, lr_decay=0.0, weight_decay=0.0, initial_accumulator_value=0.0,
            eps=1e-10, maximize=False):
    return _optimizer("adagrad", params, dict(
        lr=lr, lr_decay=lr_decay, weight_decay=weight_decay,
        initial_accumulator_value=initial_accumulator_value, eps=eps, maximize=maximize))


def Adam(params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0, amsgrad=False,
         maximize=False):
    return _optimizer("adam", params, dict(lr=lr, betas=betas, eps=eps,
                                           weight_decay=weight_decay, amsgrad=amsgrad,
                                           maximize=maximize))


def AdamW(params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2, amsgrad=False,
          maximize=False):
    return _optimizer("adamw", params, dict(lr=lr, betas=betas, eps=eps,
                                            weight_decay=weight_decay, amsgrad=amsgrad,
                                            maximize=maximize))


def SparseAdam(params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, maximize=False):
    return _optimizer("sparse_adam", params, dict(lr=lr, betas=betas, eps=eps,
                                                  maximize=maximize))


# ---- losses: F.<name>(input, target, ...) -> 0-d float32 array (or per element) ----

def cross_entropy(input, target, weight=None, ignore_index=-100, reduction="mean",
                  label_smoothing=0.0):
    """F.cross_entropy on float32 logits and int64 class targets."""
    return _emb.loss("cross_entropy", input, target, weight=weight, ignore_index=ignore_index,
                     reduction=reduction, label_smoothing=label_smoothing)


def cross_entropy_backward(input, target, grad_loss, weight=None, ignore_index=-100,
                           reduction="mean", label_smoothing=0.0):
    """The gradient of cross_entropy with respect to its input, times grad_loss."""
    return _emb.loss("cross_entropy", input, target, weight=weight, ignore_index=ignore_index,
                     reduction=reduction, label_smoothing=label_smoothing,
                     grad_loss=_np.asarray(grad_loss, _np.float32))


def nll_loss(input, target, weight=None, ignore_index=-100, reduction="mean"):
    return _emb.loss("nll_loss", input, target, weight=weight, ignore_index=ignore_index,
                     reduction=reduction)


def nll_loss_backward(input, target, grad_loss, weight=None, ignore_index=-100,
                      reduction="mean"):
    return _emb.loss("nll_loss", input, target, weight=weight, ignore_index=ignore_index,
                     reduction=reduction, grad_loss=_np.asarray(grad_loss, _np.float32))


def mse_loss(input, target, reduction="mean"):
    return _emb.loss("mse_loss", input, target, reduction=reduction)


def mse_loss_backward(input, target, grad_loss, reduction="mean"):
    return _emb.loss("mse_loss", input, target, reduction=reduction,
                     grad_loss=_np.asarray(grad_loss, _np.float32))


def binary_cross_entropy_with_logits(input, target, weight=None, reduction="mean",
                                     pos_weight=None):
    return _emb.loss("binary_cross_entropy_with_logits", input, target, weight=weight,
                     pos_weight=pos_weight, reduction=reduction)


def binary_cross_entropy_with_logits_backward(input, target, grad_loss, weight=None,
                                              reduction="mean", pos_weight=None):
    return _emb.loss("binary_cross_entropy_with_logits", input, target, weight=weight,
                     pos_weight=pos_weight, reduction=reduction,
                     grad_loss=_np.asarray(grad_loss, _np.float32))


# ---- files ----

def read_vectors(path, limit=0, format="auto", tensor=None, check_utf8=True):
    """(words or None, counts or None, float32 [rows, dim], info) of a word-vector or
    table file in any format emb reads (safetensors, npy, word2vec text/binary, GloVe,
    fastText .vec)."""
    return _emb.read_vectors(_os.fspath(path), limit=limit, format=format, tensor=tensor,
                             check_utf8=check_utf8)


def write_vectors(path, array, words=None, counts=None, format="auto", dtype="float32",
                  tensor=None, precision=0, trailing_space=False, binary_newline=True):
    """Writes a float32 table (and its words) atomically; the format follows the file name
    (.safetensors, .npy, .bin, .vec, .txt) unless given."""
    _emb.write_vectors(_os.fspath(path), array, words=words, counts=counts, format=format,
                       dtype=dtype, tensor=tensor, precision=precision,
                       trailing_space=trailing_space, binary_newline=binary_newline)


def load_npy(path):
    return _emb.npy_read(_os.fspath(path))


def save_npy(path, array):
    _emb.npy_write(_os.fspath(path), array)


def load_safetensors(path):
    """({name: array}, metadata) of a safetensors file (bfloat16 tensors as uint16 bits)."""
    return _emb.safetensors_read(_os.fspath(path))


def save_safetensors(path, tensors, metadata=None):
    _emb.safetensors_write(_os.fspath(path), dict(tensors), metadata)


def map_safetensors(path, tensor=None):
    """A read-only Embedding over a memory-mapped safetensors file (nothing is read until
    looked up): tables larger than memory."""
    return _emb.map_safetensors(_os.fspath(path), tensor)


from .keyedvectors import (FastTextKeyedVectors, KeyedVectors, load_facebook_vectors,  # noqa: E402
                           save_facebook_model)
from .word2vec import train  # noqa: E402
