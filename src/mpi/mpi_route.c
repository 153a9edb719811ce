/* src/mpi/mpi_route.c: the collective calls of a sharded table. Forward: each rank sends
 * the distinct rows its batch names to their owners (MPI_Alltoallv), the owners send the
 * rows back, and each rank pools its own bags over the fetched rows with libemb's own
 * calls, which is exact because a bag's result depends only on its rows. Backward: each
 * rank forms its gradient entries with libemb (emb_bag_backward_sparse over the fetched
 * rows' stand-in), the entries go to their rows' owners in rank order, which is the joined
 * batch's order; owners apply them (SGD) or sum each row's entries in the order coalesce()
 * of the joined batch sums them (Adagrad, SparseAdam, the shard's gradient). */
#include "mpi_internal.h"
#include "kernels/nan_rules.h"

#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

static int cmp_i64(const void *a, const void *b) {
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

static int64_t find(const int64_t *a, int64_t n, int64_t key) {
    int64_t lo = 0, hi = n;
    while (lo < hi) {
        int64_t mid = lo + (hi - lo) / 2;
        if (a[mid] < key)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

void emb__mpi_route_free(emb__mpi_route *r) {
    free(r->ids);
    free(r->uniq);
    free(r->local);
    emb_bag_free(r->bag);
    emb_qtable_free(r->q);
    free(r->rows);
    memset(r, 0, sizeof *r);
}

emb_status emb__mpi_route_build(const emb_mpi_table *t, const emb_tensor *indices,
                                emb__mpi_route *r) {
    memset(r, 0, sizeof *r);
    const int64_t n = emb_tensor_numel(indices);
    if (n > INT_MAX)
        return emb_set_error(EMB_ERR_UNSUPPORTED,
                             "a batch of %" PRId64 " positions is more than "
                             "one MPI message holds (%d)",
                             n, INT_MAX);
    const int64_t pad = t->opts.padding_idx;
    r->n = n;
    r->ids = malloc((size_t)(n ? n : 1) * sizeof *r->ids);
    r->uniq = malloc((size_t)(n + 1) * sizeof *r->uniq);
    r->local = malloc((size_t)(n ? n : 1) * sizeof *r->local);
    if (!r->ids || !r->uniq || !r->local) {
        emb__mpi_route_free(r);
        return emb_set_error(EMB_ERR_NOMEM, "cannot allocate the routing of %" PRId64 " positions",
                             n);
    }
    for (int64_t p = 0; p < n; p++) {
        int64_t id = indices->dtype == EMB_INT32 ? ((const int32_t *)indices->data)[p]
                                                 : ((const int64_t *)indices->data)[p];
        if (id < 0 || id >= t->num_embeddings) {
            emb__mpi_route_free(r);
            return emb_set_error(EMB_ERR_INDEX,
                                 "index %" PRId64 " at position %" PRId64
                                 " is out of range for a sharded table of %" PRId64
                                 " rows (valid: [0, %" PRId64 "))",
                                 id, p, t->num_embeddings, t->num_embeddings);
        }
        r->ids[p] = id;
    }
    memcpy(r->uniq, r->ids, (size_t)n * sizeof *r->uniq);
    int64_t m = n;
    if (pad != EMB_PADDING_NONE) r->uniq[m++] = pad;
    qsort(r->uniq, (size_t)m, sizeof *r->uniq, cmp_i64);
    int64_t u = 0;
    for (int64_t i = 0; i < m; i++)
        if (u == 0 || r->uniq[i] != r->uniq[u - 1]) r->uniq[u++] = r->uniq[i];
    r->nu = u;
    for (int64_t p = 0; p < n; p++) r->local[p] = find(r->uniq, u, r->ids[p]);
    r->local_pad = pad == EMB_PADDING_NONE ? EMB_PADDING_NONE : find(r->uniq, u, pad);
    const int64_t rows = u ? u : 1;
    const size_t row = (size_t)t->dim * sizeof(float) > (size_t)t->row_bytes
                           ? (size_t)t->dim * sizeof(float)
                           : (size_t)t->row_bytes;
    r->rows = malloc((size_t)rows * row);
    if (!r->rows) {
        emb__mpi_route_free(r);
        return emb_set_error(EMB_ERR_NOMEM, "cannot allocate %" PRId64 " fetched rows", rows);
    }
    memset(r->rows, 0, (size_t)rows * row);
    emb_tensor w;
    int64_t wshape[2] = {rows, t->dim};
    emb_bag_options o = t->opts;
    o.padding_idx = r->local_pad;
    o.sparse = false;
    o.max_norm = INFINITY; /* the owners renormalise (emb__mpi_renorm) */
    emb_status st = emb_tensor_init(&w, EMB_FLOAT32, r->rows, 2, wshape);
    if (!st) st = emb_bag_wrap(&w, NULL, false, &o, &r->bag);
    if (!st)
        st = emb_tensor_init(&r->local_idx, EMB_INT64, r->local, indices->ndim, indices->shape);
    if (!st && t->qtype != EMB_QTYPE_F32) /* the fetched rows as stored */
        st = emb_qtable_wrap(t->qtype, u, t->dim, r->rows, (size_t)u * (size_t)t->row_bytes, NULL,
                             &r->q);
    if (st) emb__mpi_route_free(r);
    return st;
}

/* Counts and displacements of a segment list: cnt[r] items for rank r. */
static void displs_of(const int *cnt, int size, int *dis) {
    int acc = 0;
    for (int r = 0; r < size; r++) {
        dis[r] = acc;
        acc += cnt[r];
    }
}

static int64_t total_of(const int *cnt, int size) {
    int64_t s = 0;
    for (int r = 0; r < size; r++) s += cnt[r];
    return s;
}

/* Bytes of the segments this rank sends to the others (not to itself). */
static uint64_t sent_bytes(const emb_mpi_table *t, const int *cnt, size_t item) {
    uint64_t b = 0;
    for (int r = 0; r < t->size; r++)
        if (r != t->rank) b += (uint64_t)cnt[r] * item;
    return b;
}

/* Sends the distinct rows ids[0..n) (ascending, so grouped by owner) to their owners:
 * buf (4 R ints) ends with the send counts and displacements, then the receive counts and
 * displacements; *want (freed by the caller) with the rows others asked of this rank, in
 * rank order. */
static emb_status ask_owners(emb_mpi_table *t, const int64_t *ids, int64_t n, int *buf,
                             int64_t **want, int64_t *nrecv) {
    const int R = t->size;
    int *scnt = buf, *sdis = buf + R, *rcnt = buf + 2 * R, *rdis = buf + 3 * R;
    memset(buf, 0, (size_t)R * 4 * sizeof *buf);
    *want = NULL;
    *nrecv = 0;
    for (int64_t i = 0; i < n; i++) scnt[emb_mpi_table_owner(t, ids[i])]++;
    displs_of(scnt, R, sdis);
    emb_status st = EMB_OK;
    int rc = emb__mpi_alltoall(t->timeout_ms, scnt, 1, MPI_INT, rcnt, 1, MPI_INT, t->comm);
    t->stats.bytes_sent += (uint64_t)(R - 1) * sizeof(int);
    if (rc != MPI_SUCCESS) st = emb__mpi_fail(rc, "MPI_Alltoall");
    int64_t m = st ? 0 : total_of(rcnt, R);
    if (!st && m > INT_MAX)
        st = emb_set_error(EMB_ERR_UNSUPPORTED, "%" PRId64 " rows asked of one rank", m);
    if (!st) {
        displs_of(rcnt, R, rdis);
        *want = malloc((size_t)(m ? m : 1) * sizeof **want);
        if (!*want) st = emb_set_error(EMB_ERR_NOMEM, "cannot allocate the requests");
    }
    /* Past this point a failure is MPI's: its default handler has aborted the job. */
    if (!st) {
        rc = emb__mpi_alltoallv(t->timeout_ms, ids, scnt, sdis, MPI_INT64_T, *want, rcnt, rdis,
                                MPI_INT64_T, t->comm);
        if (rc != MPI_SUCCESS) st = emb__mpi_fail(rc, "MPI_Alltoallv");
        uint64_t b = sent_bytes(t, scnt, sizeof(int64_t));
        t->stats.id_bytes += b;
        t->stats.bytes_sent += b;
    }
    *nrecv = m;
    return st;
}

emb_status emb__mpi_route_fetch(emb_mpi_table *t, emb__mpi_route *r) {
    const int R = t->size;
    int *buf = calloc((size_t)R * 4, sizeof *buf);
    if (!buf) return emb_set_error(EMB_ERR_NOMEM, "cannot allocate the counts");
    int *scnt = buf, *sdis = buf + R, *rcnt = buf + 2 * R, *rdis = buf + 3 * R;
    int64_t *want = NULL, nrecv = 0;
    unsigned char *reply = NULL;
    const size_t row = (size_t)t->row_bytes;
    const unsigned char *store = emb__mpi_stored(t);
    emb_status st = ask_owners(t, r->uniq, r->nu, buf, &want, &nrecv);
    if (!st) {
        reply = malloc((size_t)(nrecv ? nrecv : 1) * row);
        if (!reply) st = emb_set_error(EMB_ERR_NOMEM, "cannot allocate the replies");
    }
    if (!st) {
        for (int64_t i = 0; i < nrecv; i++)
            memcpy(reply + (size_t)i * row, store + (size_t)(want[i] - t->row_begin) * row, row);
        int rc = emb__mpi_alltoallv(t->timeout_ms, reply, rcnt, rdis, t->row_type, r->rows, scnt,
                                    sdis, t->row_type, t->comm);
        if (rc != MPI_SUCCESS) st = emb__mpi_fail(rc, "MPI_Alltoallv");
        uint64_t b = sent_bytes(t, rcnt, row);
        t->stats.row_bytes += b;
        t->stats.bytes_sent += b;
    }
    free(want);
    free(reply);
    free(buf);
    return st;
}

emb_status emb__mpi_renorm(emb_mpi_table *t, const emb__mpi_route *r, int64_t end) {
    if (t->opts.max_norm == INFINITY) return EMB_OK;
    /* the distinct rows of positions [0, end), ascending */
    int64_t *ids = malloc((size_t)(end > 0 ? end : 1) * sizeof *ids), *want = NULL, nrecv = 0;
    int *buf = calloc((size_t)t->size * 4, sizeof *buf);
    emb_status st = ids && buf
                        ? EMB_OK
                        : emb_set_error(EMB_ERR_NOMEM, "cannot allocate the rows to renormalise");
    int64_t u = 0;
    if (!st) {
        memcpy(ids, r->ids, (size_t)end * sizeof *ids);
        qsort(ids, (size_t)end, sizeof *ids, cmp_i64);
        for (int64_t i = 0; i < end; i++)
            if (u == 0 || ids[i] != ids[u - 1]) ids[u++] = ids[i];
    }
    st = emb__mpi_agree(t, st, "the renormalisation");
    if (!st) st = ask_owners(t, ids, u, buf, &want, &nrecv);
    if (!st && nrecv > 0) { /* emb_embedding_renorm_ renormalises each distinct row once */
        for (int64_t i = 0; i < nrecv; i++) want[i] -= t->row_begin;
        emb_tensor w, ix;
        st = emb_mpi_table_shard(t, &w);
        if (!st) st = emb_tensor_init(&ix, EMB_INT64, want, 1, &nrecv);
        if (!st) st = emb_embedding_renorm_(&w, &ix, t->opts.max_norm, t->opts.norm_type);
    }
    free(ids);
    free(want);
    free(buf);
    return st;
}

/* ---- argument checks (local, before the agreement) ----------------------------------- */

static emb_status check_indices(const emb_mpi_table *t, const emb_tensor *indices,
                                const emb_tensor *out, int64_t *shape, int *ndim) {
    emb_status st = emb_embedding_output_shape(emb_bag_embedding(t->checker), indices, ndim, shape);
    if (st) return st;
    if (out) return emb__mpi_check_f32(out, "out", *ndim, shape);
    return EMB_OK;
}

emb_status emb__mpi_check_bag(const emb_mpi_table *t, const emb_tensor *input,
                              const emb_tensor *offsets, const emb_tensor *psw,
                              const emb_tensor *out, const char *out_name, int64_t *num_bags) {
    emb_status st = emb_bag_num_bags(t->checker, input, offsets, num_bags);
    if (st) return st;
    if (psw) {
        if (t->opts.mode != EMB_BAG_SUM)
            return emb_set_error(EMB_ERR_UNSUPPORTED,
                                 "embedding_bag: per_sample_weights was "
                                 "not None. per_sample_weights is only supported for "
                                 "mode='sum' (got mode='%s'). Please open a feature request "
                                 "on GitHub.",
                                 t->opts.mode == EMB_BAG_MEAN ? "mean" : "max");
        st = emb__mpi_check_f32(psw, "per_sample_weights", input->ndim, input->shape);
        if (st) return st;
    }
    if (out) {
        int64_t shape[2] = {*num_bags, t->dim};
        return emb__mpi_check_f32(out, out_name, 2, shape);
    }
    return EMB_OK;
}

/* ---- forward ------------------------------------------------------------------------- */

emb_status emb_mpi_table_lookup(emb_mpi_table *t, const emb_tensor *indices, emb_tensor *out) {
    if (!t) return emb_set_error(EMB_ERR_NULL, "table must not be NULL");
    int64_t shape[EMB_MAX_DIMS];
    int ndim = 0;
    emb__mpi_route r;
    memset(&r, 0, sizeof r);
    emb_status st = check_indices(t, indices, out, shape, &ndim);
    if (!st && !out) st = emb_set_error(EMB_ERR_NULL, "out must not be NULL");
    if (!st) st = emb__mpi_route_build(t, indices, &r);
    t->stats.calls++;
    st = emb__mpi_agree(t, st, "the lookup");
    if (st) {
        emb__mpi_route_free(&r);
        return st;
    }
    st = emb__mpi_renorm(t, &r, r.n);
    if (!st) st = emb__mpi_route_fetch(t, &r);
    if (!st && r.q)
        st = emb_qtable_forward(r.q, &r.local_idx, out);
    else if (!st)
        st = emb_embedding_forward(emb_bag_embedding(r.bag), &r.local_idx, out);
    emb__mpi_route_free(&r);
    return emb__mpi_agree(t, st, "the lookup");
}

static int64_t index_at(const emb_tensor *x, int64_t i) {
    return x->dtype == EMB_INT32 ? ((const int32_t *)x->data)[i] : ((const int64_t *)x->data)[i];
}

/* The end of the positions inside bags (emb_bag_forward renormalises the rows of positions
 * [0, end), padding included): all of a 2-D batch, else the last offset with
 * include_last_offset, else all positions when there is a bag. */
static int64_t bag_end(const emb_mpi_table *t, const emb_tensor *input, const emb_tensor *offsets,
                       int64_t B) {
    const int64_t n = emb_tensor_numel(input);
    if (input->ndim == 2 || !offsets) return n;
    if (t->opts.include_last_offset)
        return offsets->shape[0] ? index_at(offsets, offsets->shape[0] - 1) : 0;
    return B > 0 ? n : 0;
}

emb_status emb_mpi_table_bag_forward(emb_mpi_table *t, const emb_tensor *input,
                                     const emb_tensor *offsets, const emb_tensor *psw,
                                     emb_tensor *out, emb_tensor *max_indices) {
    if (!t) return emb_set_error(EMB_ERR_NULL, "table must not be NULL");
    int64_t B = 0;
    emb__mpi_route r;
    memset(&r, 0, sizeof r);
    emb_status st = emb__mpi_check_bag(t, input, offsets, psw, out, "out", &B);
    if (!st && !out) st = emb_set_error(EMB_ERR_NULL, "out must not be NULL");
    if (!st && max_indices) {
        int64_t shape[2] = {B, t->dim};
        if (t->opts.mode != EMB_BAG_MAX)
            st = emb_set_error(EMB_ERR_INVALID, "max_indices is only for mode max");
        else if (max_indices->dtype != EMB_INT64 || max_indices->ndim != 2 ||
                 max_indices->shape[0] != shape[0] || max_indices->shape[1] != shape[1] ||
                 emb_tensor_check(max_indices, "max_indices"))
            st = emb_set_error(EMB_ERR_SHAPE,
                               "max_indices must be int64 [%" PRId64 ", %" PRId64 "]", B, t->dim);
    }
    if (!st) st = emb__mpi_route_build(t, input, &r);
    t->stats.calls++;
    st = emb__mpi_agree(t, st, "the bag forward");
    if (st) {
        emb__mpi_route_free(&r);
        return st;
    }
    st = emb__mpi_renorm(t, &r, bag_end(t, input, offsets, B));
    if (!st && t->partial_sums && t->opts.mode != EMB_BAG_MAX && t->qtype == EMB_QTYPE_F32) {
        st = emb__mpi_bag_partial(t, &r, input, offsets, psw, out, B);
        emb__mpi_route_free(&r);
        return emb__mpi_agree(t, st, "the bag forward");
    }
    if (!st) st = emb__mpi_route_fetch(t, &r);
    if (!st && r.q) {
        emb_bag_options o = t->opts;
        o.padding_idx = r.local_pad;
        st = emb_qtable_bag_forward(r.q, &r.local_idx, offsets, psw, &o, out, max_indices);
    } else if (!st) {
        st = emb_bag_forward(r.bag, &r.local_idx, offsets, psw, out, max_indices);
    }
    if (!st && max_indices) {
        /* Back from fetched-row positions to table rows; an empty (or all-padding) bag's
         * column says 0, as emb_bag_forward's does. */
        int64_t *mi = max_indices->data;
        const int64_t *lin = r.local;
        int64_t nb = B, N = r.n;
        for (int64_t b = 0; b < nb; b++) {
            int64_t p0, p1;
            if (!offsets) {
                int64_t w = input->ndim == 2 ? input->shape[1] : 0;
                p0 = b * w;
                p1 = p0 + w;
            } else {
                const bool i32 = offsets->dtype == EMB_INT32;
                int64_t k = offsets->shape[0];
                p0 =
                    i32 ? ((const int32_t *)offsets->data)[b] : ((const int64_t *)offsets->data)[b];
                p1 = b + 1 < k ? (i32 ? ((const int32_t *)offsets->data)[b + 1]
                                      : ((const int64_t *)offsets->data)[b + 1])
                               : N;
            }
            bool any = false;
            for (int64_t p = p0; p < p1 && !any; p++) any = lin[p] != r.local_pad;
            for (int64_t d = 0; d < t->dim; d++) {
                int64_t *v = mi + b * t->dim + d;
                *v = any ? r.uniq[*v] : 0;
            }
        }
    }
    emb__mpi_route_free(&r);
    return emb__mpi_agree(t, st, "the bag forward");
}

emb_status emb_mpi_table_bag_backward_per_sample_weights(emb_mpi_table *t, const emb_tensor *input,
                                                         const emb_tensor *offsets,
                                                         const emb_tensor *grad_output,
                                                         emb_tensor *grad_psw) {
    if (!t) return emb_set_error(EMB_ERR_NULL, "table must not be NULL");
    int64_t B = 0;
    emb__mpi_route r;
    memset(&r, 0, sizeof r);
    emb_status st = emb__mpi_check_bag(t, input, offsets, NULL, grad_output, "grad_output", &B);
    if (!st && t->opts.mode != EMB_BAG_SUM)
        st = emb_set_error(EMB_ERR_UNSUPPORTED, "the gradient of per_sample_weights needs "
                                                "mode sum");
    if (!st && t->qtype != EMB_QTYPE_F32)
        st = emb_set_error(EMB_ERR_UNSUPPORTED, "the gradient of per_sample_weights needs "
                                                "a float32 table");
    if (!st)
        st = emb__mpi_check_f32(grad_psw, "grad_per_sample_weights", input->ndim, input->shape);
    if (!st) st = emb__mpi_route_build(t, input, &r);
    t->stats.calls++;
    st = emb__mpi_agree(t, st, "the per_sample_weights gradient");
    if (st) {
        emb__mpi_route_free(&r);
        return st;
    }
    st = emb__mpi_route_fetch(t, &r);
    if (!st)
        st = emb_bag_backward_per_sample_weights(r.bag, &r.local_idx, offsets, grad_output,
                                                 grad_psw);
    emb__mpi_route_free(&r);
    return emb__mpi_agree(t, st, "the per_sample_weights gradient");
}

/* ---- backward ------------------------------------------------------------------------ */

/* What an owner ends with: its entries (SGD: in the joined batch's order) or its rows'
 * sums (coalesced, rows ascending), shard-local rows. */
typedef struct owned {
    int64_t n;
    int64_t *rows;
    float *vals;
} owned;

static void owned_free(owned *o) {
    free(o->rows);
    free(o->vals);
    memset(o, 0, sizeof *o);
}

emb_status emb__mpi_joined_rows(emb_mpi_table *t, const int64_t *gid, int64_t n, int64_t **all,
                                int64_t *total) {
    const int R = t->size;
    *all = NULL;
    *total = 0;
    int *buf = calloc((size_t)R * 2, sizeof *buf);
    if (!buf) return emb_set_error(EMB_ERR_NOMEM, "cannot allocate the counts");
    int *acnt = buf, *adis = buf + R;
    emb_status st = EMB_OK;
    int nmine = (int)n;
    int rc = emb__mpi_allgather(t->timeout_ms, &nmine, 1, MPI_INT, acnt, 1, MPI_INT, t->comm);
    t->stats.bytes_sent += (uint64_t)(R - 1) * sizeof(int);
    if (rc != MPI_SUCCESS) st = emb__mpi_fail(rc, "MPI_Allgather");
    const int64_t m = st ? 0 : total_of(acnt, R);
    if (!st && m > INT_MAX)
        st = emb_set_error(EMB_ERR_UNSUPPORTED, "a joined batch of %" PRId64 " entries", m);
    if (!st) {
        displs_of(acnt, R, adis);
        *all = malloc((size_t)(m ? m : 1) * sizeof **all);
        if (!*all) st = emb_set_error(EMB_ERR_NOMEM, "cannot allocate the joined batch's rows");
    }
    if (!st) {
        rc = emb__mpi_allgatherv(t->timeout_ms, gid, nmine, MPI_INT64_T, *all, acnt, adis,
                                 MPI_INT64_T, t->comm);
        if (rc != MPI_SUCCESS) st = emb__mpi_fail(rc, "MPI_Allgatherv");
        uint64_t b = (uint64_t)(R - 1) * (uint64_t)n * sizeof(int64_t);
        t->stats.id_bytes += b;
        t->stats.bytes_sent += b;
    }
    if (st) {
        free(*all);
        *all = NULL;
    }
    *total = m;
    free(buf);
    return st;
}

/* coalesce() of the owner's entries: the joined batch's rows on every rank
 * (MPI_Allgatherv, rank order), their coalesce order, and this rank's rows summed in it.
 * rval: the entries this rank received, in the joined batch's order. */
static emb_status coalesce_owned(emb_mpi_table *t, const int64_t *gid, int64_t n, const float *rval,
                                 int64_t nrecv, owned *res) {
    const int64_t D = t->dim;
    const size_t row = (size_t)D * sizeof(float);
    int64_t *rid = NULL, *all = NULL, *slot = NULL, *perm = NULL, total = 0;
    emb_status st = emb__mpi_joined_rows(t, gid, n, &all, &total);
    if (st) return st;
    perm = malloc((size_t)(total ? total : 1) * sizeof *perm);
    slot = malloc((size_t)(total ? total : 1) * sizeof *slot);
    if (!perm || !slot) {
        st = emb_set_error(EMB_ERR_NOMEM, "cannot allocate the joined batch's rows");
        goto done;
    }
    /* Entry e of the joined batch that this rank owns is its slot[e]-th received entry. */
    int64_t c = 0;
    for (int64_t e = 0; e < total; e++)
        slot[e] = all[e] >= t->row_begin && all[e] < t->row_end ? c++ : -1;
    if (c != nrecv) {
        st = emb_set_error(EMB_ERR_STATE, "received %" PRId64 " entries, expected %" PRId64, nrecv,
                           c);
        goto done;
    }
    if (c > 0) {
        emb_tensor tk, tp;
        st = emb_tensor_init(&tk, EMB_INT64, all, 1, &total);
        if (!st) st = emb_tensor_init(&tp, EMB_INT64, perm, 1, &total);
        if (!st) st = emb_sparse_grad_coalesce_order(&tk, &tp);
        if (st) goto done;
    }
    rid = malloc((size_t)(c ? c : 1) * sizeof *rid);
    float *sums = malloc((size_t)(c ? c : 1) * row);
    if (!rid || !sums) {
        free(sums);
        st = emb_set_error(EMB_ERR_NOMEM, "cannot allocate the shard's gradient");
        goto done;
    }
    int64_t u = -1;
    for (int64_t j = 0; j < total && c > 0; j++) {
        const int64_t e = perm[j];
        if (slot[e] < 0) continue;
        const float *v = rval + slot[e] * D;
        const int64_t local = all[e] - t->row_begin;
        if (u >= 0 && rid[u] == local) {
            float *o = sums + u * D; /* coalesce(): the later entry's NaN first */
            for (int64_t d = 0; d < D; d++) o[d] = emb__pick2(o[d] + v[d], v[d], o[d]);
        } else {
            rid[++u] = local;
            memcpy(sums + u * D, v, row);
        }
    }
    res->n = u + 1;
    res->rows = rid;
    res->vals = sums;
    rid = NULL;
done:
    free(rid);
    free(all);
    free(slot);
    free(perm);
    return st;
}

/* Sends this rank's entries (table rows gid[k], values val[k]) to the owners. coalesce:
 * every rank also receives the joined batch's rows (MPI_Allgatherv) and sums its rows in
 * coalesce()'s order; otherwise the owner keeps its entries in order. */
static emb_status exchange(emb_mpi_table *t, const int64_t *gid, const float *val, int64_t n,
                           bool coalesce, owned *res) {
    const int R = t->size;
    const int64_t D = t->dim;
    const size_t row = (size_t)D * sizeof(float);
    memset(res, 0, sizeof *res);
    int *buf = calloc((size_t)R * 4, sizeof *buf);
    int64_t *order = malloc((size_t)(n ? n : 1) * sizeof *order);
    int64_t *sid = malloc((size_t)(n ? n : 1) * sizeof *sid);
    float *sval = malloc((size_t)(n ? n : 1) * row);
    int64_t *rid = NULL;
    float *rval = NULL;
    emb_status st = buf && order && sid && sval
                        ? EMB_OK
                        : emb_set_error(EMB_ERR_NOMEM, "cannot allocate the exchange");
    int *scnt = buf, *sdis = buf + R, *rcnt = buf + 2 * R, *rdis = buf + 3 * R;
    int rc;
    int64_t nrecv = 0;
    if (st) goto done;
    /* Entries grouped by owner, in entry order within each group. */
    for (int64_t k = 0; k < n; k++) scnt[emb_mpi_table_owner(t, gid[k])]++;
    displs_of(scnt, R, sdis);
    {
        int *fill = rcnt; /* scratch until the counts arrive */
        memcpy(fill, sdis, (size_t)R * sizeof *fill);
        for (int64_t k = 0; k < n; k++) order[fill[emb_mpi_table_owner(t, gid[k])]++] = k;
        memset(rcnt, 0, (size_t)R * sizeof *rcnt);
    }
    for (int64_t j = 0; j < n; j++) {
        sid[j] = gid[order[j]];
        memcpy(sval + j * D, val + order[j] * D, row);
    }
    rc = emb__mpi_alltoall(t->timeout_ms, scnt, 1, MPI_INT, rcnt, 1, MPI_INT, t->comm);
    t->stats.bytes_sent += (uint64_t)(R - 1) * sizeof(int);
    if (rc != MPI_SUCCESS) {
        st = emb__mpi_fail(rc, "MPI_Alltoall");
        goto done;
    }
    nrecv = total_of(rcnt, R);
    if (nrecv > INT_MAX) {
        st = emb_set_error(EMB_ERR_UNSUPPORTED, "%" PRId64 " entries for one rank", nrecv);
        goto done;
    }
    displs_of(rcnt, R, rdis);
    rval = malloc((size_t)(nrecv ? nrecv : 1) * row);
    if (!rval) {
        st = emb_set_error(EMB_ERR_NOMEM, "cannot allocate %" PRId64 " entries", nrecv);
        goto done;
    }
    rc = emb__mpi_alltoallv(t->timeout_ms, sval, scnt, sdis, t->grad_type, rval, rcnt, rdis,
                            t->grad_type, t->comm);
    if (rc != MPI_SUCCESS) {
        st = emb__mpi_fail(rc, "MPI_Alltoallv");
        goto done;
    }
    {
        uint64_t b = sent_bytes(t, scnt, row);
        t->stats.grad_bytes += b;
        t->stats.bytes_sent += b;
    }
    if (!coalesce) {
        rid = malloc((size_t)(nrecv ? nrecv : 1) * sizeof *rid);
        if (!rid) {
            st = emb_set_error(EMB_ERR_NOMEM, "cannot allocate %" PRId64 " entries", nrecv);
            goto done;
        }
        rc = emb__mpi_alltoallv(t->timeout_ms, sid, scnt, sdis, MPI_INT64_T, rid, rcnt, rdis,
                                MPI_INT64_T, t->comm);
        if (rc != MPI_SUCCESS) {
            st = emb__mpi_fail(rc, "MPI_Alltoallv");
            goto done;
        }
        uint64_t b = sent_bytes(t, scnt, sizeof(int64_t));
        t->stats.id_bytes += b;
        t->stats.bytes_sent += b;
        for (int64_t k = 0; k < nrecv; k++) rid[k] -= t->row_begin;
        res->n = nrecv;
        res->rows = rid;
        res->vals = rval;
        rid = NULL;
        rval = NULL;
        goto done;
    }
    st = coalesce_owned(t, gid, n, rval, nrecv, res);
done:
    free(buf);
    free(order);
    free(sid);
    free(sval);
    free(rid);
    free(rval);
    return st;
}

/* The owner's part as an emb_sparse_grad of the shard. */
static emb_status owned_grad(const emb_mpi_table *t, const owned *o, emb_sparse_grad *g) {
    emb_tensor tr, tv;
    int64_t vshape[2] = {o->n, t->dim};
    emb_status st = emb_tensor_init(&tr, EMB_INT64, o->rows, 1, &o->n);
    if (!st) st = emb_tensor_init(&tv, EMB_FLOAT32, o->vals, 2, vshape);
    if (!st) st = emb_sparse_grad_from_rows(g, t->row_end - t->row_begin, t->dim, &tr, &tv);
    return st;
}

/* This rank's gradient entries as table rows and values: emb_bag_backward_sparse (bag) or
 * emb_embedding_backward_sparse (lookup) over the route's stand-in table. */
static emb_status local_entries(const emb_mpi_table *t, emb__mpi_route *r, bool bag,
                                const emb_tensor *offsets, const emb_tensor *psw,
                                const emb_tensor *grad_output, emb_sparse_grad *g) {
    emb_status st = emb_sparse_grad_init(g, r->nu ? r->nu : 1, t->dim);
    if (st) return st;
    if (bag)
        st = emb_bag_backward_sparse(r->bag, &r->local_idx, offsets, psw, grad_output, g);
    else
        st =
            emb_embedding_backward_sparse(emb_bag_embedding(r->bag), &r->local_idx, grad_output, g);
    if (st) return st;
    for (int64_t k = 0; k < g->nnz; k++) g->indices[k] = r->uniq[g->indices[k]];
    return EMB_OK;
}

typedef enum { DO_GRAD, DO_STEP } backward_what;

static emb_status backward(emb_mpi_table *t, bool bag, const emb_tensor *input,
                           const emb_tensor *offsets, const emb_tensor *psw,
                           const emb_tensor *grad_output, backward_what what,
                           emb_sparse_grad *grad_out) {
    if (!t) return emb_set_error(EMB_ERR_NULL, "table must not be NULL");
    emb_status st = EMB_OK;
    int64_t B = 0, shape[EMB_MAX_DIMS];
    int ndim = 0;
    const char *op = what == DO_STEP ? "the step" : "the backward";
    if (what == DO_STEP && !t->have_opt)
        st = emb_set_error(EMB_ERR_STATE, "the table has no optimizer "
                                          "(emb_mpi_table_set_optimizer)");
    if (!st && what == DO_STEP && t->opt_dense)
        st = emb_set_error(EMB_ERR_STATE, "the table's optimizer is for dense gradients "
                                          "(emb_mpi_table_step_dense)");
    if (!st && what == DO_STEP && t->read_only)
        st = emb_set_error(EMB_ERR_READ_ONLY,
                           "the table's rows are mapped read-only: a step would write them");
    if (!st && bag) {
        st = emb__mpi_check_bag(t, input, offsets, psw, grad_output, "grad_output", &B);
        if (!st && t->opts.mode == EMB_BAG_MAX)
            st = emb_set_error(EMB_ERR_UNSUPPORTED, "max mode does not support sparse weights");
    } else if (!st && t->qtype != EMB_QTYPE_F32) {
        st = emb_set_error(EMB_ERR_UNSUPPORTED, "a lookup step needs a float32 table");
    } else if (!st) {
        st = check_indices(t, input, grad_output, shape, &ndim);
        if (!st && !grad_output) st = emb_set_error(EMB_ERR_NULL, "grad_output must not be NULL");
    }
    if (!st && what == DO_GRAD && !grad_out)
        st = emb_set_error(EMB_ERR_NULL, "grad must not be NULL");
    emb__mpi_route r;
    memset(&r, 0, sizeof r);
    emb_sparse_grad g;
    memset(&g, 0, sizeof g);
    if (!st) st = emb__mpi_route_build(t, input, &r);
    if (!st) st = local_entries(t, &r, bag, offsets, psw, grad_output, &g);
    t->stats.calls++;
    st = emb__mpi_agree(t, st, op);
    if (st) {
        emb_sparse_grad_release(&g);
        emb__mpi_route_free(&r);
        return st;
    }
    const bool coalesce = what == DO_GRAD || t->opt_kind != EMB_OPTIMIZER_SGD;
    const bool momentum = !coalesce && t->opt_opts.momentum != 0;
    owned o;
    int64_t *all = NULL, total = 0;
    st = exchange(t, g.indices, g.values, g.nnz, coalesce, &o);
    if (!st && momentum) st = emb__mpi_joined_rows(t, g.indices, g.nnz, &all, &total);
    emb_sparse_grad_release(&g);
    emb__mpi_route_free(&r);
    emb_sparse_grad sg;
    memset(&sg, 0, sizeof sg);
    if (!st && momentum) {
        emb_optimizer_options mo = t->opt_opts; /* the rate set on the shard's optimizer */
        if (t->opt) mo.lr = emb_optimizer_lr(t->opt);
        st = emb__mpi_momentum_step(t, &mo, all, total, o.vals);
        if (!st && t->opt) st = emb_optimizer_advance_step(t->opt, 0); /* counted as libemb's */
        free(all);
        owned_free(&o);
        return st;
    }
    if (!st && (what == DO_GRAD || t->opt || t->qshard)) st = owned_grad(t, &o, &sg);
    if (!st && what == DO_STEP && t->opt) st = emb_optimizer_step_sparse(t->opt, 0, &sg);
    if (!st && what == DO_STEP && t->qshard)
        st = emb_qtable_sgd_step(t->qshard, &sg, t->qlr, EMB_QROUND_NEAREST, NULL);
    if (!st && what == DO_GRAD) {
        st = emb_sparse_grad_coalesce(&sg); /* unique ascending rows: flags it only */
        if (!st) *grad_out = sg;
    } else {
        emb_sparse_grad_release(&sg);
    }
    owned_free(&o);
    return st;
}

emb_status emb_mpi_table_bag_backward_sparse(emb_mpi_table *t, const emb_tensor *input,
                                             const emb_tensor *offsets, const emb_tensor *psw,
                                             const emb_tensor *grad_output, emb_sparse_grad *grad) {
    return backward(t, true, input, offsets, psw, grad_output, DO_GRAD, grad);
}

emb_status emb_mpi_table_bag_step(emb_mpi_table *t, const emb_tensor *input,
                                  const emb_tensor *offsets, const emb_tensor *psw,
                                  const emb_tensor *grad_output) {
    return backward(t, true, input, offsets, psw, grad_output, DO_STEP, NULL);
}

emb_status emb_mpi_table_lookup_step(emb_mpi_table *t, const emb_tensor *indices,
                                     const emb_tensor *grad_output) {
    return backward(t, false, indices, NULL, NULL, grad_output, DO_STEP, NULL);
}
