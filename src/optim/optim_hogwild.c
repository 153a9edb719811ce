/* src/optim/optim_hogwild.c: row updates from several threads (Hogwild; include/emb/optim.h
 * says what is safe): emb_optimizer_advance_step counts a step once, then any number of
 * threads call emb_optimizer_update_rows, each applying one sparse gradient of that step on
 * its own thread. A row update never allocates state and never changes the step count. */
#include "optim_internal.h"
#include "kernels/argsort.h"
#include "kernels/dispatch.h"

#include <inttypes.h>
#include <string.h>

emb_status emb_optimizer_advance_step(emb_optimizer *opt, int param_id) {
    emb__param_state *ps = NULL;
    emb_status st = emb__optim_get_param(opt, param_id, &ps);
    if (st) return st;
    if (ps->steps == INT64_MAX) return emb__optim_steps_overflow(param_id);
    ps->steps++;
    return EMB_OK;
}

emb_status emb_optimizer_update_rows(const emb_optimizer *opt, int param_id, const emb_tensor *rows,
                                     const emb_tensor *values) {
    emb_status st = emb__optim_check_param_id(opt, param_id);
    if (st) return st;
    const emb__param_state *ps = &opt->ps[param_id];
    st = emb__check_indices(rows, "rows", "emb_optimizer_update_rows");
    if (st) return st;
    if (rows->ndim != 1) {
        char b[300];
        return emb__error(EMB_ERR_SHAPE, "rows must be 1-D, got shape %s",
                          emb__shape_fmt(b, sizeof b, rows->ndim, rows->shape));
    }
    if (!values) return emb__null("values");
    st = emb__optim_check_sparse_kind(opt, ps, param_id);
    if (st) return st;
    const int64_t nrows = ps->shape[0], dim = ps->shape[1], n = rows->shape[0];
    const int64_t vshape[2] = {n, dim};
    st = emb__check_f32_shape(values, "values", 2, vshape);
    if (st) return st;
    int64_t bad = emb__find_bad_index(rows, nrows);
    if (bad >= 0) return emb__index_error(rows, bad, nrows, "a parameter");
    st = emb__optim_check_sparse_options(opt, ps, param_id);
    if (st) return st;
    const emb_optimizer_options *o = &opt->o;
    if (o->kind == EMB_OPTIMIZER_SGD && o->momentum != 0.0)
        return emb__error(EMB_ERR_UNSUPPORTED,
                          "SGD with momentum cannot update rows concurrently: its momentum "
                          "buffer is one tensor for the whole parameter that every step "
                          "rewrites (PyTorch's sparse buffer merges all rows)");
    if (ps->steps < 1)
        return emb__error(EMB_ERR_STATE,
                          "parameter %d has made no step: call emb_optimizer_advance_step "
                          "before its row updates",
                          param_id);
    if (o->kind != EMB_OPTIMIZER_SGD && !ps->initialized)
        return emb__error(EMB_ERR_STATE,
                          "parameter %d has no state: call emb_optimizer_init_state before "
                          "row updates (they never allocate state)",
                          param_id);
    if (n == 0 || dim == 0) return EMB_OK; /* nothing to update (values may be NULL) */

    /* The entries as a sparse gradient of this step, rows as int64. */
    const emb__optim_kernel_table *K = emb__kernels()->optim;
    int64_t *keys = NULL;
    if (rows->dtype != EMB_INT64) {
        st = emb__optim_alloc_i64(n, &keys, "emb_optimizer_update_rows");
        if (st) return st;
        for (int64_t i = 0; i < n; i++) keys[i] = emb__index_at(rows, i);
    }
    const emb__spview g = {n, dim, keys ? keys : rows->data, values->data, NULL, false};
    float *p = emb__optim_param_data(ps);
    if (o->kind == EMB_OPTIMIZER_SGD) {
        const float neg_lr = (float)(-o->lr), alpha = o->maximize ? -neg_lr : neg_lr;
        for (int64_t k = 0; k < n; k++)
            K->axpy(p + g.rows[k] * dim, emb__sv_row(&g, k), alpha, dim);
        emb__free(keys);
        return EMB_OK;
    }
    /* Adagrad, SparseAdam: coalesce on this thread, then one update per unique row. */
    bool ascending = true;
    for (int64_t k = 1; ascending && k < n; k++) ascending = g.rows[k - 1] < g.rows[k];
    int64_t *pairs = NULL;
    float *acc = NULL;
    if (!ascending) {
        int64_t n2;
        st = emb__mul_i64(n, 2, &n2) ? emb__optim_alloc_i64(n2, &pairs, "emb_optimizer_update_rows")
                                     : emb__error(EMB_ERR_OVERFLOW, "%" PRId64 " rows overflow", n);
    }
    if (!st) st = emb__optim_alloc_f32(1, dim, &acc, "emb_optimizer_update_rows");
    if (st) {
        emb__free(keys);
        emb__free(pairs);
        return st;
    }
    /* on the caller's thread: concurrent callers are the threads */
    if (pairs) emb__argsort_pairs_i64_mt(g.rows, n, pairs, 1);
    emb__row_update u;
    memset(&u, 0, sizeof u);
    u.kind = o->kind;
    u.p = p;
    u.s1 = ps->s1;
    u.s2 = ps->s2;
    if (o->kind == EMB_OPTIMIZER_ADAGRAD)
        u.ag = emb__optim_adagrad_args(o, ps->steps);
    else
        u.sa = emb__optim_sparse_adam_args(o, ps->steps);
    emb__optim_coalesced_update(K, &g, pairs, o->maximize ? -1.0f : 1.0f, &u, acc, 1);
    emb__free(keys);
    emb__free(pairs);
    emb__free(acc);
    return EMB_OK;
}
