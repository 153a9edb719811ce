/* src/optim/optim_fused.c: the fused sparse backward + step of an embedding table or bag
 * (emb_optimizer_step_fused, emb_optimizer_step_fused_bag): the sparse gradient the
 * backward would build is viewed without copying its values and stepped at once. Each call
 * refuses exactly what the unfused path (backward_sparse, then step_sparse) refuses, in
 * the same order and with the same messages: nn's checks come from nn itself
 * (src/nn/nn_face.h), the step's from optim_sparse.c. */
#include "optim_internal.h"
#include "nn/nn_face.h"

emb_status emb_optimizer_step_fused(emb_optimizer *opt, int param_id, const emb_embedding *e,
                                    const emb_tensor *indices, const emb_tensor *grad_output) {
    /* 1. What emb_embedding_backward_sparse checks, in its order (no gradient buffer). */
    emb_status st = emb__embedding_sparse_check(e, indices, grad_output, NULL, false);
    if (st) return st;
    emb__table_info t;
    emb__embedding_info(e, &t);
    /* 2. What emb_optimizer_step_sparse checks, in its order, for the gradient of shape
     * [rows, dim] that backward_sparse would have built. */
    emb__param_state *ps = NULL;
    st = emb__optim_get_param(opt, param_id, &ps);
    if (st) return st;
    st = emb__optim_check_sparse_kind(opt, ps, param_id);
    if (st) return st;
    st = emb__optim_check_grad_shape(ps, param_id, t.rows, t.dim);
    if (st) return st;
    /* 3. Beyond the unfused path: the parameter must be this table's weight. */
    if (ps->data != t.weight)
        return emb__error(EMB_ERR_INVALID,
                          "parameter %d is not the embedding's weight (register the view "
                          "emb_embedding_weight gives with emb_optimizer_add_param)",
                          param_id);
    st = emb__optim_check_sparse_options(opt, ps, param_id);
    if (st) return st;
    if (t.read_only)
        return emb__error(EMB_ERR_READ_ONLY,
                          "the embedding's weight is read-only (emb_storage.read_only): an "
                          "optimizer step cannot write it");

    /* The sparse gradient backward_sparse would build, viewed without copying values:
     * surviving positions in input order. */
    const int64_t n = emb_tensor_numel(indices);
    const int64_t padding_idx = t.padding_idx;
    int64_t kept = n;
    if (padding_idx != EMB_PADDING_NONE)
        for (int64_t i = 0; i < n; i++) kept -= emb__index_at(indices, i) == padding_idx;
    int64_t *keys = NULL, *pos = NULL;
    emb__spview g = {kept, t.dim, NULL, grad_output->data, NULL, false};
    if (kept == 0) {
        g.rows = NULL;
        g.values = NULL;
    } else if (indices->dtype == EMB_INT64 && kept == n) {
        g.rows = indices->data;
    } else {
        st = emb__optim_alloc_i64(kept, &keys, "emb_optimizer_step_fused");
        if (st) return st;
        if (kept < n) {
            st = emb__optim_alloc_i64(kept, &pos, "emb_optimizer_step_fused");
            if (st) {
                emb__free(keys);
                return st;
            }
        }
        int64_t k = 0;
        for (int64_t i = 0; i < n; i++) {
            int64_t r = emb__index_at(indices, i);
            if (r == padding_idx) continue;
            keys[k] = r;
            if (pos) pos[k] = i;
            k++;
        }
        g.rows = keys;
        g.pos = pos;
    }
    g.coalesced = kept <= 1;
    st = emb__optim_sparse_step(opt, ps, &g);
    emb__free(keys);
    emb__free(pos);
    return st;
}

emb_status emb_optimizer_step_fused_bag(emb_optimizer *opt, int param_id, const emb_bag *bag,
                                        const emb_tensor *input, const emb_tensor *offsets,
                                        const emb_tensor *per_sample_weights,
                                        const emb_tensor *grad_output) {
    /* emb_bag_backward_sparse's refusals first (they do not depend on the optimizer), then
     * emb_optimizer_step_sparse's, then the fused step's own: the order of the unfused
     * path. The entries are described without copying per-position values. */
    emb__bag_entries en;
    emb_status st =
        emb__bag_sparse_entries(bag, input, offsets, per_sample_weights, grad_output, &en);
    if (st) return st;
    emb__table_info t;
    emb__bag_info(bag, &t);
    emb__param_state *ps = NULL;
    st = emb__optim_get_param(opt, param_id, &ps);
    if (!st) st = emb__optim_check_sparse_kind(opt, ps, param_id);
    if (!st) st = emb__optim_check_grad_shape(ps, param_id, t.rows, t.dim);
    if (!st) st = emb__optim_check_sparse_options(opt, ps, param_id);
    if (!st && (const float *)ps->data != t.weight)
        st = emb__error(EMB_ERR_INVALID,
                        "parameter %d is not the bag's weight (register the view "
                        "emb_bag_weight gives)",
                        param_id);
    if (!st && t.read_only)
        st = emb__error(EMB_ERR_READ_ONLY,
                        "the bag's table is read-only: an optimizer step would write it");
    if (!st) {
        const emb__spview g = {en.nnz, en.dim, en.rows, en.values, en.pos, en.nnz <= 1};
        st = emb__optim_sparse_step(opt, ps, &g);
    }
    emb__bag_entries_free(&en);
    return st;
}
