"""ctypes bindings to libemb for the parity and CLI suites, plus the project's comparison
helper. The library path comes from $EMB_LIB (set by ctest); tests compare emb with torch
itself at test time."""
import ctypes as C
import os

import numpy as np

import machine

_lib_path = os.environ.get("EMB_LIB")
if not _lib_path:
    _here = os.path.dirname(os.path.abspath(__file__))
    _lib_path = os.path.join(_here, "..", "..", "build", "libemb.so")
lib = C.CDLL(_lib_path)

# ---- enums (pinned values, include/emb/*.h) ----
OK = 0
ERR_INVALID, ERR_NULL, ERR_NOMEM, ERR_INDEX, ERR_DTYPE, ERR_SHAPE = -1, -2, -3, -4, -5, -6
ERR_OVERFLOW, ERR_UNSUPPORTED, ERR_STATE, ERR_IO, ERR_FORMAT = -7, -8, -9, -10, -11
ERR_READ_ONLY = -12

FLOAT32, INT64, INT32, FLOAT64, FLOAT16, BFLOAT16, INT8, UINT8, INT16, BOOL = range(10)
MAX_DIMS = 9
PADDING_NONE = -(2 ** 63)

_NP_TO_EMB = {
    np.dtype(np.float32): FLOAT32, np.dtype(np.int64): INT64, np.dtype(np.int32): INT32,
    np.dtype(np.float64): FLOAT64, np.dtype(np.float16): FLOAT16, np.dtype(np.int8): INT8,
    np.dtype(np.uint8): UINT8, np.dtype(np.int16): INT16, np.dtype(np.bool_): BOOL,
}


class Tensor(C.Structure):
    _fields_ = [("dtype", C.c_int), ("ndim", C.c_int), ("shape", C.c_int64 * MAX_DIMS),
                ("data", C.c_void_p)]


def T(arr, dtype=None):
    """An emb_tensor viewing a C-contiguous numpy array (kept alive on the struct)."""
    arr = np.asarray(arr)
    if not arr.flags.c_contiguous:  # np.ascontiguousarray would turn a 0-d array into 1-d
        arr = np.ascontiguousarray(arr)
    t = Tensor()
    t.dtype = _NP_TO_EMB[arr.dtype] if dtype is None else dtype
    t.ndim = arr.ndim
    for i, s in enumerate(arr.shape):
        t.shape[i] = s
    t.data = arr.ctypes.data if arr.size else None
    t._keep = arr
    return t


class EmbError(Exception):
    def __init__(self, status, msg):
        super().__init__(f"status {status} ({status_str(status)}): {msg}")
        self.status = status
        self.msg = msg


def errmsg():
    return lib.emb_errmsg().decode()


def status_str(s):
    return lib.emb_status_str(s).decode()


def check(status):
    if status != OK:
        raise EmbError(status, errmsg())
    return status


def call(fn, *args):
    """Calls fn and returns (status, errmsg-or-'')."""
    lib.emb_clear_error()
    st = fn(*args)
    return st, (errmsg() if st != OK else "")


# ---- option structs ----
class EmbeddingOptions(C.Structure):
    _fields_ = [("padding_idx", C.c_int64), ("max_norm", C.c_double), ("norm_type", C.c_double),
                ("scale_grad_by_freq", C.c_bool), ("sparse", C.c_bool), ("generator", C.c_void_p)]


RELEASE_FN = C.CFUNCTYPE(None, C.c_void_p, C.c_void_p)


class Storage(C.Structure):
    """emb_storage: how emb_embedding_wrap holds caller memory."""
    _fields_ = [("read_only", C.c_bool), ("release", RELEASE_FN), ("release_ctx", C.c_void_p)]


class PrintOptions(C.Structure):
    _fields_ = [("precision", C.c_int), ("threshold", C.c_int), ("edgeitems", C.c_int),
                ("linewidth", C.c_int), ("sci_mode", C.c_int), ("suffixes", C.c_char_p * 4)]


class LossOptions(C.Structure):
    _fields_ = [("reduction", C.c_int), ("ignore_index", C.c_int64),
                ("label_smoothing", C.c_double), ("weight", C.POINTER(Tensor))]


class OptimOptions(C.Structure):
    _fields_ = [("kind", C.c_int), ("lr", C.c_double), ("momentum", C.c_double),
                ("dampening", C.c_double), ("nesterov", C.c_bool), ("weight_decay", C.c_double),
                ("lr_decay", C.c_double), ("initial_accumulator_value", C.c_double),
                ("eps", C.c_double), ("beta1", C.c_double), ("beta2", C.c_double),
                ("amsgrad", C.c_bool), ("maximize", C.c_bool)]


class SparseGrad(C.Structure):
    _fields_ = [("num_rows", C.c_int64), ("dim", C.c_int64), ("nnz", C.c_int64),
                ("capacity", C.c_int64), ("indices", C.POINTER(C.c_int64)),
                ("values", C.POINTER(C.c_float)), ("coalesced", C.c_bool),
                ("borrowed", C.c_bool)]

    def arrays(self):
        """(indices [nnz] int64, values [nnz, dim] float32) copies."""
        n, d = self.nnz, self.dim
        idx = np.ctypeslib.as_array(self.indices, (n,)).copy() if n else np.zeros(0, np.int64)
        val = (np.ctypeslib.as_array(self.values, (n * d,)).reshape(n, d).copy()
               if n * d else np.zeros((n, d), np.float32))
        return idx, val


REDUCTION_MEAN, REDUCTION_SUM, REDUCTION_NONE = 0, 1, 2
SGD, ADAGRAD, ADAM, ADAMW, SPARSE_ADAM = range(5)
SCI_AUTO, SCI_ON, SCI_OFF = 0, 1, 2

P = C.POINTER
_vp = C.c_void_p
_tp = P(Tensor)
_st = C.c_int

_SIGS = {
    # core
    "emb_version": (C.c_char_p, []),
    "emb_version_number": (C.c_int, []),
    "emb_status_str": (C.c_char_p, [C.c_int]),
    "emb_errmsg": (C.c_char_p, []),
    "emb_clear_error": (None, []),
    "emb_dtype_nbytes": (C.c_size_t, [C.c_int]),
    "emb_dtype_name": (C.c_char_p, [C.c_int]),
    "emb_tensor_init": (_st, [_tp, C.c_int, _vp, C.c_int, P(C.c_int64)]),
    "emb_tensor_alloc": (_st, [_tp, C.c_int, C.c_int, P(C.c_int64)]),
    "emb_tensor_release": (None, [_tp]),
    "emb_tensor_check": (_st, [_tp, C.c_char_p]),
    "emb_set_num_threads": (None, [C.c_int]),
    "emb_get_num_threads": (C.c_int, []),
    "emb_set_kernel_mode": (None, [C.c_int]),
    "emb_get_kernel_mode": (C.c_int, []),
    # random
    "emb_generator_create": (_st, [C.c_uint64, P(_vp)]),
    "emb_generator_free": (None, [_vp]),
    "emb_default_generator": (_vp, []),
    "emb_manual_seed": (None, [C.c_uint64]),
    "emb_generator_seed": (None, [_vp, C.c_uint64]),
    "emb_generator_initial_seed": (C.c_uint64, [_vp]),
    "emb_generator_random": (C.c_uint32, [_vp]),
    "emb_generator_random64": (C.c_uint64, [_vp]),
    "emb_generator_state_nbytes": (C.c_size_t, []),
    "emb_generator_get_state": (_st, [_vp, _vp, C.c_size_t]),
    "emb_generator_set_state": (_st, [_vp, _vp, C.c_size_t]),
    "emb_normal_": (_st, [_tp, C.c_double, C.c_double, _vp]),
    "emb_randn_": (_st, [_tp, _vp]),
    "emb_uniform_": (_st, [_tp, C.c_double, C.c_double, _vp]),
    "emb_randint_": (_st, [_tp, C.c_int64, C.c_int64, _vp]),
    # print
    "emb_print_options_default": (PrintOptions, []),
    "emb_tensor_repr": (_st, [_tp, P(PrintOptions), C.c_char_p, C.c_size_t, P(C.c_size_t)]),
    # embedding
    "emb_embedding_options_default": (EmbeddingOptions, []),
    "emb_embedding_create": (_st, [C.c_int64, C.c_int64, P(EmbeddingOptions), P(_vp)]),
    "emb_embedding_from_pretrained": (_st, [_tp, C.c_bool, P(EmbeddingOptions), P(_vp)]),
    "emb_embedding_free": (None, [_vp]),
    "emb_embedding_wrap": (_st, [_tp, P(Storage), C.c_bool, P(EmbeddingOptions), P(_vp)]),
    "emb_embedding_is_read_only": (C.c_bool, [_vp]),
    "emb_embedding_weight": (_st, [_vp, _tp]),
    "emb_embedding_weight_const": (_st, [_vp, _tp]),
    "emb_embedding_num_embeddings": (C.c_int64, [_vp]),
    "emb_embedding_embedding_dim": (C.c_int64, [_vp]),
    "emb_embedding_padding_idx": (C.c_int64, [_vp]),
    "emb_embedding_max_norm": (C.c_double, [_vp]),
    "emb_embedding_norm_type": (C.c_double, [_vp]),
    "emb_embedding_scale_grad_by_freq": (C.c_bool, [_vp]),
    "emb_embedding_is_sparse": (C.c_bool, [_vp]),
    "emb_embedding_requires_grad": (C.c_bool, [_vp]),
    "emb_embedding_set_requires_grad": (None, [_vp, C.c_bool]),
    "emb_embedding_output_shape": (_st, [_vp, _tp, P(C.c_int), P(C.c_int64)]),
    "emb_embedding_forward": (_st, [_vp, _tp, _tp]),
    "emb_embedding_lookup": (_st, [_tp, _tp, _tp]),
    "emb_embedding_renorm_": (_st, [_tp, _tp, C.c_double, C.c_double]),
    "emb_sparse_grad_init": (_st, [P(SparseGrad), C.c_int64, C.c_int64]),
    "emb_sparse_grad_clear": (None, [P(SparseGrad)]),
    "emb_sparse_grad_release": (None, [P(SparseGrad)]),
    "emb_sparse_grad_coalesce": (_st, [P(SparseGrad)]),
    "emb_sparse_grad_add_to_dense": (_st, [P(SparseGrad), _tp]),
    "emb_embedding_backward": (_st, [_vp, _tp, _tp, _tp]),
    "emb_embedding_backward_overwrite": (_st, [_vp, _tp, _tp, _tp]),
    "emb_embedding_backward_sparse": (_st, [_vp, _tp, _tp, P(SparseGrad)]),
    "emb_embedding_backward_sparse_view": (_st, [_vp, _tp, _tp, P(SparseGrad)]),
    # linear
    "emb_linear_create": (_st, [C.c_int64, C.c_int64, C.c_bool, _vp, P(_vp)]),
    "emb_linear_free": (None, [_vp]),
    "emb_linear_in_features": (C.c_int64, [_vp]),
    "emb_linear_out_features": (C.c_int64, [_vp]),
    "emb_linear_has_bias": (C.c_bool, [_vp]),
    "emb_linear_weight": (_st, [_vp, _tp]),
    "emb_linear_bias": (_st, [_vp, _tp]),
    "emb_linear_forward": (_st, [_vp, _tp, _tp]),
    "emb_linear_backward": (_st, [_vp, _tp, _tp, _tp, _tp, _tp]),
    "emb_one_hot_num_classes": (_st, [_tp, C.c_int64, P(C.c_int64)]),
    "emb_one_hot": (_st, [_tp, C.c_int64, _tp]),
    # loss
    "emb_loss_options_default": (LossOptions, []),
    "emb_cross_entropy_forward": (_st, [_tp, _tp, P(LossOptions), _tp]),
    "emb_cross_entropy_backward": (_st, [_tp, _tp, P(LossOptions), _tp, _tp]),
    "emb_nll_loss_forward": (_st, [_tp, _tp, P(LossOptions), _tp]),
    "emb_nll_loss_backward": (_st, [_tp, _tp, P(LossOptions), _tp, _tp]),
    "emb_log_softmax_forward": (_st, [_tp, _tp]),
    "emb_log_softmax_backward": (_st, [_tp, _tp, _tp]),
    "emb_mse_loss_forward": (_st, [_tp, _tp, P(LossOptions), _tp]),
    "emb_mse_loss_backward": (_st, [_tp, _tp, P(LossOptions), _tp, _tp]),
    "emb_bce_with_logits_forward": (_st, [_tp, _tp, _tp, P(LossOptions), _tp]),
    "emb_bce_with_logits_backward": (_st, [_tp, _tp, _tp, P(LossOptions), _tp, _tp]),
    # optim
    "emb_optimizer_options_default": (OptimOptions, [C.c_int]),
    "emb_optimizer_create": (_st, [P(OptimOptions), P(_vp)]),
    "emb_optimizer_free": (None, [_vp]),
    "emb_optimizer_add_param": (_st, [_vp, _tp, P(C.c_int)]),
    "emb_optimizer_step": (_st, [_vp, C.c_int, _tp]),
    "emb_optimizer_step_sparse": (_st, [_vp, C.c_int, P(SparseGrad)]),
    "emb_optimizer_step_fused": (_st, [_vp, C.c_int, _vp, _tp, _tp]),
    "emb_optimizer_param_steps": (C.c_int64, [_vp, C.c_int]),
    "emb_optimizer_set_lr": (_st, [_vp, C.c_double]),
    "emb_optimizer_lr": (C.c_double, [_vp]),
    "emb_optimizer_init_state": (_st, [_vp, C.c_int]),
    "emb_optimizer_advance_step": (_st, [_vp, C.c_int]),
    "emb_optimizer_update_rows": (_st, [_vp, C.c_int, _tp, _tp]),
    "emb_optimizer_state_nbytes": (C.c_size_t, [_vp]),
    "emb_optimizer_save_state": (_st, [_vp, C.c_void_p, C.c_size_t]),
    "emb_optimizer_load_state": (_st, [_vp, C.c_void_p, C.c_size_t]),
    "emb_sparse_grad_from_rows": (_st, [P(SparseGrad), C.c_int64, C.c_int64, _tp, _tp]),
}

for _name, (_res, _args) in _SIGS.items():
    _fn = getattr(lib, _name, None)
    if _fn is None:  # not built yet; tests that need it fail clearly when they call it
        continue
    _fn.restype = _res
    _fn.argtypes = _args


# ---- kernel tiers (docs/semantics.md §12) ----
KERNELS_AUTO, KERNELS_REF, KERNELS_AVX2 = 0, 1, 2
# The tier this run is under, from EMB_KERNELS in the environment (`make test-machines` runs
# the suites under each tier): tests that switch tiers go back to it, not to "auto".
RUN_KERNEL_MODE = lib.emb_get_kernel_mode()
# The tier a test means by "the fast kernels" (CBLAS, SLEEF, SIMD twins): the run's tier,
# unless the run is under the reference kernels.
FAST_KERNEL_MODE = RUN_KERNEL_MODE if RUN_KERNEL_MODE != KERNELS_REF else KERNELS_AUTO


def kernel_mode_name(mode):
    """The package's name of a kernel mode (emb.set_kernel_mode)."""
    return {KERNELS_AUTO: "auto", KERNELS_REF: "ref", KERNELS_AVX2: "avx2"}[mode]


def kernel_modes():
    """The kernel modes that select distinct variants on this CPU, the reference first:
    ref, avx2 (AVX2 and FMA), auto when it means AVX-512 (F and VL)."""
    f = machine.cpu_flags()
    modes = [KERNELS_REF]
    if machine.AVX2 <= f:
        modes.append(KERNELS_AVX2)
        if machine.AVX512 <= f:
            modes.append(KERNELS_AUTO)
    return modes


def ptr(x):
    """Address of a ctypes object, for P(...) arguments."""
    return C.byref(x)


from parity_util import assert_close, tensor_out  # noqa: E402,F401  (one comparison rule)


# ---- nn.EmbeddingBag (include/emb/bag.h) ----
BAG_SUM, BAG_MEAN, BAG_MAX = 0, 1, 2
ERR_READ_ONLY = -12


class BagOptions(C.Structure):
    _fields_ = [("mode", C.c_int), ("padding_idx", C.c_int64), ("max_norm", C.c_double),
                ("norm_type", C.c_double), ("scale_grad_by_freq", C.c_bool),
                ("sparse", C.c_bool), ("include_last_offset", C.c_bool),
                ("generator", C.c_void_p)]


_BAG_SIGS = {
    "emb_bag_options_default": (BagOptions, []),
    "emb_bag_create": (_st, [C.c_int64, C.c_int64, P(BagOptions), P(_vp)]),
    "emb_bag_from_pretrained": (_st, [_tp, C.c_bool, P(BagOptions), P(_vp)]),
    "emb_bag_wrap": (_st, [_tp, _vp, C.c_bool, P(BagOptions), P(_vp)]),
    "emb_bag_free": (None, [_vp]),
    "emb_bag_embedding": (_vp, [_vp]),
    "emb_bag_weight": (_st, [_vp, _tp]),
    "emb_bag_mode_of": (C.c_int, [_vp]),
    "emb_bag_include_last_offset": (C.c_bool, [_vp]),
    "emb_bag_num_bags": (_st, [_vp, _tp, _tp, P(C.c_int64)]),
    "emb_bag_forward": (_st, [_vp, _tp, _tp, _tp, _tp, _tp]),
    "emb_bag_lookup": (_st, [_tp, _tp, _tp, _tp, P(BagOptions), _tp, _tp]),
    "emb_bag_backward": (_st, [_vp, _tp, _tp, _tp, _tp, _tp, _tp]),
    "emb_bag_backward_overwrite": (_st, [_vp, _tp, _tp, _tp, _tp, _tp, _tp]),
    "emb_bag_backward_sparse": (_st, [_vp, _tp, _tp, _tp, _tp, P(SparseGrad)]),
    "emb_bag_backward_per_sample_weights": (_st, [_vp, _tp, _tp, _tp, _tp]),
    "emb_optimizer_step_fused_bag": (_st, [_vp, C.c_int, _vp, _tp, _tp, _tp, _tp]),
}

for _name, (_res, _args) in _BAG_SIGS.items():
    _fn = getattr(lib, _name, None)
    if _fn is None:
        continue
    _fn.restype = _res
    _fn.argtypes = _args


# ---- reduced-precision and quantized tables (include/emb/quant.h) ----
QTYPES = {"f32": 0, "f16": 1, "bf16": 2, "int8": 3, "int4": 4}


class QError(C.Structure):
    _fields_ = [("max_abs", C.c_double), ("mean_abs", C.c_double), ("mean_cosine", C.c_double),
                ("rows", C.c_int64), ("elements", C.c_int64), ("sum_abs", C.c_double),
                ("sum_cosine", C.c_double)]


_QUANT_SIGS = {
    "emb_qtype_name": (C.c_char_p, [C.c_int]),
    "emb_qtype_parse": (_st, [C.c_char_p, P(C.c_int)]),
    "emb_qtype_row_nbytes": (_st, [C.c_int, C.c_int64, P(C.c_int64)]),
    "emb_quantize_rows": (_st, [C.c_int, _vp, C.c_int64, C.c_int64, _vp, C.c_size_t]),
    "emb_dequantize_rows": (_st, [C.c_int, _vp, C.c_size_t, C.c_int64, C.c_int64, _vp]),
    "emb_qtable_quantize": (_st, [_tp, C.c_int, P(_vp)]),
    "emb_qtable_wrap": (_st, [C.c_int, C.c_int64, C.c_int64, _vp, C.c_size_t, P(Storage),
                              P(_vp)]),
    "emb_qtable_free": (None, [_vp]),
    "emb_qtable_qtype": (C.c_int, [_vp]),
    "emb_qtable_num_rows": (C.c_int64, [_vp]),
    "emb_qtable_dim": (C.c_int64, [_vp]),
    "emb_qtable_row_nbytes": (C.c_int64, [_vp]),
    "emb_qtable_data": (_vp, [_vp]),
    "emb_qtable_nbytes": (C.c_size_t, [_vp]),
    "emb_qtable_forward": (_st, [_vp, _tp, _tp]),
    "emb_qtable_bag_forward": (_st, [_vp, _tp, _tp, _tp, P(BagOptions), _tp, _tp]),
    "emb_qtable_dequantize": (_st, [_vp, C.c_int64, C.c_int64, _vp]),
    "emb_qerror_init": (None, [P(QError)]),
    "emb_qerror_add": (_st, [P(QError), _vp, _vp, C.c_int64, C.c_int64]),
    "emb_qtable_error": (_st, [_vp, _tp, P(QError)]),
    "emb_qtable_is_read_only": (C.c_bool, [_vp]),
    "emb_qtable_bag_backward_sparse": (_st, [_vp, _tp, _tp, _tp, P(BagOptions), _tp,
                                             P(SparseGrad)]),
    "emb_qtable_sgd_step": (_st, [_vp, P(SparseGrad), C.c_float, C.c_int, _vp]),
    "emb_qtable_sgd_step_bag": (_st, [_vp, _tp, _tp, _tp, P(BagOptions), _tp, C.c_float,
                                      C.c_int, _vp]),
}

QROUND_NEAREST, QROUND_STOCHASTIC = 0, 1

for _name, (_res, _args) in _QUANT_SIGS.items():
    _fn = getattr(lib, _name, None)
    if _fn is None:
        continue
    _fn.restype = _res
    _fn.argtypes = _args


class Gen:
    """An emb_generator of its own (emb_generator_create), freed with the object."""

    def __init__(self, seed):
        self.h = C.c_void_p()
        check(lib.emb_generator_create(seed, ptr(self.h)))

    def __del__(self):
        lib.emb_generator_free(self.h)

    def next(self):
        """The next 32-bit draw (emb_generator_random)."""
        return lib.emb_generator_random(self.h)


class QTable:
    """An emb_qtable quantized from a float32 numpy table (emb_qtable_quantize)."""

    def __init__(self, w, qtype):
        self.h = C.c_void_p()
        self.qtype = qtype
        check(lib.emb_qtable_quantize(T(np.ascontiguousarray(w, np.float32)), QTYPES[qtype],
                                      ptr(self.h)))
        self.V, self.D = w.shape

    def __del__(self):
        lib.emb_qtable_free(self.h)

    def bytes(self):
        """The rows as a uint8 array [V, row_bytes] (a copy)."""
        n = lib.emb_qtable_nbytes(self.h)
        rb = lib.emb_qtable_row_nbytes(self.h)
        if n == 0:
            return np.zeros((self.V, rb), np.uint8)
        buf = (C.c_uint8 * n).from_address(lib.emb_qtable_data(self.h))
        return np.frombuffer(buf, np.uint8).copy().reshape(self.V, rb)

    def forward(self, idx):
        out = tensor_out(tuple(idx.shape) + (self.D,))
        check(lib.emb_qtable_forward(self.h, T(idx), T(out)))
        return out

    def bag(self, idx, offsets=None, psw=None, opts=None, B=None, max_indices=False):
        B = B if B is not None else (idx.shape[0] if idx.ndim == 2 else
                                     len(offsets) - (1 if opts is not None and
                                                     opts.include_last_offset else 0))
        out = tensor_out((B, self.D))
        mi = np.zeros((B, self.D), np.int64) if max_indices else None
        check(lib.emb_qtable_bag_forward(self.h, T(idx), None if offsets is None else T(offsets),
                                 None if psw is None else T(psw),
                                 None if opts is None else ptr(opts), T(out),
                                 None if mi is None else T(mi)))
        return (out, mi) if max_indices else out

    def dequantize(self):
        out = np.zeros((self.V, self.D), np.float32)
        check(lib.emb_qtable_dequantize(self.h, 0, self.V, out.ctypes.data))
        return out

_QFILE_SIGS = {
    "emb_qtable_writer_open": (_st, [C.c_char_p, C.c_int, C.c_int64, C.c_int64, _vp, P(_vp)]),
    "emb_qtable_writer_append": (_st, [_vp, _vp, C.c_int64]),
    "emb_qtable_writer_commit": (_st, [_vp, P(QError)]),
    "emb_qtable_writer_free": (None, [_vp]),
    "emb_qtable_save": (_st, [C.c_char_p, _vp, _vp]),
    "emb_qtable_load": (_st, [C.c_char_p, P(_vp), P(_vp)]),
    "emb_qtable_map": (_st, [C.c_char_p, P(_vp), P(_vp)]),
}

for _name, (_res, _args) in _QFILE_SIGS.items():
    _fn = getattr(lib, _name, None)
    if _fn is None:
        continue
    _fn.restype = _res
    _fn.argtypes = _args


class QFile(QTable):
    """A table opened from a file with emb_qtable_load (map=False) or emb_qtable_map."""

    def __init__(self, path, map=False, vocab=False):  # noqa: A002 (the C name)
        self.h = C.c_void_p()
        v = C.c_void_p()
        fn = lib.emb_qtable_map if map else lib.emb_qtable_load
        check(fn(str(path).encode(), ptr(self.h), ptr(v) if vocab else None))
        self.vocab = v
        self.qtype = [k for k, n in QTYPES.items() if n == lib.emb_qtable_qtype(self.h)][0]
        self.V, self.D = lib.emb_qtable_num_rows(self.h), lib.emb_qtable_dim(self.h)
