/* src/nn/embedding_bag_backward.c: the backward of nn.EmbeddingBag — dense weight gradient
 * (sum/mean in PyTorch's sorted-permutation order, max routed through max_indices),
 * sparse weight gradient, and the per_sample_weights gradient. See
 * docs/semantics.md §14 (and §6.5 for the sort order).
 *
 * Determinism: the dense sum/mean gradient is computed per destination row (a group of
 * equal indices in the unstable-sort permutation PyTorch uses), and threads own disjoint
 * ranges of groups; max mode splits the columns between threads. No atomics: the bits do
 * not depend on the thread count. */
#include "embedding_bag_internal.h"
#include "kernels/argsort.h"
#include "kernels/backward.h"
#include "kernels/gemm.h"
#include "sparse_grad_internal.h"

#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define EMB__BAG_BWD_GRAIN 32768

static emb_status state_error(void) {
    return emb__error(EMB_ERR_STATE,
                      "the embedding bag's weight does not require grad (created with "
                      "freeze=true)");
}

/* The checks a backward starts with: the bag and its result `out` (named `what`) given, the
 * weight trainable; then the bag's configuration in *c. */
static emb_status backward_cfg(const emb_bag *bag, const void *out, const char *what,
                               emb__bag_cfg *c) {
    if (!bag) return emb__null("bag");
    if (!out) return emb__null(what);
    if (!bag->emb->requires_grad) return state_error();
    emb__bag_cfg_of(bag, c);
    return EMB_OK;
}

/* Sparse gradients exist neither in max mode nor with scale_grad_by_freq. */
static emb_status sparse_mode_check(const emb__bag_cfg *c) {
    if (c->mode == EMB_BAG_MAX)
        return emb__error(EMB_ERR_UNSUPPORTED, "max mode does not support sparse weights");
    if (c->scale_grad_by_freq)
        return emb__error(EMB_ERR_UNSUPPORTED, "embedding_backward: scale_grad_by_freq not "
                                               "supported with sparse gradients");
    return EMB_OK;
}

/* Shared checks: batch, grad_output [B, D], index values. On success bb holds storage. */
static emb_status check_common(const emb__bag_cfg *c, const emb_tensor *input,
                               const emb_tensor *offsets, const emb_tensor *psw,
                               const emb_tensor *grad_output, emb__bag_batch *bb) {
    if (!input) return emb__null("input");
    if (!grad_output) return emb__null("grad_output");
    emb_status st = emb__bag_batch_init(c, input, offsets, psw, bb);
    if (st) return st;
    const int64_t gs[2] = {bb->B, c->D};
    st = emb__check_f32_shape(grad_output, "grad_output", 2, gs);
    if (!st && c->D > 0) st = emb__bag_batch_ready(bb); /* grad_output holds B rows */
    if (st) {
        emb__bag_batch_free(bb);
        return st;
    }
    return EMB_OK;
}

/* The batch of a sparse backward, its index values checked (on failure nothing is held),
 * and *m, its entries: the non-padding positions inside bags. */
static emb_status sparse_batch(const emb__bag_cfg *c, const emb_tensor *input,
                               const emb_tensor *offsets, const emb_tensor *psw,
                               const emb_tensor *grad_output, emb__bag_batch *bb, int64_t *m) {
    emb_status st = check_common(c, input, offsets, psw, grad_output, bb);
    if (st) return st;
    st = emb__bag_check_index_values(c, bb);
    if (st) {
        emb__bag_batch_free(bb);
        return st;
    }
    *m = 0;
    for (int64_t p = 0; p < bb->end; p++) *m += emb__index_at(input, p) != c->pad;
    return EMB_OK;
}

static emb_status alloc_bytes(void **p, int64_t count, int64_t size, const char *what) {
    int64_t bytes;
    if (!emb__mul_i64(count > 0 ? count : 1, size, &bytes) || (uint64_t)bytes > SIZE_MAX)
        return emb__error(EMB_ERR_OVERFLOW, "embedding_bag backward: %" PRId64 " %s overflow",
                          count, what);
    *p = emb__malloc((size_t)bytes);
    if (!*p)
        return emb__error(EMB_ERR_NOMEM,
                          "embedding_bag backward: cannot allocate %" PRId64 " bytes of %s", bytes,
                          what);
    return EMB_OK;
}

/* Non-padding positions per bag. */
static void bag_counts(const emb__bag_cfg *c, const emb__bag_batch *bb, int64_t *count) {
    for (int64_t b = 0; b < bb->B; b++) {
        int64_t k = 0;
        for (int64_t p = bb->starts[b]; p < bb->starts[b + 1]; p++)
            k += emb__index_at(bb->input, p) != c->pad;
        count[b] = k;
    }
}

/* offset2bag over [0, n): the bag of each position, -1 after the last bag. */
static void offset2bag(const emb__bag_batch *bb, int64_t *o2b) {
    for (int64_t b = 0; b < bb->B; b++)
        for (int64_t p = bb->starts[b]; p < bb->starts[b + 1]; p++) o2b[p] = b;
    for (int64_t p = bb->end; p < bb->n; p++) o2b[p] = -1;
}

/* First group boundary at or after x in perm (keys of perm[x-1] and perm[x] differ). */
static int64_t align_group(const int64_t *keys, const int64_t *perm, int64_t m, int64_t x) {
    while (x > 0 && x < m && keys[perm[x]] == keys[perm[x - 1]]) x++;
    return x;
}

/* The first table row of the threads' share that starts at group boundary x of the sorted
 * positions: the shares of rows tile [0, V) as the shares of groups tile [0, m). */
static int64_t share_row(const int64_t *keys, const int64_t *perm, int64_t m, int64_t V,
                         int64_t x) {
    return x == 0 ? 0 : x >= m ? V : keys[perm[x]];
}

/* Share t of the sum/mean backward: the groups of equal keys of its part of the sorted
 * positions, and the rows they tile. */
typedef struct groups_ctx {
    const emb__bag_kernel_table *K;
    const emb__bag_cfg *c;
    const emb__bag_batch *bb;
    float *gw;
    const float *go;
    const int64_t *keys, *perm, *o2b, *count;
    int64_t m;
    bool overwrite;
    float *acc;
} groups_ctx;

static void groups_share(void *p, int t, int nt) {
    const groups_ctx *g = p;
    const emb__bag_cfg *c = g->c;
    int64_t a, b;
    emb__split(g->m, t, nt, &a, &b);
    const int64_t i0 = align_group(g->keys, g->perm, g->m, a);
    const int64_t i1 = align_group(g->keys, g->perm, g->m, b);
    const int64_t r0 = share_row(g->keys, g->perm, g->m, c->V, i0);
    const int64_t r1 = share_row(g->keys, g->perm, g->m, c->V, i1);
    if (i0 < i1) /* (an empty share of groups is an empty share of rows) */
        g->K->backward_groups(g->gw, g->go, c->D, g->keys, g->perm, g->o2b, g->count, g->bb->psw,
                              i0, i1, c->pad, c->scale_grad_by_freq, g->overwrite, r0, r1,
                              g->acc + t * c->D);
}

static emb_status backward_sum_mean(const emb__bag_cfg *c, const emb__bag_batch *bb,
                                    const float *go, float *gw, bool overwrite) {
    const int64_t m = bb->end, D = c->D;
    if (m == 0) {
        if (overwrite) emb__zero_floats(gw, c->V * D);
        return EMB_OK;
    }
    int64_t *keys = NULL, *perm = NULL, *scratch = NULL, *o2b = NULL, *count = NULL;
    float *acc = NULL;
    int64_t work;
    if (!emb__mul_i64(m, D, &work)) work = INT64_MAX;
    int nt = emb__threads_for(work, EMB__BAG_BWD_GRAIN);
    emb_status st = EMB_OK;
    if (bb->i32) st = alloc_bytes((void **)&keys, m, sizeof(int64_t), "keys");
    if (!st) st = alloc_bytes((void **)&perm, m, sizeof(int64_t), "permutation");
    if (!st) st = alloc_bytes((void **)&scratch, m, 2 * sizeof(int64_t), "sort scratch");
    if (!st) st = alloc_bytes((void **)&o2b, bb->n, sizeof(int64_t), "offset2bag");
    if (!st && c->mode == EMB_BAG_MEAN)
        st = alloc_bytes((void **)&count, bb->B, sizeof(int64_t), "bag sizes");
    if (!st) st = alloc_bytes((void **)&acc, nt, D * (int64_t)sizeof(float), "accumulators");
    if (!st) {
        const int64_t *k = bb->idx;
        if (bb->i32) {
            const int32_t *s = bb->idx;
            for (int64_t p = 0; p < m; p++) keys[p] = s[p];
            k = keys;
        }
        /* PyTorch sorts the whole input (all of it lies in bags unless the last offset is
         * short, and then emb ignores the rest) */
        const emb__bag_kernel_table *K = emb__kernels()->bag;
        emb__argsort_unstable_i64_mt(k, m, perm, scratch, emb__threads_for(m, EMB__ARGSORT_GRAIN));
        offset2bag(bb, o2b);
        if (count) bag_counts(c, bb, count);
        groups_ctx g = {K, c, bb, gw, go, k, perm, o2b, count, m, overwrite, acc};
        emb__parallel(nt, groups_share, &g);
    }
    emb__free(keys);
    emb__free(perm);
    emb__free(scratch);
    emb__free(o2b);
    emb__free(count);
    emb__free(acc);
    return st;
}

/* Share t of the max backward: its columns, with its own scratch. */
typedef struct max_ctx {
    float *gw;
    const float *go;
    const int64_t *mi, *count;
    int64_t B, D, V;
    float *acc;
    unsigned char *mark;
    int64_t *touched;
} max_ctx;

static void max_share(void *p, int t, int nt) {
    const max_ctx *x = p;
    int64_t c0, c1;
    emb__split(x->D, t, nt, &c0, &c1);
    emb__bag_max_backward_ref(x->gw, x->go, x->mi, x->count, x->B, x->D, c0, c1, x->acc + x->V * t,
                              x->mark + x->V * t, x->touched + x->B * t);
}

static emb_status backward_max(const emb__bag_cfg *c, const emb__bag_batch *bb, const int64_t *mi,
                               const float *go, float *gw, bool overwrite) {
    const int64_t B = bb->B, D = c->D, V = c->V;
    if (B == 0) {
        if (overwrite) emb__zero_floats(gw, V * D);
        return EMB_OK;
    }
    int64_t work;
    if (!emb__mul_i64(B, D, &work)) work = INT64_MAX;
    int nt = emb__threads_for(work, EMB__BAG_BWD_GRAIN);
    if (nt > D) nt = (int)D;
    int64_t *count = NULL, *touched = NULL;
    float *acc = NULL;
    unsigned char *mark = NULL;
    int64_t vnt;
    emb_status st = EMB_OK;
    if (!emb__mul_i64(V, nt, &vnt))
        st = emb__error(EMB_ERR_OVERFLOW, "embedding_bag backward: scratch size overflows");
    if (!st) st = alloc_bytes((void **)&count, B, sizeof(int64_t), "bag sizes");
    if (!st) st = alloc_bytes((void **)&touched, B, nt * (int64_t)sizeof(int64_t), "rows");
    if (!st) st = alloc_bytes((void **)&acc, vnt, sizeof(float), "accumulators");
    if (!st) {
        mark = calloc((size_t)vnt, 1);
        if (!mark)
            st = emb__error(
                EMB_ERR_NOMEM,
                "embedding_bag backward: cannot allocate %" PRId64 " bytes of row marks", vnt);
    }
    if (!st) {
        /* overwrite: the max backward adds column by column into touched rows; zero first */
        if (overwrite) emb__zero_floats(gw, V * D);
        bag_counts(c, bb, count);
        max_ctx x = {gw, go, mi, count, B, D, V, acc, mark, touched};
        emb__parallel(nt, max_share, &x);
    }
    emb__free(count);
    emb__free(touched);
    emb__free(acc);
    free(mark);
    return st;
}

static emb_status bag_backward_dense(const emb_bag *bag, const emb_tensor *input,
                                     const emb_tensor *offsets,
                                     const emb_tensor *per_sample_weights,
                                     const emb_tensor *max_indices, const emb_tensor *grad_output,
                                     emb_tensor *grad_weight, bool overwrite) {
    emb__bag_cfg c;
    emb_status st = backward_cfg(bag, grad_weight, "grad_weight", &c);
    if (st) return st;
    emb__bag_batch bb;
    st = check_common(&c, input, offsets, per_sample_weights, grad_output, &bb);
    if (st) return st;
    const int64_t ws[2] = {c.V, c.D}, ms[2] = {bb.B, c.D};
    st = emb__check_f32_shape(grad_weight, "grad_weight", 2, ws);
    if (!st && c.mode == EMB_BAG_MAX) {
        if (!max_indices)
            st = emb__error(EMB_ERR_NULL, "max_indices must not be NULL in mode max (pass the "
                                          "max_indices the forward produced)");
        else
            st = emb__bag_check_i64_shape(max_indices, "max_indices", ms);
        if (!st) {
            const int64_t *mi = max_indices->data;
            for (int64_t i = 0; i < bb.B * c.D; i++)
                if (mi[i] < 0 || mi[i] >= c.V) {
                    st = emb__error(EMB_ERR_INDEX,
                                    "max_indices[%" PRId64 "][%" PRId64 "] = %" PRId64
                                    " is out of range for a table of %" PRId64
                                    " rows (valid: [0, %" PRId64 "))",
                                    i / c.D, i % c.D, mi[i], c.V, c.V);
                    break;
                }
        }
    } else if (!st && max_indices) {
        st = emb__error(EMB_ERR_INVALID, "max_indices is only used in mode max; pass NULL");
    }
    if (!st) st = emb__bag_check_index_values(&c, &bb);
    if (!st && c.D > 0) {
        if (c.mode == EMB_BAG_MAX)
            st = backward_max(&c, &bb, max_indices->data, grad_output->data, grad_weight->data,
                              overwrite);
        else
            st = backward_sum_mean(&c, &bb, grad_output->data, grad_weight->data, overwrite);
    }
    emb__bag_batch_free(&bb);
    return st;
}

emb_status emb_bag_backward(const emb_bag *bag, const emb_tensor *input, const emb_tensor *offsets,
                            const emb_tensor *per_sample_weights, const emb_tensor *max_indices,
                            const emb_tensor *grad_output, emb_tensor *grad_weight) {
    return bag_backward_dense(bag, input, offsets, per_sample_weights, max_indices, grad_output,
                              grad_weight, false);
}

emb_status emb_bag_backward_overwrite(const emb_bag *bag, const emb_tensor *input,
                                      const emb_tensor *offsets,
                                      const emb_tensor *per_sample_weights,
                                      const emb_tensor *max_indices, const emb_tensor *grad_output,
                                      emb_tensor *grad_weight) {
    return bag_backward_dense(bag, input, offsets, per_sample_weights, max_indices, grad_output,
                              grad_weight, true);
}

/* Share t of the sparse gradient's gather: its range of bags, first counted (slot[t + 1]
 * = its entries), then (gather) written from its first slot on. */
typedef struct gather_ctx {
    const emb__bag_cfg *c;
    const emb__bag_batch *bb;
    int64_t *slot;
    emb_sparse_grad *grad;
    const float *go;
    bool mean, gather;
} gather_ctx;

static void gather_share(void *p, int t, int nt) {
    const gather_ctx *g = p;
    const emb__bag_batch *bb = g->bb;
    const int64_t pad = g->c->pad, D = g->c->D;
    int64_t b0, b1;
    emb__split(bb->B, t, nt, &b0, &b1);
    if (!g->gather) {
        const int64_t p0 = bb->starts[b0], p1 = bb->starts[b1];
        int64_t k = p1 - p0;
        if (pad != EMB_PADDING_NONE)
            for (int64_t q = p0; q < p1; q++) k -= emb__index_at(bb->input, q) == pad;
        g->slot[t + 1] = k;
        return;
    }
    if (b0 < b1)
        emb__bag_sparse_gather_ref(g->grad->indices + g->slot[t], g->grad->values + g->slot[t] * D,
                                   bb->idx, bb->i32, bb->starts + b0, b1 - b0, g->go + b0 * D, D,
                                   bb->psw, g->mean, pad, bb->n);
}

emb_status emb_bag_backward_sparse(const emb_bag *bag, const emb_tensor *input,
                                   const emb_tensor *offsets, const emb_tensor *per_sample_weights,
                                   const emb_tensor *grad_output, emb_sparse_grad *grad) {
    emb__bag_cfg c;
    emb_status st = backward_cfg(bag, grad, "grad", &c);
    if (st) return st;
    return emb__bag_backward_sparse_cfg(&c, input, offsets, per_sample_weights, grad_output, grad);
}

emb_status emb__bag_backward_sparse_cfg(const emb__bag_cfg *cfg, const emb_tensor *input,
                                        const emb_tensor *offsets,
                                        const emb_tensor *per_sample_weights,
                                        const emb_tensor *grad_output, emb_sparse_grad *grad) {
    if (!grad) return emb__null("grad");
    const emb__bag_cfg c = *cfg;
    emb_status st = sparse_mode_check(&c);
    if (!st) st = emb__sparse_grad_check(grad, "grad");
    if (st) return st;
    if (grad->num_rows != c.V || grad->dim != c.D)
        return emb__error(EMB_ERR_SHAPE,
                          "grad is a sparse gradient of shape [%" PRId64 ", %" PRId64
                          "], expected [%" PRId64 ", %" PRId64 "] (the table's shape)",
                          grad->num_rows, grad->dim, c.V, c.D);
    emb__bag_batch bb;
    int64_t m; /* entries: non-padding positions inside bags */
    st = sparse_batch(&c, input, offsets, per_sample_weights, grad_output, &bb, &m);
    if (st) return st;
    const int64_t D = c.D;
    if (m == 0) {
        emb__bag_batch_free(&bb);
        return EMB_OK;
    }
    const bool mean = c.mode == EMB_BAG_MEAN;
    const float *go = grad_output->data;
    if (grad->nnz == 0) {
        if (grad->capacity < m) {
            int64_t *ni = NULL;
            float *nv = NULL;
            st = emb__sparse_grad_alloc(m, D, &ni, &nv);
            if (st) {
                emb__bag_batch_free(&bb);
                return st;
            }
            emb__sparse_grad_release(grad);
            grad->indices = ni;
            grad->values = nv;
            grad->capacity = m;
        }
        int64_t work;
        if (!emb__mul_i64(m, D, &work)) work = INT64_MAX;
        const int nt = emb__threads_for(work, EMB__BAG_BWD_GRAIN);
        /* Threads gather disjoint ranges of bags into their own slots (the same bits): the
         * entries of the bags before b0 come first, so thread t's first slot is the number
         * of non-padding positions before starts[b0] (every position of a bag is an entry
         * when there is no padding). */
        int64_t *slot = nt > 1 ? emb__malloc((size_t)(nt + 1) * sizeof(int64_t)) : NULL;
        gather_ctx g = {&c, &bb, slot, grad, go, mean, false};
        if (slot && bb.starts[0] == 0) {
            slot[0] = 0;
            emb__parallel(nt, gather_share, &g); /* counts */
            for (int t = 0; t < nt; t++) slot[t + 1] += slot[t];
        }
        if (slot && bb.starts[0] == 0 && slot[nt] == m) {
            g.gather = true;
            emb__parallel(nt, gather_share, &g);
            grad->nnz = m;
        } else {
            grad->nnz =
                emb__bag_sparse_gather_ref(grad->indices, grad->values, bb.idx, bb.i32, bb.starts,
                                           bb.B, go, D, bb.psw, mean, c.pad, bb.n);
        }
        emb__free(slot);
        grad->coalesced = grad->nnz < 2;
        emb__bag_batch_free(&bb);
        return EMB_OK;
    }
    emb__sparse_add add;
    st = emb__sparse_add_begin(grad, m, D, "embedding_bag backward", &add);
    if (st) {
        emb__bag_batch_free(&bb);
        return st;
    }
    int64_t got = emb__bag_sparse_gather_ref(add.si, add.sv, bb.idx, bb.i32, bb.starts, bb.B, go, D,
                                             bb.psw, mean, c.pad, bb.n);
    emb__sparse_add_finish(grad, &add, got, D);
    emb__bag_batch_free(&bb);
    return EMB_OK;
}

/* The per_sample_weights gradient of positions [p0, p1) as PyTorch computes it: torch 1.13's
 * _embedding_bag_per_sample_weights_backward_cpu calls dot_impl(D, grad_output[bag], 1,
 * weight[idx], 1) per position, which hands the two vectors to the BLAS's sdot; this makes
 * the same call (emb__sdot_cblas, the same OpenBLAS), so the bits are torch's with the same
 * OpenBLAS core type (docs/semantics.md §14). sdot never splits its work between threads,
 * so they do not depend on emb's thread count either. Returns false when the build has no
 * CBLAS or D does not fit its integer type (the kernel's sequential sum is used then). */
static bool psw_grad_blas(float *out, const float *grad_output, const float *weight, int64_t D,
                          const emb__bag_batch *bb, const int64_t *o2b, int64_t p0, int64_t p1,
                          int64_t pad) {
    float probe;
    if (!emb__sdot_cblas(0, weight, weight, &probe) || D > INT32_MAX) return false;
    for (int64_t p = p0; p < p1; p++) {
        const int64_t k =
            bb->i32 ? (int64_t)((const int32_t *)bb->idx)[p] : ((const int64_t *)bb->idx)[p];
        if (o2b[p] < 0 || k == pad) {
            out[p] = 0.0f;
            continue;
        }
        emb__sdot_cblas(D, grad_output + o2b[p] * D, weight + k * D, &out[p]);
    }
    return true;
}

/* Positions [p0, p1) of the per_sample_weights gradient, through BLAS as torch when
 * allowed, else the kernel. */
typedef struct psw_ctx {
    const emb__bag_kernel_table *K;
    float *out;
    const float *go, *W;
    int64_t D;
    const emb__bag_batch *bb;
    const int64_t *o2b;
    int64_t pad;
    bool blas;
} psw_ctx;

static void psw_range(void *p, int64_t p0, int64_t p1, int ith) {
    (void)ith;
    const psw_ctx *x = p;
    if (!x->blas || !psw_grad_blas(x->out, x->go, x->W, x->D, x->bb, x->o2b, p0, p1, x->pad))
        x->K->psw_grad(x->out, x->go, x->W, x->D, x->bb->idx, x->bb->i32, x->o2b, p0, p1, x->pad);
}

emb_status emb_bag_backward_per_sample_weights(const emb_bag *bag, const emb_tensor *input,
                                               const emb_tensor *offsets,
                                               const emb_tensor *grad_output,
                                               emb_tensor *grad_per_sample_weights) {
    if (!bag) return emb__null("bag");
    if (!grad_per_sample_weights) return emb__null("grad_per_sample_weights");
    emb__bag_cfg c;
    emb__bag_cfg_of(bag, &c);
    if (c.mode != EMB_BAG_SUM)
        return emb__error(EMB_ERR_UNSUPPORTED,
                          "embedding_bag: per_sample_weights are only supported for "
                          "mode='sum' (got mode='%s')",
                          c.mode == EMB_BAG_MEAN ? "mean" : "max");
    emb__bag_batch bb;
    emb_status st = check_common(&c, input, offsets, NULL, grad_output, &bb);
    if (st) return st;
    st = emb__check_f32_shape(grad_per_sample_weights, "grad_per_sample_weights", input->ndim,
                              input->shape);
    if (!st) st = emb__bag_check_index_values(&c, &bb);
    int64_t *o2b = NULL;
    if (!st) st = alloc_bytes((void **)&o2b, bb.n, sizeof(int64_t), "offset2bag");
    if (!st && bb.n > 0) {
        offset2bag(&bb, o2b);
        const int64_t n = bb.n, D = c.D;
        int64_t work;
        if (!emb__mul_i64(n, D > 0 ? D : 1, &work)) work = INT64_MAX;
        const int nt = emb__threads_for(work, EMB__BAG_BWD_GRAIN);
        psw_ctx x = {emb__kernels()->bag,
                     grad_per_sample_weights->data,
                     grad_output->data,
                     bag->emb->weight,
                     D,
                     &bb,
                     o2b,
                     c.pad,
                     !emb__force_ref()};
        emb__parallel_for(nt, n, psw_range, &x);
    }
    emb__free(o2b);
    emb__bag_batch_free(&bb);
    return st;
}

void emb__bag_entries_free(emb__bag_entries *e) {
    emb__free(e->rows);
    emb__free(e->pos);
    emb__free(e->owned_values);
    memset(e, 0, sizeof *e);
}

emb_status emb__bag_sparse_entries(const emb_bag *bag, const emb_tensor *input,
                                   const emb_tensor *offsets, const emb_tensor *psw,
                                   const emb_tensor *grad_output, emb__bag_entries *out) {
    emb__bag_cfg c;
    emb_status st = backward_cfg(bag, out, "out", &c);
    if (!st) st = sparse_mode_check(&c);
    if (st) return st;
    emb__bag_batch bb;
    int64_t m;
    st = sparse_batch(&c, input, offsets, psw, grad_output, &bb, &m);
    if (st) return st;
    const int64_t D = c.D;
    emb__bag_entries e;
    memset(&e, 0, sizeof e);
    e.nnz = m;
    e.dim = D;
    st = alloc_bytes((void **)&e.rows, m, sizeof(int64_t), "entry rows");
    if (!st && !bb.psw) st = alloc_bytes((void **)&e.pos, m, sizeof(int64_t), "entry bags");
    if (!st && bb.psw) {
        int64_t cnt;
        if (!emb__mul_i64(m, D, &cnt)) cnt = INT64_MAX;
        st = alloc_bytes((void **)&e.owned_values, cnt, sizeof(float), "weighted values");
    }
    if (!st && !bb.psw && c.mode == EMB_BAG_MEAN) {
        int64_t cnt;
        if (!emb__mul_i64(bb.B, D, &cnt)) cnt = INT64_MAX;
        st = alloc_bytes((void **)&e.owned_values, cnt, sizeof(float), "scaled bag gradients");
    }
    if (st) {
        emb__bag_entries_free(&e);
        emb__bag_batch_free(&bb);
        return st;
    }
    const float *go = grad_output->data;
    if (!bb.starts) { /* dim 0 and no positions: no entries */
        e.values = go;
    } else if (bb.psw) {
        int64_t got = emb__bag_sparse_gather_ref(e.rows, e.owned_values, bb.idx, bb.i32, bb.starts,
                                                 bb.B, go, D, bb.psw, false, c.pad, bb.n);
        (void)got;
        e.values = e.owned_values;
    } else {
        int64_t k = 0;
        for (int64_t b = 0; b < bb.B; b++) {
            int64_t count = 0;
            for (int64_t p = bb.starts[b]; p < bb.starts[b + 1]; p++) {
                const int64_t r = emb__index_at(input, p);
                if (r == c.pad) continue;
                e.rows[k] = r;
                e.pos[k++] = b;
                count++;
            }
            if (c.mode == EMB_BAG_MEAN && count > 0) {
                /* the same float product as emb__bag_sparse_gather_ref's */
                const float f = 1.0f / (float)count;
                float *dst = e.owned_values + b * D;
                for (int64_t d = 0; d < D; d++) dst[d] = go[b * D + d] * f;
            }
        }
        e.values = c.mode == EMB_BAG_MEAN ? e.owned_values : go;
    }
    emb__bag_batch_free(&bb);
    *out = e;
    return EMB_OK;
}
