/* src/mpi/mpi_dense.c: dense gradients of a sharded table. Each owner ends with the rows
 * [begin, end) of the single process's dense gradient of the joined batch, bit for bit:
 *   - lookups: libemb sums a row's terms in position order, so the owner receives its rows'
 *     terms in rank order (the joined order) and calls emb_embedding_backward on them, with
 *     scale_grad_by_freq's counts taken over those terms (all of a row's positions);
 *   - bags, sum and mean: libemb sums a row's terms in the order of PyTorch's unstable sort
 *     of the whole input, which depends on every key of the batch; every rank receives the
 *     joined batch's keys (MPI_Allgatherv), computes that order with
 *     emb_sparse_grad_coalesce_order and runs libemb's own group kernel over its rows;
 *   - bags, max: per element, the bags' gradients in bag order (the joined order).
 * The dense optimizer steps are elementwise, so the shard's step is the single process's
 * step restricted to its rows. */
#include "mpi_internal.h"
#include "kernels/nan_rules.h"

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-function"
#include "kernels/bag_body.h"
#pragma GCC diagnostic pop

#include <inttypes.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

/* ---- records to owners -------------------------------------------------------------- */

/* Sends n records of rec bytes (recs, in order) to the ranks dest[k], grouped by rank in
 * record order; this rank receives its records in rank order, each rank's in its order:
 * *out (freed by the caller), *nrecv records. */
static emb_status send_records(emb_mpi_table *t, const int *dest, const unsigned char *recs,
                               int64_t n, size_t rec, unsigned char **out, int64_t *nrecv) {
    const int R = t->size;
    *out = NULL;
    *nrecv = 0;
    int *buf = calloc((size_t)R * 5, sizeof *buf);
    unsigned char *sbuf = malloc((size_t)(n ? n : 1) * rec);
    emb_status st =
        buf && sbuf ? EMB_OK : emb_set_error(EMB_ERR_NOMEM, "cannot allocate the exchange");
    int *scnt = buf, *sdis = buf + R, *rcnt = buf + 2 * R, *rdis = buf + 3 * R, *fill = buf + 4 * R;
    MPI_Datatype type = MPI_DATATYPE_NULL;
    if (!st && rec > INT_MAX) st = emb_set_error(EMB_ERR_UNSUPPORTED, "gradient rows too wide");
    if (!st) {
        for (int64_t k = 0; k < n; k++) scnt[dest[k]]++;
        for (int r = 0, acc = 0; r < R; r++) {
            sdis[r] = fill[r] = acc;
            acc += scnt[r];
        }
        for (int64_t k = 0; k < n; k++)
            memcpy(sbuf + (size_t)fill[dest[k]]++ * rec, recs + (size_t)k * rec, rec);
        int rc = emb__mpi_alltoall(t->timeout_ms, scnt, 1, MPI_INT, rcnt, 1, MPI_INT, t->comm);
        t->stats.bytes_sent += (uint64_t)(R - 1) * sizeof(int);
        if (rc != MPI_SUCCESS) st = emb__mpi_fail(rc, "MPI_Alltoall");
    }
    int64_t m = 0;
    for (int r = 0; !st && r < R; r++) {
        rdis[r] = (int)m;
        m += rcnt[r];
        if (m > INT_MAX) st = emb_set_error(EMB_ERR_UNSUPPORTED, "%" PRId64 " records", m);
    }
    if (!st) {
        *out = malloc((size_t)(m ? m : 1) * rec);
        if (!*out) st = emb_set_error(EMB_ERR_NOMEM, "cannot allocate %" PRId64 " records", m);
    }
    if (!st) {
        MPI_Type_contiguous((int)rec, MPI_BYTE, &type);
        MPI_Type_commit(&type);
        int rc = emb__mpi_alltoallv(t->timeout_ms, sbuf, scnt, sdis, type, *out, rcnt, rdis, type,
                                    t->comm);
        if (rc != MPI_SUCCESS) st = emb__mpi_fail(rc, "MPI_Alltoallv");
        uint64_t b = 0;
        for (int r = 0; r < R; r++)
            if (r != t->rank) b += (uint64_t)scnt[r] * rec;
        t->stats.grad_bytes += b;
        t->stats.bytes_sent += b;
        MPI_Type_free(&type);
    }
    if (st) {
        free(*out);
        *out = NULL;
        m = 0;
    }
    *nrecv = m;
    free(buf);
    free(sbuf);
    return st;
}

static int64_t index_at(const emb_tensor *x, int64_t i) {
    return x->dtype == EMB_INT32 ? ((const int32_t *)x->data)[i] : ((const int64_t *)x->data)[i];
}

/* The bags' position ranges: bag b covers [starts[b], starts[b + 1]) (arguments checked). */
static void bag_starts(const emb_mpi_table *t, const emb_tensor *input, const emb_tensor *offsets,
                       int64_t B, int64_t *starts) {
    const int64_t n = emb_tensor_numel(input);
    if (input->ndim == 2 || !offsets) {
        const int64_t L = input->ndim == 2 ? input->shape[1] : 0;
        for (int64_t b = 0; b <= B; b++) starts[b] = b * L;
        return;
    }
    for (int64_t b = 0; b < B; b++) starts[b] = index_at(offsets, b);
    starts[B] = B == 0 ? 0 : t->opts.include_last_offset ? index_at(offsets, B) : n;
}

/* The non-padding positions of each bag. */
static void bag_counts(const emb_mpi_table *t, const int64_t *ids, const int64_t *starts, int64_t B,
                       int64_t *count) {
    for (int64_t b = 0; b < B; b++) {
        int64_t k = 0;
        for (int64_t p = starts[b]; p < starts[b + 1]; p++) k += ids[p] != t->opts.padding_idx;
        count[b] = k;
    }
}

static bool mine(const emb_mpi_table *t, int64_t row) {
    return row >= t->row_begin && row < t->row_end;
}

/* ---- sum and mean --------------------------------------------------------------------- */

/* A term of a bag's row gradient: its bag's count (mean), its weight, the bag's gradient. */
#define TERM_HEAD (sizeof(int64_t) + sizeof(float))

static emb_status sum_mean(emb_mpi_table *t, const int64_t *ids, const int64_t *starts, int64_t B,
                           const float *psw, const float *go, float *gw) {
    const int64_t D = t->dim, end = B > 0 ? starts[B] : 0, pad = t->opts.padding_idx;
    const size_t rec = TERM_HEAD + (size_t)D * sizeof(float);
    const bool mean = t->opts.mode == EMB_BAG_MEAN;
    int64_t *count = malloc((size_t)(B + 1) * sizeof *count), n = 0;
    int *dest = malloc((size_t)(end + 1) * sizeof *dest);
    unsigned char *recs = malloc((size_t)(end + 1) * rec), *got = NULL;
    int64_t *all = NULL, total = 0, nrecv = 0, *perm = NULL, *lkeys = NULL, *o2b = NULL;
    int64_t *rcount = NULL;
    float *rgo = NULL, *rpsw = NULL, *acc = NULL;
    emb_status st = count && dest && recs
                        ? EMB_OK
                        : emb_set_error(EMB_ERR_NOMEM, "cannot allocate the gradient terms");
    if (!st) {
        bag_counts(t, ids, starts, B, count);
        for (int64_t b = 0; b < B; b++)
            for (int64_t p = starts[b]; p < starts[b + 1]; p++) {
                if (ids[p] == pad) continue;
                unsigned char *r = recs + (size_t)n * rec;
                const float w = psw ? psw[p] : 1.0f;
                memcpy(r, &count[b], sizeof(int64_t));
                memcpy(r + sizeof(int64_t), &w, sizeof w);
                memcpy(r + TERM_HEAD, go + b * D, (size_t)D * sizeof(float));
                dest[n++] = emb_mpi_table_owner(t, ids[p]);
            }
    }
    /* Past the agreement a failure is MPI's (its handler ends the job) or memory's. */
    if (!st) st = send_records(t, dest, recs, n, rec, &got, &nrecv);
    if (!st) st = emb__mpi_joined_rows(t, ids, end, &all, &total);
    const int64_t nloc = t->row_end - t->row_begin;
    if (!st && nloc > 0 && nrecv > 0) {
        perm = malloc((size_t)total * sizeof *perm);
        lkeys = malloc((size_t)total * sizeof *lkeys);
        o2b = malloc((size_t)total * sizeof *o2b);
        rpsw = malloc((size_t)total * sizeof *rpsw);
        rcount = malloc((size_t)nrecv * sizeof *rcount);
        rgo = malloc((size_t)(nrecv * D) * sizeof *rgo);
        acc = malloc((size_t)D * sizeof *acc);
        if (!perm || !lkeys || !o2b || !rpsw || !rcount || !rgo || !acc)
            st = emb_set_error(EMB_ERR_NOMEM, "cannot allocate the shard's gradient");
    }
    if (!st && perm) {
        int64_t c = 0;
        for (int64_t e = 0; e < total; e++) {
            lkeys[e] = all[e] - t->row_begin;
            o2b[e] = -1;
            rpsw[e] = 1.0f;
            if (!mine(t, all[e]) || all[e] == pad) continue;
            if (c < nrecv) {
                const unsigned char *r = got + (size_t)c * rec;
                memcpy(&rcount[c], r, sizeof(int64_t));
                memcpy(&rpsw[e], r + sizeof(int64_t), sizeof(float));
                memcpy(rgo + c * D, r + TERM_HEAD, (size_t)D * sizeof(float));
            }
            o2b[e] = c++;
        }
        if (c != nrecv) /* cannot happen: every rank sent its own rows' terms */
            st = emb_set_error(EMB_ERR_STATE, "received %" PRId64 " terms, expected %" PRId64,
                               nrecv, c);
        emb_tensor tk, tp;
        if (!st) st = emb_tensor_init(&tk, EMB_INT64, all, 1, &total);
        if (!st) st = emb_tensor_init(&tp, EMB_INT64, perm, 1, &total);
        if (!st) st = emb_sparse_grad_coalesce_order(&tk, &tp);
        if (!st) {
            /* the groups of this rank's rows: one run of the sorted keys */
            int64_t i0 = 0, i1;
            while (i0 < total && all[perm[i0]] < t->row_begin) i0++;
            for (i1 = i0; i1 < total && all[perm[i1]] < t->row_end;) i1++;
            const int64_t lpad =
                pad != EMB_PADDING_NONE && mine(t, pad) ? pad - t->row_begin : EMB_PADDING_NONE;
            bag_backward_groups_body(gw, rgo, D, lkeys, perm, o2b, mean ? rcount : NULL, rpsw, i0,
                                     i1, lpad, t->opts.scale_grad_by_freq, false, 0, nloc, acc);
        }
    }
    free(count);
    free(dest);
    free(recs);
    free(got);
    free(all);
    free(perm);
    free(lkeys);
    free(o2b);
    free(rcount);
    free(rgo);
    free(rpsw);
    free(acc);
    return st;
}

/* ---- max ------------------------------------------------------------------------------ */

/* One element's gradient term: its place (shard row * dim + column) and arrival. */
typedef struct max_term {
    int64_t key, seq;
    float g;
} max_term;

static int cmp_term(const void *a, const void *b) {
    const max_term *x = a, *y = b;
    if (x->key != y->key) return (x->key > y->key) - (x->key < y->key);
    return (x->seq > y->seq) - (x->seq < y->seq);
}

/* Each non-empty bag goes, as its gradient row and max_indices row, to every owner of a row
 * it names; an owner adds each element's terms in the joined batch's bag order, from +0.0,
 * then into the gradient (libemb's max backward). */
static emb_status max_grad(emb_mpi_table *t, const int64_t *ids, const int64_t *starts, int64_t B,
                           const int64_t *mi, const float *go, float *gw) {
    const int64_t D = t->dim, R = t->size;
    const size_t rec = (size_t)D * (sizeof(float) + sizeof(int64_t));
    int64_t *count = malloc((size_t)(B + 1) * sizeof *count), n = 0, nrecv = 0;
    int *dest = malloc((size_t)(B * R + 1) * sizeof *dest);
    unsigned char *recs = malloc((size_t)(B * R + 1) * rec), *got = NULL;
    bool *to = malloc((size_t)R * sizeof *to);
    max_term *terms = NULL;
    emb_status st = count && dest && recs && to
                        ? EMB_OK
                        : emb_set_error(EMB_ERR_NOMEM, "cannot allocate the gradient terms");
    if (!st) {
        bag_counts(t, ids, starts, B, count);
        for (int64_t b = 0; b < B; b++) {
            if (count[b] == 0) continue;
            memset(to, 0, (size_t)R * sizeof *to);
            for (int64_t d = 0; d < D; d++) to[emb_mpi_table_owner(t, mi[b * D + d])] = true;
            for (int r = 0; r < R; r++) {
                if (!to[r]) continue;
                unsigned char *x = recs + (size_t)n * rec;
                memcpy(x, go + b * D, (size_t)D * sizeof(float));
                memcpy(x + (size_t)D * sizeof(float), mi + b * D, (size_t)D * sizeof(int64_t));
                dest[n++] = r;
            }
        }
    }
    if (!st) st = send_records(t, dest, recs, n, rec, &got, &nrecv);
    int64_t m = 0;
    if (!st && nrecv > 0) {
        terms = malloc((size_t)(nrecv * D) * sizeof *terms);
        if (!terms) st = emb_set_error(EMB_ERR_NOMEM, "cannot allocate the gradient terms");
        for (int64_t j = 0; !st && j < nrecv; j++) {
            const unsigned char *x = got + (size_t)j * rec;
            for (int64_t d = 0; d < D; d++) {
                int64_t row;
                float g;
                memcpy(&g, x + (size_t)d * sizeof(float), sizeof g);
                memcpy(&row, x + (size_t)D * sizeof(float) + (size_t)d * sizeof(int64_t),
                       sizeof row);
                if (!mine(t, row)) continue;
                terms[m] = (max_term){(row - t->row_begin) * D + d, m, g};
                m++;
            }
        }
    }
    if (!st && m > 0) {
        qsort(terms, (size_t)m, sizeof *terms, cmp_term);
        for (int64_t i = 0; i < m;) {
            float f = 0.0f + terms[i].g;
            int64_t j = i + 1;
            for (; j < m && terms[j].key == terms[i].key; j++) f = f + terms[j].g;
            gw[terms[i].key] = gw[terms[i].key] + f;
            i = j;
        }
    }
    free(count);
    free(dest);
    free(recs);
    free(to);
    free(got);
    free(terms);
    return st;
}

/* ---- the calls ------------------------------------------------------------------------ */

static emb_status check_grad_shard(const emb_mpi_table *t, const emb_tensor *g) {
    const int64_t shape[2] = {t->row_end - t->row_begin, t->dim};
    return emb__mpi_check_f32(g, "grad_shard", 2, shape);
}

static emb_status check_max_indices(const emb_mpi_table *t, const emb_tensor *mi, int64_t B) {
    if (t->opts.mode != EMB_BAG_MAX)
        return mi ? emb_set_error(EMB_ERR_INVALID,
                                  "max_indices is only used in mode max; pass NULL")
                  : EMB_OK;
    if (!mi)
        return emb_set_error(EMB_ERR_NULL, "max_indices must not be NULL in mode max (pass the "
                                           "max_indices the forward produced)");
    emb_status st = emb_tensor_check(mi, "max_indices");
    if (st) return st;
    if (mi->dtype != EMB_INT64 || mi->ndim != 2 || mi->shape[0] != B || mi->shape[1] != t->dim)
        return emb_set_error(EMB_ERR_SHAPE, "max_indices must be int64 [%" PRId64 ", %" PRId64 "]",
                             B, t->dim);
    const int64_t *v = mi->data;
    for (int64_t i = 0; i < B * t->dim; i++)
        if (v[i] < 0 || v[i] >= t->num_embeddings)
            return emb_set_error(
                EMB_ERR_INDEX,
                "max_indices[%" PRId64 "][%" PRId64 "] = %" PRId64
                " is out of range for a table of %" PRId64 " rows (valid: [0, %" PRId64 "))",
                i / t->dim, i % t->dim, v[i], t->num_embeddings, t->num_embeddings);
    return EMB_OK;
}

emb_status emb_mpi_table_bag_backward_dense(emb_mpi_table *t, const emb_tensor *input,
                                            const emb_tensor *offsets,
                                            const emb_tensor *per_sample_weights,
                                            const emb_tensor *max_indices,
                                            const emb_tensor *grad_output, emb_tensor *grad_shard) {
    if (!t) return emb_set_error(EMB_ERR_NULL, "table must not be NULL");
    int64_t B = 0;
    emb__mpi_route r;
    memset(&r, 0, sizeof r);
    int64_t *starts = NULL;
    emb_status st =
        emb__mpi_check_bag(t, input, offsets, per_sample_weights, grad_output, "grad_output", &B);
    if (!st && !grad_output) st = emb_set_error(EMB_ERR_NULL, "grad_output must not be NULL");
    if (!st) st = check_max_indices(t, max_indices, B);
    if (!st) st = check_grad_shard(t, grad_shard);
    if (!st) st = emb__mpi_route_build(t, input, &r);
    if (!st) {
        starts = malloc((size_t)(B + 1) * sizeof *starts);
        if (!starts) st = emb_set_error(EMB_ERR_NOMEM, "cannot allocate the bags");
    }
    t->stats.calls++;
    st = emb__mpi_agree(t, st, "the dense backward");
    if (!st) {
        bag_starts(t, input, offsets, B, starts);
        const float *psw = per_sample_weights ? per_sample_weights->data : NULL;
        if (t->opts.mode == EMB_BAG_MAX)
            st = max_grad(t, r.ids, starts, B, max_indices->data, grad_output->data,
                          grad_shard->data);
        else
            st = sum_mean(t, r.ids, starts, B, psw, grad_output->data, grad_shard->data);
        st = emb__mpi_agree(t, st, "the dense backward");
    }
    free(starts);
    emb__mpi_route_free(&r);
    return st;
}

/* A lookup's terms go to their owners with their rows; the owner's emb_embedding_backward
 * over them sums each row in the joined batch's order. */
static emb_status lookup_grad(emb_mpi_table *t, const int64_t *ids, int64_t n, const float *go,
                              emb_tensor *gw) {
    const int64_t D = t->dim, pad = t->opts.padding_idx;
    const size_t rec = sizeof(int64_t) + (size_t)D * sizeof(float);
    int *dest = malloc((size_t)(n + 1) * sizeof *dest);
    unsigned char *recs = malloc((size_t)(n + 1) * rec), *got = NULL;
    int64_t m = 0, nrecv = 0, *rid = NULL;
    float *rgo = NULL;
    emb_status st =
        dest && recs ? EMB_OK : emb_set_error(EMB_ERR_NOMEM, "cannot allocate the terms");
    for (int64_t p = 0; !st && p < n; p++) {
        if (ids[p] == pad) continue;
        memcpy(recs + (size_t)m * rec, &ids[p], sizeof(int64_t));
        memcpy(recs + (size_t)m * rec + sizeof(int64_t), go + p * D, (size_t)D * sizeof(float));
        dest[m++] = emb_mpi_table_owner(t, ids[p]);
    }
    if (!st) st = send_records(t, dest, recs, m, rec, &got, &nrecv);
    if (!st && nrecv > 0) {
        rid = malloc((size_t)nrecv * sizeof *rid);
        rgo = malloc((size_t)(nrecv * D) * sizeof *rgo);
        if (!rid || !rgo) st = emb_set_error(EMB_ERR_NOMEM, "cannot allocate the terms");
    }
    if (!st && nrecv > 0) {
        for (int64_t j = 0; j < nrecv; j++) {
            memcpy(&rid[j], got + (size_t)j * rec, sizeof(int64_t));
            rid[j] -= t->row_begin;
            memcpy(rgo + j * D, got + (size_t)j * rec + sizeof(int64_t), (size_t)D * sizeof(float));
        }
        /* a stand-in embedding of the shard's shape (its weight is not read: the gradient's
         * memory serves) with the table's scale_grad_by_freq */
        emb_embedding_options eo = emb_embedding_options_default();
        eo.scale_grad_by_freq = t->opts.scale_grad_by_freq;
        emb_embedding *e = NULL;
        emb_tensor ti, tg;
        const int64_t gs[2] = {nrecv, D};
        st = emb_embedding_wrap(gw, NULL, false, &eo, &e);
        if (!st) st = emb_tensor_init(&ti, EMB_INT64, rid, 1, &nrecv);
        if (!st) st = emb_tensor_init(&tg, EMB_FLOAT32, rgo, 2, gs);
        if (!st) st = emb_embedding_backward(e, &ti, &tg, gw);
        emb_embedding_free(e);
    }
    free(dest);
    free(recs);
    free(got);
    free(rid);
    free(rgo);
    return st;
}

emb_status emb_mpi_table_lookup_backward_dense(emb_mpi_table *t, const emb_tensor *indices,
                                               const emb_tensor *grad_output,
                                               emb_tensor *grad_shard) {
    if (!t) return emb_set_error(EMB_ERR_NULL, "table must not be NULL");
    int64_t shape[EMB_MAX_DIMS];
    int ndim = 0;
    emb__mpi_route r;
    memset(&r, 0, sizeof r);
    emb_status st =
        emb_embedding_output_shape(emb_bag_embedding(t->checker), indices, &ndim, shape);
    if (!st) st = emb__mpi_check_f32(grad_output, "grad_output", ndim, shape);
    if (!st) st = check_grad_shard(t, grad_shard);
    if (!st) st = emb__mpi_route_build(t, indices, &r);
    t->stats.calls++;
    st = emb__mpi_agree(t, st, "the dense backward");
    if (!st) {
        st = lookup_grad(t, r.ids, r.n, grad_output->data, grad_shard);
        st = emb__mpi_agree(t, st, "the dense backward");
    }
    emb__mpi_route_free(&r);
    return st;
}

emb_status emb_mpi_table_step_dense(emb_mpi_table *t, const emb_tensor *grad_shard) {
    if (!t) return emb_set_error(EMB_ERR_NULL, "table must not be NULL");
    emb_status st = EMB_OK;
    if (!t->have_opt || !t->opt_dense)
        st = emb_set_error(EMB_ERR_STATE, "the table has no dense optimizer "
                                          "(emb_mpi_table_set_optimizer_dense)");
    else if (t->read_only)
        st = emb_set_error(EMB_ERR_READ_ONLY,
                           "the table's rows are mapped read-only: a step would write them");
    else
        st = check_grad_shard(t, grad_shard);
    t->stats.calls++;
    st = emb__mpi_agree(t, st, "the step");
    if (st) return st;
    if (t->opt) st = emb_optimizer_step(t->opt, 0, grad_shard);
    return emb__mpi_agree(t, st, "the step");
}
