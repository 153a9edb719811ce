/* src/mpi/mpi_state.c: the state of a sharded table's optimizer, gathered: the bytes the single
 * process's optimizer of the whole [V, D] table saves (docs/optimizer-state.md, one
 * parameter), so that a state saved at R ranks loads at any rank count, and into one process.
 *
 * Every optimizer but SGD with momentum on sparse steps keeps its state in the shard's
 * emb_optimizer (a record of [end - begin, D] rows whose state buffers are row-major): the
 * whole table's buffers are the shards' buffers joined in rank order. SGD with momentum on
 * sparse steps keeps the buffer in mpi_momentum.c (the whole list's rows on every rank, the
 * values of its own rows on each): the record's rows are the list, its values the owners'
 * values in list order. Loading cuts the record into each rank's part and loads it into a
 * fresh shard optimizer with emb_optimizer_load_state, which checks it, before anything
 * changes. */
#include "mpi_internal.h"
#include "core/bytes.h"

#include <inttypes.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#define ST_HEAD   96 /* magic .. number of parameters */
#define ST_RECORD 48 /* ndim, flags, steps, buffer kind, reserved, nnz, a 2-D shape */
#define ST_TAIL   8  /* the checksum */
#define ST_BODY   (ST_HEAD + ST_RECORD)

/* SGD with momentum on sparse steps: the buffer lives in t->mom. */
static bool own_momentum(const emb_mpi_table *t) {
    return !t->opt_dense && t->opt_kind == EMB_OPTIMIZER_SGD && t->opt_opts.momentum != 0;
}

/* What the lowest rank holding rows tells the others: its state's header and record. */
typedef struct state_info {
    unsigned char head[ST_HEAD];
    uint32_t flags, buf_kind;
    uint64_t steps, nnz;
    int64_t segments; /* buffers of [rows, D] floats after the record */
} state_info;

static int first_holder(const emb_mpi_table *t) {
    int r = 0;
    while (t->begin[r] == t->begin[r + 1]) r++;
    return r;
}

/* This rank's shard state (when it holds rows): *blob, *len (freed by the caller). */
static emb_status shard_blob(const emb_mpi_table *t, unsigned char **blob, size_t *len) {
    *blob = NULL;
    *len = 0;
    if (!t->opt) return EMB_OK;
    size_t n = emb_optimizer_state_nbytes(t->opt);
    *blob = malloc(n ? n : 1);
    if (!*blob) return emb_set_error(EMB_ERR_NOMEM, "cannot allocate the optimizer state");
    emb_status st = emb_optimizer_save_state(t->opt, *blob, n);
    if (st) {
        free(*blob);
        *blob = NULL;
        return st;
    }
    *len = n;
    return EMB_OK;
}

static emb_status check_table(const emb_mpi_table *t) {
    if (!t->have_opt)
        return emb_set_error(EMB_ERR_STATE, "the table has no optimizer "
                                            "(emb_mpi_table_set_optimizer)");
    if (t->qtype != EMB_QTYPE_F32)
        return emb_set_error(EMB_ERR_UNSUPPORTED, "a table of %s rows keeps no optimizer state",
                             emb_qtype_name(t->qtype));
    return EMB_OK;
}

/* Collective: the state's header and record as the whole table's, on every rank. */
static emb_status gather_info(emb_mpi_table *t, state_info *info, unsigned char **blob,
                              size_t *len) {
    memset(info, 0, sizeof *info);
    emb_status st = check_table(t);
    if (!st) st = shard_blob(t, blob, len);
    st = emb__mpi_agree(t, st, "the optimizer state");
    if (st) return st;
    const int r0 = first_holder(t);
    if (t->rank == r0) {
        const unsigned char *b = *blob;
        const int64_t rows = t->row_end - t->row_begin;
        memcpy(info->head, b, ST_HEAD);
        info->flags = emb__get_u32le(b + ST_HEAD + 4);
        info->steps = emb__get_u64le(b + ST_HEAD + 8);
        info->buf_kind = emb__get_u32le(b + ST_HEAD + 16);
        info->nnz = emb__get_u64le(b + ST_HEAD + 24);
        info->segments = (int64_t)((*len - ST_BODY - ST_TAIL) / ((size_t)(rows * t->dim) * 4));
    }
    int rc = emb__mpi_bcast(t->timeout_ms, info, (int)sizeof *info, MPI_BYTE, r0, t->comm);
    if (rc != MPI_SUCCESS) return emb__mpi_fail(rc, "MPI_Bcast");
    if (own_momentum(t)) {
        info->buf_kind = t->mom.has ? 2 : 0;
        info->nnz = t->mom.has ? (uint64_t)t->mom.n : 0;
        info->segments = 0;
    }
    return EMB_OK;
}

static size_t state_size(const emb_mpi_table *t, const state_info *info) {
    const size_t V = (size_t)t->num_embeddings, D = (size_t)t->dim;
    const size_t body =
        own_momentum(t) ? (size_t)info->nnz * (8 + 4 * D) : (size_t)info->segments * V * D * 4;
    return ST_BODY + body + ST_TAIL;
}

emb_status emb_mpi_table_optimizer_state_nbytes(emb_mpi_table *t, size_t *nbytes) {
    if (!t) return emb_set_error(EMB_ERR_NULL, "table must not be NULL");
    state_info info;
    unsigned char *blob = NULL;
    size_t len = 0;
    emb_status st = gather_info(t, &info, &blob, &len);
    free(blob);
    if (!st && nbytes) *nbytes = state_size(t, &info);
    return st;
}

/* The record's fixed fields for a [rows, D] parameter at p. */
static void put_record(unsigned char *p, const state_info *info, int64_t rows, int64_t D) {
    emb__put_u32le(p, 2);
    emb__put_u32le(p + 4, info->flags);
    emb__put_u64le(p + 8, info->steps);
    emb__put_u32le(p + 16, info->buf_kind);
    emb__put_u32le(p + 20, 0);
    emb__put_u64le(p + 24, info->nnz);
    emb__put_u64le(p + 32, (uint64_t)rows);
    emb__put_u64le(p + 40, (uint64_t)D);
}

emb_status emb_mpi_table_save_optimizer_state(emb_mpi_table *t, int root, void *buf, size_t n) {
    if (!t) return emb_set_error(EMB_ERR_NULL, "table must not be NULL");
    state_info info;
    unsigned char *blob = NULL;
    float *mine = NULL, *parts = NULL;
    size_t len = 0;
    emb_status st = gather_info(t, &info, &blob, &len);
    if (st) return st;
    const int R = t->size;
    const int64_t D = t->dim, rows = t->row_end - t->row_begin;
    const size_t need = state_size(t, &info);
    const bool mom = own_momentum(t);
    /* this rank's floats: its buffers' rows, or its momentum entries' values */
    const int64_t nmine = mom ? t->mom.nown * D : info.segments * rows * D;
    int *counts = calloc((size_t)R * 2, sizeof *counts), *displs = counts ? counts + R : NULL;
    if (!counts)
        st = emb_set_error(EMB_ERR_NOMEM, "cannot allocate counts");
    else if (root < 0 || root >= R)
        st = emb_set_error(EMB_ERR_INVALID, "root %d is not a rank of the communicator", root);
    else if (t->rank == root && !buf)
        st = emb_set_error(EMB_ERR_NULL, "buf must not be NULL");
    else if (t->rank == root && n < need)
        st = emb_set_error(EMB_ERR_INVALID, "buf holds %zu bytes, the state needs %zu", n, need);
    else if (nmine > INT_MAX)
        st = emb_set_error(EMB_ERR_UNSUPPORTED, "a shard state of %" PRId64 " floats", nmine);
    if (!st && !mom) {
        mine = malloc((size_t)(nmine ? nmine : 1) * sizeof *mine);
        if (!mine)
            st = emb_set_error(EMB_ERR_NOMEM, "cannot allocate the shard's state");
        else if (nmine)
            emb__f32le_decode(mine, blob + ST_BODY, (size_t)nmine);
    }
    st = emb__mpi_agree(t, st, "to save the optimizer state");
    if (!st) {
        int c = (int)nmine;
        int rc = emb__mpi_allgather(t->timeout_ms, &c, 1, MPI_INT, counts, 1, MPI_INT, t->comm);
        if (rc != MPI_SUCCESS) st = emb__mpi_fail(rc, "MPI_Allgather");
    }
    int64_t total = 0;
    for (int r = 0; !st && r < R; r++) {
        displs[r] = (int)total;
        total += counts[r];
    }
    if (!st && total > INT_MAX)
        st = emb_set_error(EMB_ERR_UNSUPPORTED, "a state of %" PRId64 " floats", total);
    if (!st && t->rank == root) {
        parts = malloc((size_t)(total ? total : 1) * sizeof(float));
        if (!parts) st = emb_set_error(EMB_ERR_NOMEM, "cannot allocate the gathered state");
    }
    st = emb__mpi_agree(t, st, "to save the optimizer state");
    if (!st) {
        int rc = emb__mpi_gatherv(t->timeout_ms, mom ? t->mom.vals : mine, (int)nmine, MPI_FLOAT,
                                  parts, counts, displs, MPI_FLOAT, root, t->comm);
        if (rc != MPI_SUCCESS) st = emb__mpi_fail(rc, "MPI_Gatherv");
        if (t->rank != root) t->stats.bytes_sent += (uint64_t)nmine * sizeof(float);
    }
    if (!st && t->rank == root) {
        unsigned char *o = buf;
        memcpy(o, info.head, ST_HEAD);
        put_record(o + ST_HEAD, &info, t->num_embeddings, D);
        unsigned char *p = o + ST_BODY;
        if (mom) { /* the list's rows, then each entry's values from its row's owner */
            const int64_t m = (int64_t)info.nnz;
            for (int64_t k = 0; k < m; k++) emb__put_u64le(p + 8 * k, (uint64_t)t->mom.rows[k]);
            p += 8 * m;
            int *next = counts; /* counts are spent: each owner's entries taken so far */
            memset(next, 0, (size_t)R * sizeof *next);
            for (int64_t k = 0; k < m; k++) {
                const int r = emb_mpi_table_owner(t, t->mom.rows[k]);
                emb__f32le_encode(p + 4 * D * k, parts + displs[r] + D * next[r]++, (size_t)D);
            }
        } else { /* each buffer: the shards' rows in rank order */
            for (int64_t s = 0; s < info.segments; s++)
                for (int r = 0; r < R; r++) {
                    const int64_t nr = (t->begin[r + 1] - t->begin[r]) * D;
                    emb__f32le_encode(p, parts + displs[r] + s * nr, (size_t)nr);
                    p += 4 * nr;
                }
        }
        emb__put_u64le(o + need - ST_TAIL, emb__fnv64(o, need - ST_TAIL));
    }
    free(blob);
    free(mine);
    free(parts);
    free(counts);
    return emb__mpi_agree(t, st, "to save the optimizer state");
}

/* The options a state's header holds. */
static emb_optimizer_options header_options(const unsigned char *h) {
    emb_optimizer_options o = emb_optimizer_options_default(EMB_OPTIMIZER_SGD);
    double v[9];
    for (int i = 0; i < 9; i++) v[i] = emb__get_f64le(h + 16 + 8 * i);
    const uint32_t flags = emb__get_u32le(h + 88);
    o.kind = (emb_optimizer_kind)emb__get_u32le(h + 12);
    o.lr = v[0];
    o.momentum = v[1];
    o.dampening = v[2];
    o.weight_decay = v[3];
    o.lr_decay = v[4];
    o.initial_accumulator_value = v[5];
    o.eps = v[6];
    o.beta1 = v[7];
    o.beta2 = v[8];
    o.nesterov = flags & 1u;
    o.amsgrad = flags & 2u;
    o.maximize = flags & 4u;
    return o;
}

/* The whole table's state at b[0..n), checked as far as this rank can: the layout's frame,
 * one [V, D] parameter of the table's optimizer kind, the path (momentum or not) unchanged. */
static emb_status check_state(const emb_mpi_table *t, const unsigned char *b, size_t n,
                              emb_optimizer_options *o) {
    if (n < ST_BODY + ST_TAIL || memcmp(b, "EMBOPTST", 8) || emb__get_u32le(b + 8) != 1)
        return emb_set_error(EMB_ERR_FORMAT, "not an optimizer state of version 1 "
                                             "(docs/optimizer-state.md)");
    if (emb__get_u64le(b + n - ST_TAIL) != emb__fnv64(b, n - ST_TAIL))
        return emb_set_error(EMB_ERR_FORMAT, "optimizer state: checksum mismatch");
    *o = header_options(b);
    if (o->kind != t->opt_kind)
        return emb_set_error(EMB_ERR_FORMAT,
                             "optimizer state of kind %d, the table's optimizer "
                             "is of kind %d",
                             (int)o->kind, (int)t->opt_kind);
    if (emb__get_u32le(b + 92) != 1 || emb__get_u32le(b + ST_HEAD) != 2 ||
        emb__get_u64le(b + ST_HEAD + 32) != (uint64_t)t->num_embeddings ||
        emb__get_u64le(b + ST_HEAD + 40) != (uint64_t)t->dim)
        return emb_set_error(EMB_ERR_FORMAT,
                             "optimizer state: not of one [%" PRId64 ", %" PRId64 "] parameter",
                             t->num_embeddings, t->dim);
    const bool mom = own_momentum(t);
    if (mom != (o->kind == EMB_OPTIMIZER_SGD && o->momentum != 0 && !t->opt_dense))
        return emb_set_error(EMB_ERR_FORMAT,
                             "optimizer state: its momentum (%g) and the "
                             "table's (%g) differ in whether there is one",
                             o->momentum, t->opt_opts.momentum);
    const size_t V = (size_t)t->num_embeddings, D = (size_t)t->dim, body = n - ST_BODY - ST_TAIL;
    if (mom) {
        const uint32_t kind = emb__get_u32le(b + ST_HEAD + 16);
        const uint64_t nnz = emb__get_u64le(b + ST_HEAD + 24);
        if ((kind != 0 && kind != 2) || (kind == 0 && nnz) || nnz > body / (8 + 4 * D) ||
            body != nnz * (8 + 4 * D) || emb__get_u32le(b + ST_HEAD + 4))
            return emb_set_error(EMB_ERR_FORMAT, "optimizer state: a corrupt momentum record");
        for (uint64_t k = 0; k < nnz; k++)
            if (emb__get_u64le(b + ST_BODY + 8 * k) >= V)
                return emb_set_error(EMB_ERR_FORMAT,
                                     "optimizer state: momentum row %" PRIu64 " outside the table",
                                     emb__get_u64le(b + ST_BODY + 8 * k));
    } else if (body % (V * D * 4)) {
        return emb_set_error(EMB_ERR_FORMAT,
                             "optimizer state: %zu bytes of buffers are not "
                             "whole [%zu, %zu] tables",
                             body, V, D);
    }
    return EMB_OK;
}

/* This rank's part of a checked state, as a state of its shard: the header, the record of a
 * [rows, D] parameter (no momentum entries: mpi_momentum.c keeps those), each buffer's rows. */
static emb_status shard_state(const emb_mpi_table *t, const unsigned char *b, size_t n,
                              unsigned char **out, size_t *len) {
    const int64_t D = t->dim, rows = t->row_end - t->row_begin, V = t->num_embeddings;
    const bool mom = own_momentum(t);
    const int64_t segs = mom ? 0 : (int64_t)((n - ST_BODY - ST_TAIL) / ((size_t)(V * D) * 4));
    const size_t m = ST_BODY + (size_t)(segs * rows * D) * 4 + ST_TAIL;
    unsigned char *o = malloc(m);
    if (!o) return emb_set_error(EMB_ERR_NOMEM, "cannot allocate the shard's state");
    memcpy(o, b, ST_BODY);
    emb__put_u64le(o + ST_HEAD + 32, (uint64_t)rows);
    if (mom) {
        emb__put_u32le(o + ST_HEAD + 16, 0);
        emb__put_u64le(o + ST_HEAD + 24, 0);
    }
    for (int64_t s = 0; s < segs; s++)
        memcpy(o + ST_BODY + (size_t)(s * rows * D) * 4,
               b + ST_BODY + (size_t)(s * V * D + t->row_begin * D) * 4, (size_t)(rows * D) * 4);
    emb__put_u64le(o + m - ST_TAIL, emb__fnv64(o, m - ST_TAIL));
    *out = o;
    *len = m;
    return EMB_OK;
}

/* The momentum list of a checked state: every row, this rank's rows' values. */
static emb_status momentum_of(const emb_mpi_table *t, const unsigned char *b,
                              emb__mpi_momentum *m) {
    const int64_t D = t->dim;
    memset(m, 0, sizeof *m);
    m->has = emb__get_u32le(b + ST_HEAD + 16) == 2;
    m->n = (int64_t)emb__get_u64le(b + ST_HEAD + 24);
    m->rows = malloc((size_t)(m->n + 1) * sizeof *m->rows);
    if (!m->rows) return emb_set_error(EMB_ERR_NOMEM, "cannot allocate the momentum buffer");
    for (int64_t k = 0; k < m->n; k++) {
        m->rows[k] = (int64_t)emb__get_u64le(b + ST_BODY + 8 * k);
        m->nown += m->rows[k] >= t->row_begin && m->rows[k] < t->row_end;
    }
    m->vals = malloc((size_t)(m->nown * D + 1) * sizeof *m->vals);
    if (!m->vals) {
        emb__mpi_momentum_free(m);
        return emb_set_error(EMB_ERR_NOMEM, "cannot allocate the momentum buffer");
    }
    const unsigned char *v = b + ST_BODY + 8 * m->n;
    for (int64_t k = 0, c = 0; k < m->n; k++)
        if (m->rows[k] >= t->row_begin && m->rows[k] < t->row_end)
            emb__f32le_decode(m->vals + D * c++, v + 4 * D * k, (size_t)D);
    return EMB_OK;
}

emb_status emb_mpi_table_load_optimizer_state(emb_mpi_table *t, const void *buf, size_t n) {
    if (!t) return emb_set_error(EMB_ERR_NULL, "table must not be NULL");
    const unsigned char *b = buf;
    emb_optimizer_options o;
    emb_optimizer *opt = NULL;
    emb__mpi_momentum mom;
    memset(&mom, 0, sizeof mom);
    unsigned char *part = NULL;
    size_t plen = 0;
    emb_status st = check_table(t);
    if (!st && !b) st = emb_set_error(EMB_ERR_NULL, "buf must not be NULL");
    /* the same bytes on every rank: rank 0's length and checksum */
    uint64_t id[2] = {n, b ? emb__fnv64(b, n) : 0}, id0[2] = {id[0], id[1]};
    int rc = emb__mpi_bcast(t->timeout_ms, id0, 2, MPI_UINT64_T, 0, t->comm);
    if (rc != MPI_SUCCESS && !st) st = emb__mpi_fail(rc, "MPI_Bcast");
    if (!st && (id[0] != id0[0] || id[1] != id0[1]))
        st = emb_set_error(EMB_ERR_INVALID,
                           "the optimizer state passed on rank %d differs from "
                           "rank 0's (every rank passes the same bytes)",
                           t->rank);
    if (!st) st = check_state(t, b, n, &o);
    if (!st) st = emb_optimizer_create(&o, &opt);             /* validates the options */
    if (!st && !t->opt_dense) st = emb__mpi_sparse_probe(&o); /* as set_optimizer does */
    if (!st && t->weight) { /* the shard's part, checked by libemb */
        emb_tensor w;
        st = emb_mpi_table_shard(t, &w);
        if (!st) st = emb_optimizer_add_param(opt, &w, NULL);
        if (!st) st = shard_state(t, b, n, &part, &plen);
        if (!st) st = emb_optimizer_load_state(opt, part, plen);
    }
    if (!st && own_momentum(t)) st = momentum_of(t, b, &mom);
    free(part);
    st = emb__mpi_agree(t, st, "the optimizer state");
    if (st) {
        emb_optimizer_free(opt);
        emb__mpi_momentum_free(&mom);
        return st;
    }
    emb_optimizer_free(t->opt);
    t->opt = t->weight ? opt : NULL;
    if (!t->weight) emb_optimizer_free(opt);
    t->opt_opts = o;
    if (own_momentum(t)) {
        emb__mpi_momentum_free(&t->mom);
        t->mom = mom;
    }
    return EMB_OK;
}
