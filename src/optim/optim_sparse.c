/* src/optim/optim_sparse.c: steps with a sparse row gradient (emb_optimizer_step_sparse,
 * and the sparse step the fused and Hogwild calls share): PyTorch's sparse semantics for SGD
 * (entries added in order; with momentum PyTorch's sparse buffer, grown by merging),
 * Adagrad and SparseAdam (coalesce, then one update per unique row). Threads own row ranges
 * or sorted-entry ranges aligned to rows, so the bits do not depend on the thread count. */
#include "optim_internal.h"
#include "kernels/argsort.h"
#include "kernels/dispatch.h"
#include "nn/nn_face.h"

#include <inttypes.h>
#include <string.h>

/* Float operations per thread below which a sparse step stays on fewer threads. A second
 * thread reads gradient rows the first one wrote (the backward splits by position, the step
 * by row), and on this project's 2-core VM moving those lines between the cores cost more
 * than the work (docs/PERFORMANCE.md, "Tuning constants"). */
#define SPARSE_GRAIN ((int64_t)1 << 18)

/* Threads for `work` float operations spread over `units` independent units. */
static int sparse_threads(int64_t work, int64_t units) {
    int nt = emb__threads_for(work, SPARSE_GRAIN);
    if ((int64_t)nt > units) nt = units > 0 ? (int)(units < INT32_MAX ? units : INT32_MAX) : 1;
    return nt < 1 ? 1 : nt;
}

#define SGD_CACHED_FLOATS ((int64_t)4 << 20)
/* Entries ahead whose row the SGD update prefetches (for writing), and the first bytes of
 * the row it asks for: faster on tables beyond L2, unchanged in it (docs/PERFORMANCE.md,
 * "Tuning constants"). */
#define SGD_PF 16
static inline void sgd_prefetch(const float *row, int64_t dim) {
    for (int64_t o = 0; o < dim * (int64_t)sizeof(float) && o < 512; o += 64)
        __builtin_prefetch((const char *)row + o, 1);
}

typedef struct entries_ctx {
    const emb__optim_kernel_table *K;
    float *p;
    int64_t rows;
    const emb__spview *e;
    float alpha;
} entries_ctx;

/* Share t of apply_entries: the entries of its rows, in entry order. */
static void entries_share(void *ctx, int t, int nt) {
    const entries_ctx *x = ctx;
    const emb__optim_kernel_table *K = x->K;
    const emb__spview *e = x->e;
    const int64_t dim = e->dim, nnz = e->nnz;
    float *p = x->p;
    if (nt == 1) {
        for (int64_t k = 0; k < nnz; k++) {
            if (k + SGD_PF < nnz) sgd_prefetch(p + e->rows[k + SGD_PF] * dim, dim);
            K->axpy(p + e->rows[k] * dim, emb__sv_row(e, k), x->alpha, dim);
        }
        return;
    }
    int64_t lo, hi;
    emb__split(x->rows, t, nt, &lo, &hi);
    /* A block of entries at a time: first the entries of this share's rows, collected
     * without a branch per entry (whether a random row is this share's is a coin flip the
     * branch predictor loses), then their updates in entry order. */
    enum { BLOCK = 256 };
    int32_t mine[BLOCK];
    for (int64_t b = 0; b < nnz; b += BLOCK) {
        const int m = nnz - b < BLOCK ? (int)(nnz - b) : BLOCK;
        int c = 0;
        for (int j = 0; j < m; j++) {
            mine[c] = j;
            c += (uint64_t)(e->rows[b + j] - lo) < (uint64_t)(hi - lo);
        }
        for (int j = 0; j < c; j++) {
            if (j + SGD_PF < c) sgd_prefetch(p + e->rows[b + mine[j + SGD_PF]] * dim, dim);
            const int64_t k = b + mine[j];
            K->axpy(p + e->rows[k] * dim, emb__sv_row(e, k), x->alpha, dim);
        }
    }
}

/* dense.add_(sparse, alpha=alpha): entry by entry in entry order, row = fmaf(v, alpha, row).
 * Threads own row ranges and each scans all entries, so every row receives its entries in
 * entry order whatever the thread count. */
static void apply_entries(const emb__optim_kernel_table *K, float *p, int64_t rows,
                          const emb__spview *e, float alpha) {
    const int64_t dim = e->dim, nnz = e->nnz;
    /* A table of up to 16 MiB stays in the last-level cache, and the update is a stream over
     * the gradient that one thread reads about as fast as two, which each pull every line
     * (SGD_CACHED_FLOATS, docs/PERFORMANCE.md, "Tuning constants"). */
    const int nt = rows * dim <= SGD_CACHED_FLOATS ? 1 : sparse_threads(nnz * dim, rows);
    entries_ctx c = {K, p, rows, e, alpha};
    emb__parallel(nt, entries_share, &c);
}

/* ---- PyTorch's sum of two uncoalesced sparse tensors, r = t + alpha * s ----------------
 * add_out_sparse_cpu walks both index lists like a merge even when they are not sorted:
 * while either list has entries, compare the heads; the smaller row is emitted first, and
 * equal rows are emitted as one entry holding both. An entry's value is
 * fmaf(s, alpha, 0.0f + t) (either term absent when that side has no entry). When one list
 * is empty the result is a plain copy of t, or s * alpha. */
typedef struct merge_it {
    const int64_t *t, *s;
    int64_t tn, sn, ti, si;
} merge_it;

static inline bool merge_next(merge_it *it, int64_t *ti, int64_t *si) {
    if (it->ti >= it->tn && it->si >= it->sn) return false;
    int cmp;
    if (it->ti >= it->tn)
        cmp = -1;
    else if (it->si >= it->sn)
        cmp = 1;
    else {
        int64_t a = it->t[it->ti], b = it->s[it->si];
        cmp = a < b ? 1 : (a > b ? -1 : 0);
    }
    *ti = cmp >= 0 ? it->ti++ : -1;
    *si = cmp <= 0 ? it->si++ : -1;
    return true;
}

static int64_t merge_count(const int64_t *t, int64_t tn, const int64_t *s, int64_t sn) {
    if (tn == 0) return sn;
    if (sn == 0) return tn;
    merge_it it = {t, s, tn, sn, 0, 0};
    int64_t n = 0, a, b;
    while (merge_next(&it, &a, &b)) n++;
    return n;
}

/* The value of one merged entry (see above). t values are multiplied by t_sign (+-1: a
 * negated gradient), s values by s_alpha. */
static inline void merge_value(const emb__optim_kernel_table *K, float *r, int64_t dim, int64_t tn,
                               const float *t, float t_sign, int64_t sn, const float *s,
                               float s_alpha) {
    if (sn == 0)
        K->coalesce_first(r, t, t_sign, dim); /* copy of t */
    else if (tn == 0)
        K->scale_to(r, s, s_alpha, dim); /* s * alpha */
    else
        K->merge_entry(r, t, t_sign, s, s_alpha, dim);
}

/* ---- coalesce() and a row update per unique row ------------------------------------- */

/* emb__optim_coalesced_update prefetches the rows of the entry this many places ahead, their first
 * COALESCE_PF_BYTES bytes. */
#define COALESCE_PF       16
#define COALESCE_PF_BYTES 256

static inline void prefetch_row(const float *r, int64_t dim, int write) {
    const char *b = (const char *)r;
    int64_t n = dim * (int64_t)sizeof(float);
    if (n > COALESCE_PF_BYTES) n = COALESCE_PF_BYTES;
    for (int64_t o = 0; o < n; o += 64) {
        if (write)
            __builtin_prefetch(b + o, 1);
        else
            __builtin_prefetch(b + o, 0);
    }
}

typedef struct coalesce_ctx {
    const emb__optim_kernel_table *K;
    const emb__spview *g;
    const int64_t *pairs;
    float sign;
    const emb__row_update *u;
    float *scratch;
} coalesce_ctx;

/* Share t of emb__optim_coalesced_update: its part of the sorted entries, moved forward to
 * row boundaries, with its own accumulator. */
static void coalesce_share(void *ctx, int t, int nt) {
    const coalesce_ctx *x = ctx;
    const emb__optim_kernel_table *K = x->K;
    const emb__spview *g = x->g;
    const int64_t *pairs = x->pairs;
    const emb__row_update *u = x->u;
    const float sign = x->sign;
    const int64_t nnz = g->nnz, dim = g->dim;
#define KEY(i) (pairs ? pairs[2 * (i)] : g->rows[i])
#define VAL(i) emb__sv_row(g, pairs ? pairs[2 * (i) + 1] : (i))
    float *acc = x->scratch + (int64_t)t * dim;
    int64_t b, e;
    emb__split(nnz, t, nt, &b, &e);
    while (b > 0 && b < e && KEY(b) == KEY(b - 1)) b++;
    int64_t i = b;
    while (i < e) {
        const int64_t r = KEY(i);
        if (i + COALESCE_PF < nnz) {
            /* the parameter and state rows of a row further on */
            const int64_t rf = KEY(i + COALESCE_PF) * dim;
            prefetch_row(u->p + rf, dim, 1);
            prefetch_row(u->s1 + rf, dim, 1);
            if (u->s2) prefetch_row(u->s2 + rf, dim, 1);
        }
        if (pairs && i + COALESCE_PF < nnz) prefetch_row(VAL(i + COALESCE_PF), dim, 0);
        K->coalesce_first(acc, VAL(i), sign, dim);
        int64_t j = i + 1;
        for (; j < nnz && KEY(j) == r; j++) {
            if (pairs && j + COALESCE_PF < nnz) prefetch_row(VAL(j + COALESCE_PF), dim, 0);
            K->coalesce_add(acc, VAL(j), sign, dim);
        }
        const int64_t off = r * dim;
        if (u->kind == EMB_OPTIMIZER_ADAGRAD)
            K->adagrad_row(u->p + off, u->s1 + off, acc, dim, &u->ag);
        else
            K->sparse_adam_row(u->p + off, u->s1 + off, u->s2 + off, acc, dim, &u->sa);
        i = j;
    }
#undef KEY
#undef VAL
}

/* (optim_internal.h) Rows are independent: threads take contiguous ranges of the sorted
 * entries aligned to row boundaries. */
void emb__optim_coalesced_update(const emb__optim_kernel_table *K, const emb__spview *g,
                                 const int64_t *pairs, float sign, const emb__row_update *u,
                                 float *scratch, int nt) {
    coalesce_ctx c = {K, g, pairs, sign, u, scratch};
    emb__parallel(nt, coalesce_share, &c);
}

/* ---- checks shared by the sparse, fused and row-update calls ------------------------- */

emb_status emb__optim_check_sparse_kind(const emb_optimizer *opt, const emb__param_state *ps,
                                        int param_id) {
    const emb_optimizer_options *o = &opt->o;
    switch (o->kind) {
    case EMB_OPTIMIZER_ADAM:
        return emb__error(EMB_ERR_UNSUPPORTED, "Adam does not support sparse gradients, please "
                                               "consider SparseAdam instead");
    case EMB_OPTIMIZER_ADAMW:
        return emb__error(EMB_ERR_UNSUPPORTED, "AdamW does not support sparse gradients");
    default:
        break;
    }
    if (ps->ndim != 2) {
        char b[300];
        return emb__error(EMB_ERR_SHAPE,
                          "sparse gradients need a 2-D parameter; parameter %d has shape %s",
                          param_id, emb__shape_fmt(b, sizeof b, ps->ndim, ps->shape));
    }
    return EMB_OK;
}

emb_status emb__optim_check_sparse_options(const emb_optimizer *opt, const emb__param_state *ps,
                                           int param_id) {
    const emb_optimizer_options *o = &opt->o;
    if (o->kind == EMB_OPTIMIZER_ADAGRAD && o->weight_decay != 0.0)
        return emb__error(EMB_ERR_UNSUPPORTED,
                          "weight_decay option is not compatible with sparse gradients");
    if (o->kind == EMB_OPTIMIZER_SGD && o->weight_decay != 0.0)
        return emb__error(EMB_ERR_UNSUPPORTED,
                          "SGD with weight_decay does not support sparse gradients: the decay "
                          "term would add the dense parameter to the sparse gradient (PyTorch: "
                          "\"add(sparse, dense) is not supported. Use add(dense, sparse) "
                          "instead.\")");
    if (o->kind == EMB_OPTIMIZER_SGD && o->momentum != 0.0 && o->nesterov &&
        ps->buf_kind == EMB__BUF_DENSE)
        return emb__error(EMB_ERR_UNSUPPORTED,
                          "SGD with nesterov: parameter %d has a dense momentum buffer from "
                          "dense steps, which cannot be added to a sparse gradient (PyTorch: "
                          "\"add(sparse, dense) is not supported\")",
                          param_id);
    return EMB_OK;
}

emb_status emb__optim_check_grad_shape(const emb__param_state *ps, int param_id, int64_t rows,
                                       int64_t dim) {
    if (ps->shape[0] == rows && ps->shape[1] == dim) return EMB_OK;
    char b[300];
    return emb__error(EMB_ERR_SHAPE,
                      "grad is a sparse gradient of size [%" PRId64 ", %" PRId64
                      "], expected %s (the shape of parameter %d)",
                      rows, dim, emb__shape_fmt(b, sizeof b, ps->ndim, ps->shape), param_id);
}

/* ---- the sparse step proper, after validation ---------------------------------------- */

/* Makes opt->scratch hold at least `bytes` bytes (its contents are not kept). */
static emb_status opt_scratch(emb_optimizer *opt, size_t bytes) {
    if (bytes <= opt->scratch_bytes && opt->scratch) return EMB_OK;
    void *p = emb__malloc(bytes > 0 ? bytes : 1);
    if (!p)
        return emb__error(EMB_ERR_NOMEM, "cannot allocate %zu bytes of scratch for a sparse step",
                          bytes);
    emb__free(opt->scratch);
    opt->scratch = p;
    opt->scratch_bytes = bytes;
    return EMB_OK;
}

typedef struct nesterov_ctx {
    const emb__optim_kernel_table *K;
    const emb__spview *g, *buf;
    float *p;
    int64_t rows;
    float sign, momentum, neg_lr;
    float *scratch;
} nesterov_ctx;

/* Share t of the Nesterov update: the merged entries of its rows, with its own row v. */
static void nesterov_share(void *ctx, int t, int nt) {
    const nesterov_ctx *x = ctx;
    const emb__spview *g = x->g, *buf = x->buf;
    const int64_t dim = g->dim;
    int64_t lo, hi;
    emb__split(x->rows, t, nt, &lo, &hi);
    float *v = x->scratch + (int64_t)t * dim;
    merge_it it = {g->rows, buf->rows, g->nnz, buf->nnz, 0, 0};
    int64_t ti, si;
    while (merge_next(&it, &ti, &si)) {
        int64_t r = ti >= 0 ? g->rows[ti] : buf->rows[si];
        if (r < lo || r >= hi) continue;
        merge_value(x->K, v, dim, g->nnz, ti >= 0 ? emb__sv_row(g, ti) : NULL, x->sign, buf->nnz,
                    si >= 0 ? buf->values + si * dim : NULL, x->momentum);
        x->K->axpy(x->p + r * dim, v, x->neg_lr, dim);
    }
}

/* SGD with momentum and a sparse gradient d_p = sign * g. PyTorch's single-tensor SGD:
 *   first step: buf = clone(d_p) (a sparse tensor)
 *   later:      buf.mul_(momentum).add_(d_p, alpha=1 - dampening)   (a merge)
 *   nesterov:   d = d_p.add(buf, alpha=momentum)                    (another merge)
 *   else        d = buf
 *   param.add_(d, alpha=-lr)                                         (entries in order)
 * With a dense buffer (earlier dense steps), the buffer update and the parameter update are
 * dense; nesterov is rejected before (PyTorch cannot add a dense tensor to a sparse one). */
static emb_status sgd_momentum_sparse(const emb__optim_kernel_table *K, const emb_optimizer *opt,
                                      emb__param_state *ps, const emb__spview *g) {
    const emb_optimizer_options *o = &opt->o;
    const emb__sgd_args a = emb__optim_sgd_args(o);
    const float sign = o->maximize ? -1.0f : 1.0f;
    const int64_t rows = ps->shape[0], dim = ps->shape[1];
    float *p = emb__optim_param_data(ps);

    if (ps->buf_kind == EMB__BUF_DENSE) {
        emb__optim_dense_scale(K, ps->s1, a.momentum, ps->numel);
        apply_entries(K, ps->s1, rows, g, sign * a.one_minus_dampening);
        emb__optim_dense_axpy(K, p, ps->s1, a.neg_lr, ps->numel);
        return EMB_OK;
    }

    /* The new sparse buffer. */
    int64_t *nrows = NULL;
    float *nvals = NULL;
    int64_t nn;
    const int64_t bn = ps->buf_kind == EMB__BUF_SPARSE ? ps->sp_nnz : 0;
    const bool first = ps->buf_kind == EMB__BUF_NONE;
    if (first)
        nn = g->nnz;
    else
        nn = merge_count(ps->sp_rows, bn, g->rows, g->nnz);
    const bool in_place = !first && g->nnz == 0; /* buf.add_(empty) keeps buf */
    const int64_t new_nnz = in_place ? bn : nn;
    const int nt = o->nesterov ? sparse_threads((g->nnz + new_nnz) * dim, rows) : 1;
    float *scratch = NULL;
    emb_status st = EMB_OK;
    if (o->nesterov) st = emb__optim_alloc_f32(nt, dim, &scratch, "SGD nesterov scratch");
    if (!st && !in_place) st = emb__optim_alloc_i64(nn, &nrows, "SGD momentum buffer");
    if (!st && !in_place) st = emb__optim_alloc_f32(nn, dim, &nvals, "SGD momentum buffer");
    if (st) {
        emb__free(scratch);
        emb__free(nrows);
        emb__free(nvals);
        return st;
    }
    /* Nothing can fail from here on. */
    if (first) {
        for (int64_t k = 0; k < nn; k++) {
            nrows[k] = g->rows[k];
            K->coalesce_first(nvals + k * dim, emb__sv_row(g, k), sign, dim);
        }
    } else {
        if (bn > 0) K->scale(ps->sp_vals, a.momentum, bn * dim); /* buf.mul_(momentum) */
        if (!in_place) {
            const float alpha = sign * a.one_minus_dampening;
            merge_it it = {ps->sp_rows, g->rows, bn, g->nnz, 0, 0};
            int64_t ti, si, k = 0;
            while (merge_next(&it, &ti, &si)) {
                nrows[k] = ti >= 0 ? ps->sp_rows[ti] : g->rows[si];
                merge_value(K, nvals + k * dim, dim, bn, ti >= 0 ? ps->sp_vals + ti * dim : NULL,
                            1.0f, g->nnz, si >= 0 ? emb__sv_row(g, si) : NULL, alpha);
                k++;
            }
        }
    }
    if (!in_place) {
        emb__free(ps->sp_rows);
        emb__free(ps->sp_vals);
        ps->sp_rows = nrows;
        ps->sp_vals = nvals;
        ps->sp_nnz = nn;
        ps->buf_kind = EMB__BUF_SPARSE;
    }

    const emb__spview buf = {ps->sp_nnz, dim, ps->sp_rows, ps->sp_vals, NULL, false};
    if (!o->nesterov) {
        apply_entries(K, p, rows, &buf, a.neg_lr);
        return EMB_OK;
    }
    /* d = d_p + momentum * buf, streamed entry by entry into the parameter: threads own row
     * ranges and each walks the whole merge. */
    nesterov_ctx c = {K, g, &buf, p, rows, sign, a.momentum, a.neg_lr, scratch};
    emb__parallel(nt, nesterov_share, &c);
    emb__free(scratch);
    return EMB_OK;
}

/* One sparse step of a validated gradient view (rows in range, dims matching). */
emb_status emb__optim_sparse_step(emb_optimizer *opt, emb__param_state *ps, const emb__spview *g) {
    const emb_optimizer_options *o = &opt->o;
    const emb__optim_kernel_table *K = emb__kernels()->optim;
    const int64_t rows = ps->shape[0], dim = ps->shape[1];
    if (ps->steps == INT64_MAX) return emb__optim_steps_overflow((int)(ps - opt->ps));
    const int64_t step = ps->steps + 1;
    emb_status st = EMB_OK;

    if (o->kind == EMB_OPTIMIZER_SGD) {
        if (o->momentum == 0.0) {
            /* param.add_(d_p, alpha=-lr) with d_p = sign * g: fmaf(-v, a, p) == fmaf(v, -a, p). */
            const float neg_lr = (float)(-o->lr);
            apply_entries(K, emb__optim_param_data(ps), rows, g, o->maximize ? -neg_lr : neg_lr);
        } else {
            st = sgd_momentum_sparse(K, opt, ps, g);
            if (st) return st;
        }
        ps->steps = step;
        return EMB_OK;
    }

    /* Adagrad, SparseAdam: coalesce, then one update per unique row. The sort's pairs
     * (2 n int64) and the threads' accumulators (nt x dim floats) live in the optimizer's
     * scratch buffer. */
    const int64_t n = g->nnz;
    const bool sort = !g->coalesced && n > 1;
    const int nt = sparse_threads(n * dim, n);
    int64_t pair_bytes = 0, acc_bytes;
    if ((sort && !emb__mul_i64(n, 2 * (int64_t)sizeof(int64_t), &pair_bytes)) ||
        !emb__mul_i64((int64_t)nt * (int64_t)sizeof(float), dim > 0 ? dim : 1, &acc_bytes) ||
        pair_bytes > INT64_MAX - acc_bytes || (uint64_t)(pair_bytes + acc_bytes) > SIZE_MAX)
        return emb__error(EMB_ERR_OVERFLOW, "coalesce: %" PRId64 " entries overflow", n);
    st = opt_scratch(opt, (size_t)(pair_bytes + acc_bytes));
    if (!st) st = emb__optim_ensure_state(opt, ps);
    if (st) return st;
    int64_t *pairs = sort ? opt->scratch : NULL;
    float *acc = (float *)((char *)opt->scratch + pair_bytes);
    if (sort) emb__argsort_pairs_i64_mt(g->rows, n, pairs, emb__threads_for(n, EMB__ARGSORT_GRAIN));
    emb__row_update u;
    memset(&u, 0, sizeof u);
    u.kind = o->kind;
    u.p = emb__optim_param_data(ps);
    u.s1 = ps->s1;
    u.s2 = ps->s2;
    if (o->kind == EMB_OPTIMIZER_ADAGRAD)
        u.ag = emb__optim_adagrad_args(o, step);
    else
        u.sa = emb__optim_sparse_adam_args(o, step);
    emb__optim_coalesced_update(K, g, pairs, o->maximize ? -1.0f : 1.0f, &u, acc, nt);
    ps->steps = step;
    return EMB_OK;
}

emb_status emb_optimizer_step_sparse(emb_optimizer *opt, int param_id,
                                     const emb_sparse_grad *grad) {
    emb__param_state *ps = NULL;
    emb_status st = emb__optim_get_param(opt, param_id, &ps);
    if (st) return st;
    if (!grad) return emb__null("grad");
    st = emb__optim_check_sparse_kind(opt, ps, param_id);
    if (st) return st;
    st = emb__sparse_grad_check(grad, "grad");
    if (st) return st;
    st = emb__optim_check_grad_shape(ps, param_id, grad->num_rows, grad->dim);
    if (st) return st;
    const int64_t rows = ps->shape[0], dim = ps->shape[1];
    const int64_t n = grad->nnz;
    for (int64_t k = 0; k < n; k++) {
        int64_t r = grad->indices[k];
        if (r < 0 || r >= rows)
            return emb__error(EMB_ERR_INDEX,
                              "grad entry %" PRId64 " has row %" PRId64
                              ", out of range for a parameter with %" PRId64
                              " rows (valid: [0, %" PRId64 "))",
                              k, r, rows, rows);
    }
    st = emb__optim_check_sparse_options(opt, ps, param_id);
    if (st) return st;
    /* A gradient flagged coalesced is used as is only when its rows really are strictly
     * ascending (then coalesce() is the identity); otherwise it is coalesced here. */
    bool ascending = grad->coalesced;
    for (int64_t k = 1; ascending && k < n; k++)
        ascending = grad->indices[k - 1] < grad->indices[k];
    const emb__spview g = {n, dim, grad->indices, grad->values, NULL, ascending};
    return emb__optim_sparse_step(opt, ps, &g);
}
