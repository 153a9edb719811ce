/* src/nn/loss_ce.c: F.cross_entropy, F.nll_loss and F.log_softmax, forward and backward.
 *
 * Cross-entropy = nll_loss(log_softmax(logits)), with PyTorch 1.13's CPU arithmetic:
 *
 * log_softmax: kernels/softmax.h (SLEEF's exp/log in torch's lane order on AVX2).
 * nll_loss (LossNLL.cpp, nll_loss_out_frame), in float:
 *   none:     out[i] = -logp[i][t_i] * (weight ? w[t_i] : 1), 0 where t_i is ignored
 *   sum/mean: over the kept rows in order, loss[0] -= logp[i][t_i] (* w[t_i]),
 *             wsum[0] += w[t_i], then a cascade of 8 levels: after row b, while
 *             (b & (mask << j*p)) == 0 for j = 0..6, level j+1 += level j and level j = 0
 *             (p = max(4, ceil(log2 N) / 8), mask = 2^p - 1); the levels are summed from
 *             0 in order; total_weight = wsum (weights) or (float)kept; mean divides.
 * label_smoothing > 0 (cross_entropy_loss_label_smoothing): with a = (float)(1 - ls) and
 *   b = (float)(ls / C), loss = a * nll + ret * b where smooth[i] = -sum_c(logp[i][c]
 *   (* w[c])) (torch's row sum order), 0 for ignored rows, and ret = smooth (none),
 *   sum(smooth) (sum), the mean of the kept rows' values, compacted (mean), resp.
 *   sum(smooth) / sum(w[t_i] over kept rows) (mean with weights), every sum in the order
 *   of torch's CPU sum (emb__torch_sum_f32).
 * Backward is autograd's chain over the same graph: gn = g * (1 - ls), gr = g * (ls / C)
 *   with the scalar a double 0-d tensor (a 0-d g is promoted to double and rounded back;
 *   a [N] g stays float);
 *   nll: gl[i][t_i] = -w * gn[i] (none) or w * -(gn / total_weight) (mean), w * -gn (sum);
 *   smoothing: gl[i][c] += (-(gr / kept or gr[i], 0 if ignored)) (* w[c]);
 *   log_softmax backward of gl (kernels/softmax.h).
 * Rows are independent in log_softmax and its backward, which emb splits between threads;
 * the reductions run in torch's sequential order, so results never depend on the thread
 * count. (torch splits a sum of more than 32768 values between its threads: the
 * label_smoothing sums over more than 32768 rows match torch with one intra-op thread.) */
#include "loss_internal.h"
#include "kernels/dispatch.h"
#include "kernels/softmax.h"

#include <inttypes.h>
#include <string.h>

static int ceil_log2_i64(int64_t n) {
    return n <= 1 ? 0 : 64 - __builtin_clzll((unsigned long long)(n - 1));
}

typedef struct ce_shape {
    int64_t n, c, inner; /* logits [N, C, inner...]; inner = 1 for [N, C] and [C] */
    bool batched;        /* rank >= 2 (else [C] with a 0-d target) */
    bool spatial;        /* rank >= 3: torch's nll_loss2d and log_softmax over dim 1 */
    int none_ndim;
    int64_t none_shape[EMB_MAX_DIMS];
} ce_shape;

static const char *torch_scalar_name(emb_dtype d) {
    switch (d) {
    case EMB_INT32:
        return "Int";
    case EMB_INT16:
        return "Short";
    case EMB_INT8:
        return "Char";
    case EMB_UINT8:
        return "Byte";
    case EMB_BOOL:
        return "Bool";
    default:
        return emb_dtype_name(d);
    }
}

/* Validates logits/target/options (and the class weight of opts) for cross_entropy or
 * nll_loss (`op`). */
static emb_status ce_check(const emb_tensor *logits, const emb_tensor *target,
                           const emb_loss_options *opts, const char *op, const char *xname,
                           emb_loss_options *o, ce_shape *s) {
    emb_status st = emb__loss_check_f32(logits, xname);
    if (st) return st;
    if (!target) return emb__null("target");
    if ((st = emb_tensor_check(target, "target"))) return st;
    if ((st = emb__loss_read_opts(opts, true, o))) return st;
    if (strcmp(op, "nll_loss") == 0 && o->label_smoothing != 0.0)
        return emb__error(EMB_ERR_INVALID,
                          "nll_loss has no label_smoothing (got %g); use cross_entropy",
                          o->label_smoothing);
    char buf[300], buf2[300];
    if (logits->ndim < 1)
        return emb__error(EMB_ERR_SHAPE,
                          "%s: %s must be [N, C, d1, ...], [N, C] or [C], got "
                          "shape %s",
                          op, xname, emb__shape_fmt(buf, sizeof buf, logits->ndim, logits->shape));
    if (target->dtype != EMB_INT64) {
        if (target->dtype == EMB_FLOAT32 || target->dtype == EMB_FLOAT64 ||
            target->dtype == EMB_FLOAT16 || target->dtype == EMB_BFLOAT16)
            return emb__error(EMB_ERR_DTYPE,
                              "%s: target must hold int64 class indices, got %s "
                              "(class-probability targets are not supported)",
                              op, emb_dtype_name(target->dtype));
        return emb__error(EMB_ERR_DTYPE,
                          "expected scalar type Long but found %s (%s: target must be int64)",
                          torch_scalar_name(target->dtype), op);
    }
    s->batched = logits->ndim >= 2;
    s->spatial = logits->ndim >= 3;
    s->inner = 1;
    if (s->batched) {
        s->n = logits->shape[0];
        s->c = logits->shape[1];
        if ((target->ndim >= 1 && target->shape[0] != s->n) ||
            (target->ndim == 0 && logits->ndim == 2))
            return emb__error(EMB_ERR_SHAPE,
                              "Expected input batch_size (%" PRId64
                              ") to match target batch_size (%" PRId64 ").",
                              s->n, target->ndim ? target->shape[0] : 0);
        if (logits->ndim == 2 && target->ndim > 1)
            return emb__error(EMB_ERR_SHAPE,
                              "0D or 1D target tensor expected, multi-target not supported "
                              "(%s: target of shape %s)",
                              op, emb__shape_fmt(buf, sizeof buf, target->ndim, target->shape));
        s->none_ndim = logits->ndim - 1;
        s->none_shape[0] = s->n;
        bool same = target->ndim == logits->ndim - 1;
        for (int i = 2; i < logits->ndim; i++) {
            s->none_shape[i - 1] = logits->shape[i];
            if (!emb__mul_i64(s->inner, logits->shape[i], &s->inner))
                return emb__error(EMB_ERR_OVERFLOW, "%s: the spatial size of %s overflows", op,
                                  emb__shape_fmt(buf, sizeof buf, logits->ndim, logits->shape));
            if (same && target->shape[i - 1] != logits->shape[i]) same = false;
        }
        if (!same && logits->ndim == 4 && target->ndim != 3)
            return emb__error(EMB_ERR_SHAPE,
                              "only batches of spatial targets supported (3D tensors) but got "
                              "targets of dimension: %d",
                              target->ndim);
        if (!same && logits->ndim == 4) /* torch's nll_loss2d message, verbatim */
            return emb__error(EMB_ERR_SHAPE, "size mismatch (got input: %s , target: %s",
                              emb__shape_fmt(buf, sizeof buf, logits->ndim, logits->shape),
                              emb__shape_fmt(buf2, sizeof buf2, target->ndim, target->shape));
        if (!same)
            return emb__error(EMB_ERR_SHAPE, "Expected target size %s, got %s (%s: %s %s)",
                              emb__shape_fmt(buf, sizeof buf, s->none_ndim, s->none_shape),
                              emb__shape_fmt(buf2, sizeof buf2, target->ndim, target->shape), op,
                              xname,
                              emb__shape_fmt((char[300]){0}, 300, logits->ndim, logits->shape));
    } else {
        s->n = 1;
        s->c = logits->shape[0];
        if (target->ndim != 0)
            return emb__error(EMB_ERR_SHAPE, "size mismatch (got input: %s, target: %s)",
                              emb__shape_fmt(buf, sizeof buf, logits->ndim, logits->shape),
                              emb__shape_fmt(buf2, sizeof buf2, target->ndim, target->shape));
        s->none_ndim = 0;
    }
    if (o->weight) {
        if ((st = emb__loss_check_f32(o->weight, "weight"))) return st;
        if (o->weight->ndim != 1 || o->weight->shape[0] != s->c)
            return emb__error(EMB_ERR_SHAPE,
                              "weight tensor should be defined either for all %" PRId64
                              " classes or no classes but got weight tensor of shape: %s",
                              s->c,
                              emb__shape_fmt(buf, sizeof buf, o->weight->ndim, o->weight->shape));
    }
    const int64_t *t = target->data;
    const int64_t nt = emb_tensor_numel(target);
    for (int64_t i = 0; i < nt; i++) {
        if (t[i] == o->ignore_index) continue;
        if (t[i] < 0 || t[i] >= s->c)
            return emb__error(EMB_ERR_INDEX,
                              "Target %" PRId64 " is out of bounds. (position %" PRId64
                              "; classes are [0, %" PRId64 "), ignore_index is %" PRId64 ")",
                              t[i], i, s->c, o->ignore_index);
    }
    return EMB_OK;
}

/* Work estimate n * c, saturating (c may be huge when n is 0). */
static int64_t work_of(int64_t n, int64_t c) {
    int64_t w;
    return emb__mul_i64(n, c > 0 ? c : 1, &w) ? w : INT64_MAX;
}

/* log_softmax of slices [r0, r1) of n slices of c * inner floats: over the last dimension
 * (inner 1, dim false) or over the middle one of [n, c, inner] (dim true, torch's kernel for
 * a dimension that is not the last, with share ith's scratch); forward (gy NULL: out =
 * f(x)) or backward (out = f'(gy, y)). */
typedef struct lsm_ctx {
    emb__log_softmax_kernels k;
    const float *x, *gy, *y;
    float *out;
    int64_t c, inner;
    bool dim;
    float *scratch;
    int64_t per;
} lsm_ctx;

static void lsm_range(void *p, int64_t r0, int64_t r1, int ith) {
    const lsm_ctx *l = p;
    const int64_t slab = l->c * l->inner, o = r0 * slab;
    if (r0 >= r1) return;
    if (!l->dim) {
        if (l->gy)
            l->k.bwd(l->gy + o, l->y + o, l->out + o, r1 - r0, l->c);
        else
            l->k.fwd(l->x + o, l->out + o, r1 - r0, l->c);
        return;
    }
    float *sc = l->scratch + (int64_t)ith * l->per;
    if (l->gy)
        l->k.dim_bwd(l->gy + o, l->y + o, l->out + o, r1 - r0, l->c, l->inner, sc);
    else
        l->k.dim_fwd(l->x + o, l->out + o, r1 - r0, l->c, l->inner, sc);
}

/* The number of shares for n slices of `work` floats in all. */
static int lsm_threads(int64_t n, int64_t work) {
    int nt = emb__threads_for(work, 1 << 14);
    if (nt > n) nt = (int)n;
    return nt < 1 ? 1 : nt;
}

/* log_softmax over the rows of x [n, c] into y, rows split between threads. */
static void log_softmax_rows(const float *x, float *y, int64_t n, int64_t c) {
    if (n <= 0 || c <= 0) return;
    lsm_ctx l = {emb__log_softmax_pick(), x, NULL, NULL, y, c, 1, false, NULL, 0};
    emb__parallel_for(lsm_threads(n, work_of(n, c)), n, lsm_range, &l);
}

static void log_softmax_backward_rows(const float *gy, const float *y, float *gx, int64_t n,
                                      int64_t c) {
    if (n <= 0 || c <= 0) return;
    lsm_ctx l = {emb__log_softmax_pick(), NULL, gy, y, gx, c, 1, false, NULL, 0};
    emb__parallel_for(lsm_threads(n, work_of(n, c)), n, lsm_range, &l);
}

/* log_softmax over dim 1 of [n, c, inner] (torch's kernel for a dimension that is not the
 * last), forward (gy NULL: y = f(x)) or backward (gx = f'(gy, y)); the n slices are split
 * between threads, each with its own scratch. */
static emb_status log_softmax_dim(const float *x, const float *gy, const float *y, float *out,
                                  int64_t n, int64_t c, int64_t inner) {
    if (n <= 0 || c <= 0 || inner <= 0) return EMB_OK;
    const int nt = lsm_threads(n, work_of(work_of(n, c), inner));
    const int64_t per = emb__log_softmax_dim_scratch(c);
    float *scratch = NULL;
    emb_status st = emb__loss_alloc_rows(nt, per, &scratch);
    if (st) return st;
    lsm_ctx l = {emb__log_softmax_pick(), x, gy, y, out, c, inner, true, scratch, per};
    emb__parallel_for(nt, n, lsm_range, &l);
    emb__free(scratch);
    return EMB_OK;
}

/* log_softmax over the class dimension of logits, as torch picks its kernel. */
static emb_status ce_log_softmax(const ce_shape *s, const float *x, float *logp) {
    if (s->spatial) return log_softmax_dim(x, NULL, NULL, logp, s->n, s->c, s->inner);
    log_softmax_rows(x, logp, s->n, s->c);
    return EMB_OK;
}

static emb_status ce_log_softmax_backward(const ce_shape *s, const float *gl, const float *logp,
                                          float *gx) {
    if (s->spatial) return log_softmax_dim(NULL, gl, logp, gx, s->n, s->c, s->inner);
    log_softmax_backward_rows(gl, logp, gx, s->n, s->c);
    return EMB_OK;
}

/* Index of logp[b][cls][p] in [n, c, inner]. */
static inline int64_t lp_at(int64_t b, int64_t cls, int64_t p, int64_t c, int64_t inner) {
    return (b * c + cls) * inner + p;
}

/* nll_loss forward of logp [n, c, inner] (see the section comment; torch's nll_loss and
 * nll_loss2d run the same loops). For none, out[n * inner]; else out[0] and
 * *total_weight. */
static void nll_forward(const float *logp, const int64_t *t, const float *w, int64_t n, int64_t c,
                        int64_t inner, int64_t ignore, emb_reduction red, float *out,
                        float *total_weight) {
    const int64_t numiter = n * inner;
    if (red == EMB_REDUCTION_NONE) {
        for (int64_t i = 0; i < numiter; i++) {
            if (t[i] == ignore) {
                out[i] = 0.0f;
                continue;
            }
            float wt = w ? w[t[i]] : 1.0f;
            out[i] = -logp[lp_at(i / inner, t[i], i % inner, c, inner)] * wt;
        }
        return;
    }
    enum { LEVELS = 8 };
    int p = ceil_log2_i64(numiter) / LEVELS;
    if (p < 4) p = 4;
    const int64_t mask = ((int64_t)1 << p) - 1;
    float wsum[LEVELS] = {0}, lsum[LEVELS] = {0};
    int64_t ignored = 0;
    for (int64_t b = 0; b < numiter; b++) {
        if (t[b] == ignore) {
            ignored++;
            continue;
        }
        float v = logp[lp_at(b / inner, t[b], b % inner, c, inner)];
        if (w) {
            float wt = w[t[b]];
            lsum[0] = lsum[0] - v * wt;
            wsum[0] = wsum[0] + wt;
        } else {
            lsum[0] = lsum[0] - v;
        }
        for (int j = 0; j + 1 < LEVELS; j++) {
            if (b & (mask << (j * p))) break;
            wsum[j + 1] = wsum[j + 1] + wsum[j];
            lsum[j + 1] = lsum[j + 1] + lsum[j];
            wsum[j] = 0.0f;
            lsum[j] = 0.0f;
        }
    }
    float tw = 0.0f, total = 0.0f;
    if (w)
        for (int j = 0; j < LEVELS; j++) tw = tw + wsum[j];
    else
        tw = (float)(numiter - ignored);
    for (int j = 0; j < LEVELS; j++) total = total + lsum[j];
    if (red == EMB_REDUCTION_MEAN) total = total / tw;
    out[0] = total;
    *total_weight = tw;
}

/* The reduction nll_loss's CPU kernel runs: unbatched input never takes the none path. */
static inline emb_reduction nll_red(emb_reduction red, bool batched) {
    return red == EMB_REDUCTION_NONE && !batched ? EMB_REDUCTION_SUM : red;
}

/* The label-smoothing pieces: smooth[b, p] = -sum over classes of logp[b, :, p] (* w),
 * in torch's order for sum(dim=1) (a row sum for [N, C], a column sum over the classes of
 * each [C, inner] slab otherwise), 0 when ignored. */
static emb_status smooth_rows(const float *logp, const int64_t *t, const float *w, int64_t n,
                              int64_t c, int64_t inner, int64_t ignore, float *smooth) {
    float *tmp = NULL;
    if (w && c > 0) {
        emb_status st = emb__loss_alloc_rows(work_of(n, c), inner, &tmp);
        if (st) return st;
    }
    float *col = NULL;
    if (inner > 1) {
        emb_status st = emb__loss_alloc_rows(1, inner, &col);
        if (st) {
            emb__free(tmp);
            return st;
        }
    }
    const int64_t slab = c * inner;
    if (c <= 0) { /* no classes: every target is ignored (checked), the sums are empty */
        for (int64_t i = 0; i < n * inner; i++) smooth[i] = 0.0f;
        emb__free(tmp);
        emb__free(col);
        return EMB_OK;
    }
    for (int64_t b = 0; b < n; b++) {
        const float *src = logp + b * slab;
        if (w && c > 0) {
            float *dst = tmp + b * slab;
            for (int64_t j = 0; j < c; j++)
                for (int64_t p = 0; p < inner; p++) dst[j * inner + p] = src[j * inner + p] * w[j];
            src = dst;
        }
        if (inner == 1) {
            float s = c > 0 ? emb__torch_sum_f32(src, c) : 0.0f;
            smooth[b] = t[b] == ignore ? 0.0f : -s;
        } else {
            emb__torch_colsum_f32(src, c, inner, inner, col);
            for (int64_t p = 0; p < inner; p++)
                smooth[b * inner + p] = t[b * inner + p] == ignore ? 0.0f : -col[p];
        }
    }
    emb__free(tmp);
    emb__free(col);
    return EMB_OK;
}

/* The denominator of the smoothing mean with weights: the torch sum of w[t_i] over the kept
 * targets, in order. */
static emb_status smooth_weight_sum(const int64_t *t, const float *w, int64_t count, int64_t ignore,
                                    float *den) {
    int64_t kept = 0;
    for (int64_t i = 0; i < count; i++) kept += t[i] != ignore;
    float *g = NULL;
    emb_status st = emb__loss_alloc_rows(kept, 1, &g);
    if (st) return st;
    int64_t k = 0;
    for (int64_t i = 0; i < count; i++)
        if (t[i] != ignore) g[k++] = w[t[i]];
    *den = emb__torch_sum_f32(g, kept);
    emb__free(g);
    return EMB_OK;
}

/* Forward of cross_entropy (with_softmax) or nll_loss (input already log-probabilities). */
static emb_status ce_forward_impl(const emb_tensor *x_t, const emb_tensor *target,
                                  const emb_loss_options *opts, emb_tensor *loss,
                                  bool with_softmax) {
    const char *op = with_softmax ? "cross_entropy" : "nll_loss";
    const char *xname = with_softmax ? "logits" : "input";
    emb_loss_options o;
    ce_shape s;
    emb_status st = ce_check(x_t, target, opts, op, xname, &o, &s);
    if (st) return st;
    if (!loss) return emb__null("loss");
    if ((st = emb__loss_check_shape(loss, "loss", o.reduction, s.none_ndim, s.none_shape)))
        return st;
    if ((st = emb__loss_check_no_overlap(loss, "loss", x_t, xname, target, "target", o.weight,
                                         "weight", NULL, NULL)))
        return st;
    const bool smoothing = with_softmax && o.label_smoothing > 0.0;
    const int64_t n = s.n, c = s.c, inner = s.inner, count = emb_tensor_numel(target);
    const float *w = o.weight ? o.weight->data : NULL;
    const int64_t *t = target->data;
    float *logp_buf = NULL, *nll = NULL, *smooth = NULL;
    const float *logp = x_t->data;
    if (with_softmax && emb_tensor_numel(x_t) > 0) {
        if ((st = emb__loss_alloc_rows(work_of(n, c), inner, &logp_buf))) return st;
        if ((st = ce_log_softmax(&s, x_t->data, logp_buf))) goto done;
        logp = logp_buf;
    }
    /* nll into nll[count] (none) or nll[0] */
    if ((st = emb__loss_alloc_rows(o.reduction == EMB_REDUCTION_NONE ? count : 1, 1, &nll)))
        goto done;
    if (smoothing && (st = emb__loss_alloc_rows(count, 1, &smooth))) goto done;
    float tw = 0.0f;
    /* torch's nll_loss takes its unreduced path for batched input only: an unbatched none
     * is computed as a sum over its one row (0 - v, never -v: +0 where -v is -0) */
    nll_forward(logp, t, w, n, c, inner, o.ignore_index, nll_red(o.reduction, s.batched), nll, &tw);
    float *out = loss->data;
    if (!smoothing) {
        if (o.reduction == EMB_REDUCTION_NONE) {
            if (count > 0) memcpy(out, nll, (size_t)count * sizeof(float));
        } else {
            out[0] = nll[0];
        }
        goto done;
    }
    if ((st = smooth_rows(logp, t, w, n, c, inner, o.ignore_index, smooth))) goto done;
    const float a = (float)(1.0 - o.label_smoothing);
    const float b = (float)(o.label_smoothing / (double)c);
    if (o.reduction == EMB_REDUCTION_NONE) {
        for (int64_t i = 0; i < count; i++) out[i] = a * nll[i] + smooth[i] * b;
    } else {
        float ret;
        if (o.reduction == EMB_REDUCTION_MEAN && !w) {
            /* torch: smooth_loss.masked_select(~ignore_mask).mean(): the kept values,
             * compacted, summed, divided by their count */
            int64_t kept = 0;
            for (int64_t i = 0; i < count; i++)
                if (t[i] != o.ignore_index) smooth[kept++] = smooth[i];
            ret = emb__torch_sum_f32(smooth, kept) / (float)kept;
        } else {
            ret = emb__torch_sum_f32(smooth, count);
            if (o.reduction == EMB_REDUCTION_MEAN) {
                float den;
                if ((st = smooth_weight_sum(t, w, count, o.ignore_index, &den))) goto done;
                ret = ret / den;
            }
        }
        out[0] = a * nll[0] + ret * b;
    }
done:
    emb__free(logp_buf);
    emb__free(nll);
    emb__free(smooth);
    return st;
}

/* Autograd's backward of `scalar * loss` (MulBackward1): grad * scalar where the scalar is
 * a 0-d double tensor. A 0-d grad (mean, sum, an unbatched none) promotes with it to
 * double and is rounded back to float; a grad with dimensions stays float32. */
static inline float scale_grad(float g, double k, bool zero_dim) {
    return zero_dim ? (float)((double)g * k) : g * (float)k;
}

static emb_status ce_backward_impl(const emb_tensor *x_t, const emb_tensor *target,
                                   const emb_loss_options *opts, const emb_tensor *grad_loss,
                                   emb_tensor *grad_x, bool with_softmax) {
    const char *op = with_softmax ? "cross_entropy" : "nll_loss";
    const char *xname = with_softmax ? "logits" : "input";
    const char *gname = with_softmax ? "grad_logits" : "grad_input";
    emb_loss_options o;
    ce_shape s;
    emb_status st = ce_check(x_t, target, opts, op, xname, &o, &s);
    if (st) return st;
    if (!grad_loss) return emb__null("grad_loss");
    if ((st =
             emb__loss_check_shape(grad_loss, "grad_loss", o.reduction, s.none_ndim, s.none_shape)))
        return st;
    if (!grad_x) return emb__null(gname);
    if ((st = emb__check_f32_shape(grad_x, gname, x_t->ndim, x_t->shape))) return st;
    if ((st = emb__loss_check_no_overlap(grad_x, gname, x_t, xname, target, "target", grad_loss,
                                         "grad_loss", o.weight, "weight")))
        return st;
    const bool smoothing = with_softmax && o.label_smoothing > 0.0;
    const int64_t n = s.n, c = s.c, inner = s.inner, ignore = o.ignore_index;
    const int64_t count = emb_tensor_numel(target), numel = emb_tensor_numel(x_t);
    const float *w = o.weight ? o.weight->data : NULL;
    const int64_t *t = target->data;
    const float *g = grad_loss->data;
    const emb_reduction red = o.reduction;
    float *logp = NULL, *gl = NULL;
    if (numel == 0) return EMB_OK; /* grad_x is empty */
    if (with_softmax) {
        if ((st = emb__loss_alloc_rows(numel, 1, &logp))) return st;
        if ((st = emb__loss_alloc_rows(numel, 1, &gl))) goto done;
        if ((st = ce_log_softmax(&s, x_t->data, logp))) goto done;
    } else {
        gl = grad_x->data; /* nll_loss: the gradient is written in place */
    }
    memset(gl, 0, (size_t)numel * sizeof(float));
    /* nll_loss backward */
    const double ad = 1.0 - o.label_smoothing, bd = o.label_smoothing / (double)c;
    if (nll_red(red, s.batched) == EMB_REDUCTION_NONE) {
        for (int64_t i = 0; i < count; i++) {
            if (t[i] == ignore) continue;
            float gn = smoothing ? scale_grad(g[i], ad, false) : g[i];
            float wt = w ? w[t[i]] : 1.0f;
            gl[lp_at(i / inner, t[i], i % inner, c, inner)] = -wt * gn;
        }
    } else {
        float grad = smoothing ? scale_grad(g[0], ad, true) : g[0];
        if (red == EMB_REDUCTION_MEAN) {
            /* total_weight as the forward computes it */
            float tw = 0.0f, dummy;
            nll_forward(with_softmax ? logp : x_t->data, t, w, n, c, inner, ignore, red, &dummy,
                        &tw);
            grad = grad / tw;
        }
        grad = -grad;
        for (int64_t i = 0; i < count; i++) {
            if (t[i] == ignore) continue;
            gl[lp_at(i / inner, t[i], i % inner, c, inner)] = w ? w[t[i]] * grad : grad;
        }
    }
    if (smoothing) {
        float den = 1.0f;
        if (red == EMB_REDUCTION_MEAN) {
            if (w) {
                if ((st = smooth_weight_sum(t, w, count, ignore, &den))) goto done;
            } else {
                int64_t kept = 0;
                for (int64_t i = 0; i < count; i++) kept += t[i] != ignore;
                den = (float)kept;
            }
        }
        for (int64_t i = 0; i < count; i++) {
            float gr = red == EMB_REDUCTION_NONE ? scale_grad(g[i], bd, s.none_ndim == 0)
                                                 : scale_grad(g[0], bd, true);
            if (red == EMB_REDUCTION_MEAN) gr = gr / den;
            float gm = t[i] == ignore ? 0.0f : gr;
            float ng = -gm;
            const int64_t b = i / inner, p = i % inner;
            for (int64_t j = 0; j < c; j++) {
                float *e = gl + lp_at(b, j, p, c, inner);
                *e = *e + (w ? ng * w[j] : ng);
            }
        }
    }
    if (with_softmax) st = ce_log_softmax_backward(&s, gl, logp, grad_x->data);
done:
    emb__free(logp);
    if (with_softmax) emb__free(gl);
    return st;
}

emb_status emb_cross_entropy_forward(const emb_tensor *logits, const emb_tensor *target,
                                     const emb_loss_options *opts, emb_tensor *loss) {
    return ce_forward_impl(logits, target, opts, loss, true);
}

emb_status emb_cross_entropy_backward(const emb_tensor *logits, const emb_tensor *target,
                                      const emb_loss_options *opts, const emb_tensor *grad_loss,
                                      emb_tensor *grad_logits) {
    return ce_backward_impl(logits, target, opts, grad_loss, grad_logits, true);
}

emb_status emb_nll_loss_forward(const emb_tensor *input, const emb_tensor *target,
                                const emb_loss_options *opts, emb_tensor *loss) {
    return ce_forward_impl(input, target, opts, loss, false);
}

emb_status emb_nll_loss_backward(const emb_tensor *input, const emb_tensor *target,
                                 const emb_loss_options *opts, const emb_tensor *grad_loss,
                                 emb_tensor *grad_input) {
    return ce_backward_impl(input, target, opts, grad_loss, grad_input, false);
}

/* log_softmax's input or output `t` (called `name`): float32 with at least one dimension;
 * `why` ends the message of a tensor without one. */
static emb_status check_log_softmax_arg(const emb_tensor *t, const char *name, const char *why) {
    emb_status st = emb__loss_check_f32(t, name);
    if (st || t->ndim >= 1) return st;
    char buf[300];
    return emb__error(EMB_ERR_SHAPE,
                      "log_softmax: %s must have at least one dimension%s, got shape %s", name, why,
                      emb__shape_fmt(buf, sizeof buf, t->ndim, t->shape));
}

emb_status emb_log_softmax_forward(const emb_tensor *x, emb_tensor *y) {
    emb_status st = check_log_softmax_arg(x, "x", " (the classes are its last)");
    if (st) return st;
    if (!y) return emb__null("y");
    if ((st = emb__check_f32_shape(y, "y", x->ndim, x->shape))) return st;
    if (emb__tensors_overlap(y, x)) return emb__error(EMB_ERR_INVALID, "y must not overlap x");
    int64_t c = x->shape[x->ndim - 1], n = c > 0 ? emb_tensor_numel(x) / c : 0;
    log_softmax_rows(x->data, y->data, n, c);
    return EMB_OK;
}

emb_status emb_log_softmax_backward(const emb_tensor *y, const emb_tensor *grad_y,
                                    emb_tensor *grad_x) {
    emb_status st = check_log_softmax_arg(y, "y", "");
    if (st) return st;
    if (!grad_y) return emb__null("grad_y");
    if ((st = emb__check_f32_shape(grad_y, "grad_y", y->ndim, y->shape))) return st;
    if (!grad_x) return emb__null("grad_x");
    if ((st = emb__check_f32_shape(grad_x, "grad_x", y->ndim, y->shape))) return st;
    if ((st = emb__loss_check_no_overlap(grad_x, "grad_x", y, "y", grad_y, "grad_y", NULL, NULL,
                                         NULL, NULL)))
        return st;
    int64_t c = y->shape[y->ndim - 1], n = c > 0 ? emb_tensor_numel(y) / c : 0;
    log_softmax_backward_rows(grad_y->data, y->data, grad_x->data, n, c);
    return EMB_OK;
}
