/* src/mpi/mpi_partial.c: the inexact bag forward of a sharded table (shard option
 * partial_sums; TorchRec's row-wise pooling): every rank sends each position (row id, bag,
 * weight) to the row's owner; each owner sums, for every bag of every rank, the rows it
 * holds (a partial sum per bag), and MPI_Reduce_scatter adds the owners' partial sums and
 * hands each rank its own bags. Rows never travel, only ids and pooled rows; the sum of a
 * bag is taken in another order than the single process's (by owner, then MPI's reduction
 * order), so the result is within rounding of the exact one, not equal to it
 * (docs/semantics.md states the measured tolerance). */
#include "mpi_internal.h"

#include <inttypes.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

static int64_t at(const emb_tensor *x, int64_t i) {
    return x->dtype == EMB_INT32 ? ((const int32_t *)x->data)[i] : ((const int64_t *)x->data)[i];
}

/* The bag of each position (-1 outside every bag), as emb_bag_forward reads offsets. */
static void bag_of(const emb_mpi_table *t, const emb_tensor *input, const emb_tensor *offsets,
                   int64_t B, int64_t n, int64_t *bag) {
    for (int64_t p = 0; p < n; p++) bag[p] = -1;
    if (input->ndim == 2 || !offsets) {
        const int64_t w = input->ndim == 2 ? input->shape[1] : 0;
        for (int64_t p = 0; p < n && w > 0; p++) bag[p] = p / w;
        return;
    }
    for (int64_t b = 0; b < B; b++) {
        int64_t p0 = at(offsets, b);
        int64_t p1 = b + 1 < offsets->shape[0] ? at(offsets, b + 1) : n;
        if (!t->opts.include_last_offset && b + 1 == B) p1 = n;
        for (int64_t p = p0 < 0 ? 0 : p0; p < p1 && p < n; p++) bag[p] = b;
    }
}

typedef struct entry {
    int64_t id, bag; /* table row, bag of the joined batch */
    float w;
    int32_t pad_;
} entry;

emb_status emb__mpi_bag_partial(emb_mpi_table *t, const emb__mpi_route *r, const emb_tensor *input,
                                const emb_tensor *offsets, const emb_tensor *psw, emb_tensor *out,
                                int64_t B) {
    const int R = t->size;
    const int64_t D = t->dim, n = r->n, pad = t->opts.padding_idx;
    int *buf = calloc((size_t)R * 6, sizeof *buf);
    int64_t *bag = malloc((size_t)(n + 1) * sizeof *bag), *first = NULL;
    int64_t *cnt = calloc((size_t)(B + 1), sizeof *cnt);
    entry *send = malloc((size_t)(n + 1) * sizeof *send), *recv = NULL;
    float *partial = NULL;
    int *scnt = buf, *sdis = buf + R, *rcnt = buf + 2 * R, *rdis = buf + 3 * R, *bags = buf + 4 * R,
        *outcnt = buf + 5 * R;
    emb_status st = buf && bag && cnt && send
                        ? EMB_OK
                        : emb_set_error(EMB_ERR_NOMEM, "cannot allocate the partial sums");
    st = emb__mpi_agree(t, st, "the bag forward");
    int nb = (int)B, rc = MPI_SUCCESS;
    /* the bags of every rank: rank r's bags start at first[r] in the joined batch */
    if (!st) rc = emb__mpi_allgather(t->timeout_ms, &nb, 1, MPI_INT, bags, 1, MPI_INT, t->comm);
    t->stats.bytes_sent += (uint64_t)(R - 1) * sizeof(int);
    if (!st && rc != MPI_SUCCESS) st = emb__mpi_fail(rc, "MPI_Allgather");
    int64_t total = 0;
    if (!st) {
        first = malloc((size_t)(R + 1) * sizeof *first);
        if (!first) st = emb_set_error(EMB_ERR_NOMEM, "cannot allocate the bag counts");
        for (int q = 0; !st && q <= R; q++) {
            first[q] = total;
            if (q < R) total += bags[q];
        }
        if (!st && total * D > INT_MAX)
            st = emb_set_error(EMB_ERR_UNSUPPORTED, "%" PRId64 " pooled floats in one step",
                               total * D);
    }
    st = emb__mpi_agree(t, st, "the bag forward");
    int64_t m = 0;
    if (!st) { /* this rank's positions inside bags, grouped by owner (positions ascending) */
        bag_of(t, input, offsets, B, n, bag);
        for (int64_t p = 0; p < n; p++)
            if (bag[p] >= 0 && r->ids[p] != pad) scnt[emb_mpi_table_owner(t, r->ids[p])]++;
        int64_t acc = 0;
        for (int q = 0; q < R; q++) {
            sdis[q] = (int)acc;
            acc += scnt[q];
        }
        int *fill = rcnt; /* scratch until the counts arrive */
        memcpy(fill, sdis, (size_t)R * sizeof *fill);
        for (int64_t p = 0; p < n; p++) {
            if (bag[p] < 0 || r->ids[p] == pad) continue;
            cnt[bag[p]]++;
            entry e = {r->ids[p], first[t->rank] + bag[p],
                       psw ? ((const float *)psw->data)[p] : 1.0f, 0};
            send[fill[emb_mpi_table_owner(t, r->ids[p])]++] = e;
        }
        rc = emb__mpi_alltoall(t->timeout_ms, scnt, 1, MPI_INT, rcnt, 1, MPI_INT, t->comm);
        t->stats.bytes_sent += (uint64_t)(R - 1) * sizeof(int);
        if (rc != MPI_SUCCESS) st = emb__mpi_fail(rc, "MPI_Alltoall");
    }
    if (!st) {
        for (int q = 0; q < R; q++) {
            rdis[q] = (int)m;
            m += rcnt[q];
        }
        recv = malloc((size_t)(m + 1) * sizeof *recv);
        partial = calloc((size_t)(total * D + 1), sizeof *partial);
        if (!recv || !partial)
            st = emb_set_error(EMB_ERR_NOMEM, "cannot allocate the partial sums");
    }
    st = emb__mpi_agree(t, st, "the bag forward");
    if (!st) {
        MPI_Datatype et;
        MPI_Type_contiguous((int)sizeof(entry), MPI_BYTE, &et);
        MPI_Type_commit(&et);
        rc = emb__mpi_alltoallv(t->timeout_ms, send, scnt, sdis, et, recv, rcnt, rdis, et, t->comm);
        MPI_Type_free(&et);
        if (rc != MPI_SUCCESS) st = emb__mpi_fail(rc, "MPI_Alltoallv");
        for (int q = 0; q < R; q++)
            if (q != t->rank) t->stats.id_bytes += (uint64_t)scnt[q] * sizeof(entry);
        for (int q = 0; q < R; q++)
            if (q != t->rank) t->stats.bytes_sent += (uint64_t)scnt[q] * sizeof(entry);
    }
    if (!st) { /* the owner's partial sums, entries in the order they came */
        for (int64_t k = 0; k < m; k++) {
            const float *row = t->weight + (recv[k].id - t->row_begin) * D, w = recv[k].w;
            float *acc = partial + recv[k].bag * D;
            for (int64_t d = 0; d < D; d++) acc[d] += w * row[d];
        }
        for (int q = 0; q < R; q++) outcnt[q] = (int)(bags[q] * D);
        MPI_Request req;
        rc = MPI_Ireduce_scatter(partial, out->data, outcnt, MPI_FLOAT, MPI_SUM, t->comm, &req);
        if (rc == MPI_SUCCESS)
            rc = emb__mpi_wait(t->timeout_ms, t->comm, &req, "MPI_Reduce_scatter");
        if (rc != MPI_SUCCESS) st = emb__mpi_fail(rc, "MPI_Reduce_scatter");
        const uint64_t b = (uint64_t)(total - B) * (uint64_t)D * sizeof(float);
        t->stats.row_bytes += b; /* the partial sums of the others' bags, once each */
        t->stats.bytes_sent += b;
    }
    if (!st && t->opts.mode == EMB_BAG_MEAN) {
        float *o = out->data;
        for (int64_t b = 0; b < B; b++)
            for (int64_t d = 0; d < D && cnt[b] > 0; d++) o[b * D + d] /= (float)cnt[b];
    }
    free(buf);
    free(bag);
    free(first);
    free(cnt);
    free(send);
    free(recv);
    free(partial);
    return st;
}
