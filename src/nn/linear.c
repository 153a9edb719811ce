/* nn.Linear: PyTorch-exact initialisation, forward and backward (docs/semantics.md
 * §3.3, §8).
 *
 * The matrix products go through CBLAS when the build has it (and the reference kernels
 * are not forced), issuing torch's own sgemm call (torch_addmm below), so that y, grad_x and
 * grad_weight are bit-identical to PyTorch's on the same OpenBLAS with the same thread
 * count; else through the plain-C kernel in kernels/gemm_ref.c, split into row ranges over
 * threads (emb never splits a dot product between its threads, so those results do not
 * depend on the thread count). grad_bias reproduces the summation order of PyTorch's CPU
 * sum. */
#include "internal.h"
#include <emb/linear.h>
#include "kernels/gemm.h"

#include <inttypes.h>
#include <math.h>
#include <string.h>

struct emb_linear {
    int64_t in_features;
    int64_t out_features;
    bool has_bias;
    float *weight; /* [out_features * in_features], owned */
    float *bias;   /* [out_features] or NULL */
};

typedef struct gemm_ctx {
    bool trans_a, trans_b;
    int64_t m, n, k;
    const float *a;
    int64_t lda;
    const float *b;
    int64_t ldb;
    float beta;
    float *c;
    int64_t ldc;
} gemm_ctx;

/* Rows [4 * b0, 4 * b1) of C (the last block cut at m). */
static void gemm_blocks(void *p, int64_t b0, int64_t b1, int ith) {
    (void)ith;
    const gemm_ctx *g = p;
    const int64_t r0 = b0 * 4, r1 = b1 * 4 < g->m ? b1 * 4 : g->m;
    if (r0 < r1)
        emb__sgemm_rows(g->trans_a, g->trans_b, r0, r1, g->n, g->k, 1.0f, g->a, g->lda, g->b,
                        g->ldb, g->beta, g->c, g->ldc);
}

/* C = op(A) op(B) + beta C (alpha 1) through CBLAS, or the reference kernel on row ranges
 * of C over threads. */
static void gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, const float *a,
                 int64_t lda, const float *b, int64_t ldb, float beta, float *c, int64_t ldc) {
    if (m <= 0 || n <= 0) return;
    if (!emb__force_ref() &&
        emb__sgemm_cblas(trans_a, trans_b, m, n, k, 1.0f, a, lda, b, ldb, beta, c, ldc))
        return;
    int64_t flops;
    if (!emb__mul_i64(m, n, &flops) || !emb__mul_i64(flops, k > 0 ? k : 1, &flops))
        flops = INT64_MAX;
    int nt = emb__threads_for(flops, 1 << 16);
    if (nt > m) nt = (int)m;
    gemm_ctx g = {trans_a, trans_b, m, n, k, a, lda, b, ldb, beta, c, ldc};
    /* row blocks of 4 (the kernel's tile height) split evenly */
    emb__parallel_for(nt, (m + 3) / 4, gemm_blocks, &g);
}

/* ---------------------------------------------------------------------------------------
 * PyTorch's BLAS call. torch 1.13's CPU mm/addmm (addmm_impl_cpu_ in LinearAlgebra.cpp,
 * then cpublas::gemm) looks at the strides of the result and of both operands, decides
 * which of them BLAS sees transposed (swapping the operands when the result is row-major),
 * clones an operand it cannot describe, fixes up degenerate leading dimensions
 * (normalize_last_dims) and calls the Fortran sgemm_ of the system BLAS (Debian: the
 * OpenMP OpenBLAS, the one emb links). torch_addmm below replays that decision for the
 * operands nn.Linear hands it and issues the same column-major call through CBLAS, so
 * OpenBLAS runs the same kernels on the same data in the same order: the results are
 * bit-identical to torch's when both use the same OpenBLAS with the same thread count.
 * ------------------------------------------------------------------------------------- */

/* A strided matrix view, as torch sees an operand (contiguous [r, c] has strides (c, 1)). */
typedef struct tmat {
    const float *p;
    int64_t size[2], stride[2];
} tmat;

static tmat tmat_of(const float *p, int64_t rows, int64_t cols) {
    tmat t = {p, {rows, cols}, {cols, 1}};
    return t;
}

static tmat tmat_t(tmat t) {
    tmat r = {t.p, {t.size[1], t.size[0]}, {t.stride[1], t.stride[0]}};
    return r;
}

static int64_t max1(int64_t v) {
    return v > 1 ? v : 1;
}

/* OpenBLAS (OpenMP build) sizes its team from the calling thread's OpenMP settings, as
 * torch.set_num_threads() sets them: emb's thread count is applied the same way for the
 * duration of the call (emb__blas_threads_begin, core/parallel.h). */
static bool blas_colmajor(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const float *a,
                          int64_t lda, const float *b, int64_t ldb, float beta, float *c,
                          int64_t ldc) {
    const int saved = emb__blas_threads_begin();
    bool ok = emb__sgemm_cblas_colmajor(ta, tb, m, n, k, 1.0f, a, lda, b, ldb, beta, c, ldc);
    emb__blas_threads_end(saved);
    return ok;
}

/* res [r0, r1] (contiguous) = m1 @ m2 + beta * res through torch's BLAS call. *done is
 * false (res untouched) when the build has no CBLAS, the reference kernels are forced, or
 * torch would not call BLAS either (sizes beyond int). Errors: EMB_ERR_NOMEM (the copy
 * torch makes of an operand BLAS cannot describe). */
static emb_status torch_addmm(tmat m1, tmat m2, float *res, int64_t r0, int64_t r1, float beta,
                              bool *done) {
    *done = false;
    if (emb__force_ref() || !emb__gemm_have_cblas()) return EMB_OK;
    if (r0 <= 0 || r1 <= 0 || m1.size[1] <= 0) return EMB_OK; /* the callers handle these */
    const int64_t rsz[2] = {r0, r1}, rst[2] = {r1, 1};
    bool tc;
    if (rst[0] == 1 && (rsz[1] == 1 || rst[1] >= max1(rsz[0]))) {
        tc = false;
    } else {
        tc = true; /* rst[1] == 1 and rst[0] == r1: the result is row-major */
        tmat t = m1;
        m1 = m2;
        m2 = t;
    }
    const int64_t m = rsz[tc ? 1 : 0], n = rsz[tc ? 0 : 1], k = m1.size[tc ? 0 : 1];
    float *copy[2] = {NULL, NULL};
    tmat *ops[2] = {&m1, &m2};
    bool trans[2];
    const int64_t lead[2] = {m, k}, other[2] = {k, n}; /* a: m then k; b: k then n */
    for (int i = 0; i < 2; i++) {
        tmat *x = ops[i];
        if (x->stride[tc ? 1 : 0] == 1 && x->stride[tc ? 0 : 1] >= max1(lead[i])) {
            trans[i] = false;
        } else if (x->stride[tc ? 0 : 1] == 1 && x->stride[tc ? 1 : 0] >= max1(other[i])) {
            trans[i] = true;
        } else {
            /* torch: transpose = !transpose_c; operand = clone(contiguous) */
            trans[i] = !tc;
            int64_t rows = x->size[0], cols = x->size[1];
            copy[i] = emb__malloc((size_t)(rows * cols) * sizeof(float));
            if (!copy[i]) {
                emb__free(copy[0]);
                return emb__error(EMB_ERR_NOMEM,
                                  "cannot allocate a %" PRId64 " x %" PRId64 " operand copy", rows,
                                  cols);
            }
            for (int64_t r = 0; r < rows; r++)
                for (int64_t c = 0; c < cols; c++)
                    copy[i][r * cols + c] = x->p[r * x->stride[0] + c * x->stride[1]];
            *x = tmat_of(copy[i], rows, cols);
        }
    }
    const bool ta = trans[0], tb = trans[1];
    int64_t lda = m1.stride[(ta == tc) ? 1 : 0], ldb = m2.stride[(tb == tc) ? 1 : 0];
    int64_t ldc = rst[tc ? 0 : 1];
    /* cpublas normalize_last_dims */
    if (n == 1) ldc = m;
    if (ta) {
        if (m == 1) lda = k;
    } else if (k == 1) {
        lda = m;
    }
    if (tb) {
        if (k == 1) ldb = n;
    } else if (n == 1) {
        ldb = k;
    }
    /* cpublas use_blas_gemm; otherwise torch runs its own loops (not reproduced: emb's
     * reference kernel then computes the product) */
    if (lda >= max1(ta ? k : m) && ldb >= max1(tb ? n : k) && ldc >= max1(m))
        *done = blas_colmajor(ta, tb, m, n, k, m1.p, lda, m2.p, ldb, beta, res, ldc);
    emb__free(copy[0]);
    emb__free(copy[1]);
    return EMB_OK;
}

emb_status emb_linear_create(int64_t in_features, int64_t out_features, bool bias,
                             emb_generator *gen, emb_linear **out) {
    if (!out) return emb__null("out");
    if (in_features < 0 || out_features < 0)
        return emb__error(EMB_ERR_INVALID,
                          "Trying to create tensor with negative dimension %" PRId64 ": [%" PRId64
                          ", %" PRId64 "] (Linear weight [out_features, "
                          "in_features])",
                          out_features < 0 ? out_features : in_features, out_features, in_features);
    int64_t numel, bytes;
    if (!emb__mul_i64(in_features, out_features, &numel) ||
        !emb__mul_i64(numel, (int64_t)sizeof(float), &bytes) || (uint64_t)bytes > SIZE_MAX)
        return emb__error(EMB_ERR_OVERFLOW,
                          "a Linear weight of %" PRId64 " x %" PRId64 " float32 values overflows",
                          out_features, in_features);
    emb_linear *lin = emb__malloc(sizeof *lin);
    if (!lin) return emb__error(EMB_ERR_NOMEM, "cannot allocate an emb_linear");
    memset(lin, 0, sizeof *lin);
    lin->in_features = in_features;
    lin->out_features = out_features;
    lin->has_bias = bias;
    lin->weight = emb__malloc((size_t)bytes);
    lin->bias = bias ? emb__malloc((size_t)out_features * sizeof(float)) : NULL;
    if (!lin->weight || (bias && !lin->bias)) {
        emb_linear_free(lin);
        return emb__error(EMB_ERR_NOMEM,
                          "cannot allocate the %" PRId64 " x %" PRId64 " Linear parameters",
                          out_features, in_features);
    }
    memset(lin->weight, 0, (size_t)bytes);
    if (bias) memset(lin->bias, 0, (size_t)out_features * sizeof(float));

    /* kaiming_uniform_(weight, a=sqrt(5)) with mode fan_in, leaky_relu, in the double
     * operations PyTorch's Python code performs (a**2 == 5.000000000000001). A zero-element
     * weight is left alone and draws nothing. */
    emb_tensor view;
    emb_status st = EMB_OK;
    if (numel > 0) {
        double a = sqrt(5.0);
        double gain = sqrt(2.0 / (1.0 + a * a));
        double std = gain / sqrt((double)in_features);
        double bound = sqrt(3.0) * std;
        int64_t shape[2] = {out_features, in_features};
        st = emb_tensor_init(&view, EMB_FLOAT32, lin->weight, 2, shape);
        if (!st) st = emb_uniform_(&view, -bound, bound, gen);
    }
    /* Bias: uniform in +-1/sqrt(fan_in) (0 when fan_in is 0); always draws out_features. */
    if (!st && bias && out_features > 0) {
        double bound = in_features > 0 ? 1.0 / sqrt((double)in_features) : 0.0;
        int64_t shape[1] = {out_features};
        st = emb_tensor_init(&view, EMB_FLOAT32, lin->bias, 1, shape);
        if (!st) st = emb_uniform_(&view, bound > 0.0 ? -bound : 0.0, bound, gen);
    }
    if (st) {
        emb_linear_free(lin);
        return st;
    }
    *out = lin;
    return EMB_OK;
}

void emb_linear_free(emb_linear *lin) {
    if (!lin) return;
    emb__free(lin->weight);
    emb__free(lin->bias);
    emb__free(lin);
}

int64_t emb_linear_in_features(const emb_linear *lin) {
    return lin ? lin->in_features : 0;
}
int64_t emb_linear_out_features(const emb_linear *lin) {
    return lin ? lin->out_features : 0;
}
bool emb_linear_has_bias(const emb_linear *lin) {
    return lin && lin->has_bias;
}

emb_status emb_linear_weight(emb_linear *lin, emb_tensor *view) {
    if (!lin) return emb__null("lin");
    if (!view) return emb__null("view");
    int64_t shape[2] = {lin->out_features, lin->in_features};
    return emb_tensor_init(view, EMB_FLOAT32, lin->weight, 2, shape);
}

emb_status emb_linear_bias(emb_linear *lin, emb_tensor *view) {
    if (!lin) return emb__null("lin");
    if (!view) return emb__null("view");
    if (!lin->has_bias)
        return emb__error(EMB_ERR_STATE, "this Linear layer was created with bias=false");
    int64_t shape[1] = {lin->out_features};
    return emb_tensor_init(view, EMB_FLOAT32, lin->bias, 1, shape);
}

/* ---------------------------------------------------------------------------------------
 * Forward and backward
 * ------------------------------------------------------------------------------------- */

/* Validates x against the layer; *rows = product of the leading dimensions. */
static emb_status check_x(const emb_linear *lin, const emb_tensor *x, int64_t *rows) {
    emb_status st = emb_tensor_check(x, "x");
    if (st) return st;
    if (x->dtype != EMB_FLOAT32)
        return emb__error(EMB_ERR_DTYPE,
                          "mat1 and mat2 must have the same dtype (x is %s, the Linear weight "
                          "float32)",
                          emb_dtype_name(x->dtype));
    if (x->ndim < 1)
        return emb__error(EMB_ERR_SHAPE,
                          "both arguments to matmul need to be at least 1D, but they are 0D and "
                          "2D");
    int64_t m = 1;
    for (int i = 0; i < x->ndim - 1; i++)
        if (!emb__mul_i64(m, x->shape[i], &m))
            return emb__error(EMB_ERR_OVERFLOW, "the number of rows of x overflows int64");
    int64_t k = x->shape[x->ndim - 1];
    if (k != lin->in_features)
        return emb__error(EMB_ERR_SHAPE,
                          "mat1 and mat2 shapes cannot be multiplied (%" PRId64 "x%" PRId64
                          " and %" PRId64 "x%" PRId64 ")",
                          m, k, lin->in_features, lin->out_features);
    *rows = m;
    return EMB_OK;
}

/* `t` must be float32 of shape x.shape[:-1] + [last]. */
static emb_status check_like_x(const emb_tensor *t, const char *what, const emb_tensor *x,
                               int64_t last) {
    int64_t shape[EMB_MAX_DIMS];
    for (int i = 0; i < x->ndim - 1; i++) shape[i] = x->shape[i];
    shape[x->ndim - 1] = last;
    return emb__check_f32_shape(t, what, x->ndim, shape);
}

static emb_status weight_overlap_error(const emb_linear *lin, const emb_tensor *t,
                                       const char *what) {
    size_t wb = (size_t)(lin->in_features * lin->out_features) * sizeof(float);
    size_t bb = lin->has_bias ? (size_t)lin->out_features * sizeof(float) : 0;
    size_t tb = emb_tensor_nbytes(t);
    if (emb__overlap(t->data, tb, lin->weight, wb) || emb__overlap(t->data, tb, lin->bias, bb))
        return emb__error(EMB_ERR_INVALID, "%s must not overlap the layer's parameters", what);
    return EMB_OK;
}

emb_status emb_linear_forward(const emb_linear *lin, const emb_tensor *x, emb_tensor *y) {
    if (!lin) return emb__null("lin");
    if (!x) return emb__null("x");
    if (!y) return emb__null("y");
    int64_t m;
    emb_status st = check_x(lin, x, &m);
    if (st) return st;
    if ((st = check_like_x(y, "y", x, lin->out_features))) return st;
    if (emb__tensors_overlap(y, x)) return emb__error(EMB_ERR_INVALID, "y must not overlap x");
    if ((st = weight_overlap_error(lin, y, "y"))) return st;

    const int64_t in = lin->in_features, out = lin->out_features;
    float *yd = y->data;
    if (m == 0 || out == 0) return EMB_OK;
    /* PyTorch's F.linear: 2-D and 3-D x go through addmm(bias, x, W^T): y starts as the
     * broadcast bias and gets x W^T added (beta 1); 1-D and >= 4-D x through matmul, then
     * y.add_(bias) (the sums differ when BLAS splits the inner dimension). */
    const bool fused = lin->has_bias && (x->ndim == 2 || x->ndim == 3);
    float beta = 0.0f;
    if (fused) {
        for (int64_t i = 0; i < m; i++)
            memcpy(yd + i * out, lin->bias, (size_t)out * sizeof(float));
        beta = 1.0f;
    }
    if (in == 0) {
        if (!lin->has_bias)
            memset(yd, 0, (size_t)(m * out) * sizeof(float));
        else if (!fused)
            for (int64_t i = 0; i < m; i++)
                memcpy(yd + i * out, lin->bias, (size_t)out * sizeof(float));
        return EMB_OK;
    }
    bool done;
    st = torch_addmm(tmat_of(x->data, m, in), tmat_t(tmat_of(lin->weight, out, in)), yd, m, out,
                     beta, &done);
    if (st) return st;
    if (!done) gemm(false, true, m, out, in, x->data, in, lin->weight, in, beta, yd, out);
    if (lin->has_bias && !fused)
        for (int64_t i = 0; i < m; i++)
            for (int64_t j = 0; j < out; j++) yd[i * out + j] = yd[i * out + j] + lin->bias[j];
    return EMB_OK;
}

/* ---------------------------------------------------------------------------------------
 * grad_bias: PyTorch 1.13's CPU float sum over the rows of grad_y, reproduced so that the
 * bias gradient is bit-identical to torch's (with one intra-op thread; torch splits long
 * reductions between threads). Two building blocks, both in float:
 *   cascade(v[0..n)): running sums in chunks of 2^p items (p = max(4, ceil(log2 n) / 4)),
 *     chunk sums carried up through four levels, the levels added at the end;
 *   ilp4(v[0..n)): four cascades over v[k], v[k+4], ... (k = 0..3, n/4 items each), the
 *     n % 4 leftover items added to the first, then the four added in order.
 * Column j of an [m, out] gradient uses, for out == 1, eight lanes v[l], v[l+8], ...
 * (each an ilp4) plus the m % 8 leftovers (when m >= 8; else ilp4); for 1 < out < 8,
 * cascade for columns in full groups of 4, ilp4 for the rest; for out >= 8, cascade for
 * columns in full groups of 32, ilp4 for the rest.
 * ------------------------------------------------------------------------------------- */

enum { COLS = 64 };

static int ceil_log2(int64_t n) {
    return n <= 1 ? 0 : 64 - __builtin_clzll((unsigned long long)(n - 1));
}

/* out[c] = cascade over i < n of base[i*row_stride + c], for c < ncols (<= COLS). */
static void cascade_cols(const float *base, int64_t row_stride, int64_t n, int ncols, float *out) {
    float acc[4][COLS];
    for (int l = 0; l < 4; l++)
        for (int c = 0; c < ncols; c++) acc[l][c] = 0.0f;
    int p = ceil_log2(n) / 4;
    if (p < 4) p = 4;
    const int64_t step = (int64_t)1 << p, mask = step - 1;
    int64_t i = 0;
    while (i + step <= n) {
        for (int64_t e = i + step; i < e; i++) {
            const float *row = base + i * row_stride;
            for (int c = 0; c < ncols; c++) acc[0][c] = acc[0][c] + row[c];
        }
        for (int l = 1; l < 4; l++) {
            for (int c = 0; c < ncols; c++) {
                acc[l][c] = acc[l][c] + acc[l - 1][c];
                acc[l - 1][c] = 0.0f;
            }
            if (i & (mask << (l * p))) break;
        }
    }
    for (; i < n; i++) {
        const float *row = base + i * row_stride;
        for (int c = 0; c < ncols; c++) acc[0][c] = acc[0][c] + row[c];
    }
    for (int c = 0; c < ncols; c++) out[c] = ((acc[0][c] + acc[1][c]) + acc[2][c]) + acc[3][c];
}

/* out[c] = ilp4 over i < n of base[i*row_stride + c]. */
static void ilp4_cols(const float *base, int64_t row_stride, int64_t n, int ncols, float *out) {
    float part[4][COLS];
    int64_t q = n / 4;
    for (int k = 0; k < 4; k++)
        cascade_cols(base + k * row_stride, 4 * row_stride, q, ncols, part[k]);
    for (int64_t i = 4 * q; i < n; i++) {
        const float *row = base + i * row_stride;
        for (int c = 0; c < ncols; c++) part[0][c] = part[0][c] + row[c];
    }
    for (int c = 0; c < ncols; c++) out[c] = ((part[0][c] + part[1][c]) + part[2][c]) + part[3][c];
}

/* Sums of columns j0 .. j0+w-1 (w <= COLS) of g [m, out], in PyTorch's order. */
static void column_sums(const float *g, int64_t m, int64_t out, int64_t j0, int w, float *s) {
    if (out == 1) {
        if (m < 8) {
            ilp4_cols(g, 1, m, 1, s);
        } else {
            int64_t nv = m / 8;
            float lanes[COLS];
            ilp4_cols(g, 8, nv, 8, lanes);
            float acc = 0.0f;
            for (int64_t i = 8 * nv; i < m; i++) acc = acc + g[i];
            for (int l = 0; l < 8; l++) acc = acc + lanes[l];
            s[0] = acc;
        }
    } else {
        const int64_t group = out < 8 ? 4 : 32;
        const int64_t cascaded = out / group * group; /* columns [0, cascaded) use cascade */
        int64_t j = j0, end = j0 + w;
        while (j < end) {
            int64_t stop = j < cascaded ? (cascaded < end ? cascaded : end) : end;
            if (j < cascaded)
                cascade_cols(g + j, out, m, (int)(stop - j), s + (j - j0));
            else
                ilp4_cols(g + j, out, m, (int)(stop - j), s + (j - j0));
            j = stop;
        }
    }
    for (int c = 0; c < w; c++) s[c] = 0.0f + s[c]; /* the sum is stored into a zeroed output */
}

/* grad_bias [out] += the column sums of grad_y [m, out], blocks of COLS columns [b0, b1). */
typedef struct bias_ctx {
    const float *gy;
    float *gb;
    int64_t m, out;
} bias_ctx;

static void bias_blocks(void *p, int64_t b0, int64_t b1, int ith) {
    (void)ith;
    const bias_ctx *x = p;
    for (int64_t b = b0; b < b1; b++) {
        float s[COLS];
        int64_t j0 = b * COLS, w = x->out - j0 < COLS ? x->out - j0 : COLS;
        column_sums(x->gy, x->m, x->out, j0, (int)w, s);
        for (int64_t j = 0; j < w; j++) x->gb[j0 + j] = x->gb[j0 + j] + s[j];
    }
}

emb_status emb_linear_backward(const emb_linear *lin, const emb_tensor *x, const emb_tensor *grad_y,
                               emb_tensor *grad_x, emb_tensor *grad_weight, emb_tensor *grad_bias) {
    if (!lin) return emb__null("lin");
    if (!x) return emb__null("x");
    if (!grad_y) return emb__null("grad_y");
    int64_t m;
    emb_status st = check_x(lin, x, &m);
    if (st) return st;
    const int64_t in = lin->in_features, out = lin->out_features;
    if ((st = check_like_x(grad_y, "grad_y", x, out))) return st;
    if (grad_x && (st = check_like_x(grad_x, "grad_x", x, in))) return st;
    if (grad_weight) {
        int64_t ws[2] = {out, in};
        if ((st = emb__check_f32_shape(grad_weight, "grad_weight", 2, ws))) return st;
    }
    if (grad_bias) {
        if (!lin->has_bias)
            return emb__error(EMB_ERR_STATE,
                              "grad_bias was given but this Linear layer has no bias");
        int64_t bs[1] = {out};
        if ((st = emb__check_f32_shape(grad_bias, "grad_bias", 1, bs))) return st;
    }
    /* Outputs must not share memory with the inputs, the parameters or each other. */
    emb_tensor *outs[3] = {grad_x, grad_weight, grad_bias};
    const char *names[3] = {"grad_x", "grad_weight", "grad_bias"};
    for (int i = 0; i < 3; i++) {
        if (!outs[i]) continue;
        if (emb__tensors_overlap(outs[i], x))
            return emb__error(EMB_ERR_INVALID, "%s must not overlap x", names[i]);
        if (emb__tensors_overlap(outs[i], grad_y))
            return emb__error(EMB_ERR_INVALID, "%s must not overlap grad_y", names[i]);
        if ((st = weight_overlap_error(lin, outs[i], names[i]))) return st;
        for (int j = 0; j < i; j++)
            if (emb__tensors_overlap(outs[i], outs[j]))
                return emb__error(EMB_ERR_INVALID, "%s must not overlap %s", names[i], names[j]);
    }

    const float *xd = x->data, *gy = grad_y->data;
    /* grad_weight [out, in] += grad_y^T [out, m] x [m, in], computed first into a fresh
     * buffer (autograd's mm into a new tensor, then .grad += it): the only allocation. */
    float *gw_new = NULL;
    if (grad_weight && out > 0 && in > 0 && m > 0) {
        gw_new = emb__malloc((size_t)(out * in) * sizeof(float));
        if (!gw_new)
            return emb__error(EMB_ERR_NOMEM,
                              "cannot allocate a %" PRId64 " x %" PRId64 " weight gradient", out,
                              in);
    }
    /* grad_x [m, in] = grad_y [m, out] W [out, in] (overwritten). autograd's
     * mm_mat1_backward: grad_y.mm(W), or (W^T.mm(grad_y^T))^T when x is "column-major"
     * (a 1 x 1 x). */
    if (grad_x && m > 0 && in > 0) {
        if (out == 0) {
            memset(grad_x->data, 0, (size_t)(m * in) * sizeof(float));
        } else {
            bool done;
            tmat wt = tmat_of(lin->weight, out, in), g = tmat_of(gy, m, out);
            if (m == 1 && in == 1)
                st = torch_addmm(tmat_t(wt), tmat_t(g), grad_x->data, in, m, 0.0f, &done);
            else
                st = torch_addmm(g, wt, grad_x->data, m, in, 0.0f, &done);
            if (st) {
                emb__free(gw_new);
                return st;
            }
            if (!done)
                gemm(false, false, m, in, out, gy, out, lin->weight, in, 0.0f, grad_x->data, in);
        }
    }
    /* mm_mat2_backward for the column-major W^T: (grad_y^T.mm(x))^T^T = grad_y^T x */
    if (gw_new) {
        bool done;
        st = torch_addmm(tmat_t(tmat_of(gy, m, out)), tmat_of(xd, m, in), gw_new, out, in, 0.0f,
                         &done);
        if (st) {
            emb__free(gw_new);
            return st;
        }
        if (!done) gemm(true, false, out, in, m, gy, out, xd, in, 0.0f, gw_new, in);
        float *gw = grad_weight->data;
        for (int64_t i = 0; i < out * in; i++) gw[i] = gw[i] + gw_new[i];
        emb__free(gw_new);
    }
    /* grad_bias [out] += column sums of grad_y, summed in PyTorch's order (below), then
     * added to grad_bias once, as autograd accumulates a fresh gradient into .grad. */
    if (grad_bias && out > 0 && m > 0) {
        float *gb = grad_bias->data;
        int64_t nblocks = (out + COLS - 1) / COLS;
        int nt = emb__threads_for(m * out, 1 << 15);
        if (nt > nblocks) nt = (int)nblocks;
        bias_ctx bc = {gy, gb, m, out};
        emb__parallel_for(nt, nblocks, bias_blocks, &bc);
    }
    return EMB_OK;
}
