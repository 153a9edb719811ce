/* src/nn/embedding_backward.c: the backward of nn.Embedding, dense and sparse.
 * See docs/semantics.md §6.1, §6.2 (dense), §6.3, §6.4 (sparse).
 *
 * Dense: the positions are bucketed by destination row, stably (positions ascending inside
 * each row): for a small table relative to the batch by a counting sort over the rows (CSR:
 * offsets[V+1], order[M]), for a large one by radix-sorting the batch (backward_sorted), so
 * that the temporaries stay proportional to the batch. Then threads own disjoint row
 * ranges, balanced by their number of contributions, and each row is summed from +0.0 in
 * position order and added to the caller's gradient once. No atomics: the bits do not
 * depend on the thread count, nor on the bucketing.
 *
 * Sparse: the entries (input order, padding removed) are a fresh uncoalesced COO gradient;
 * accumulating into a non-empty gradient reproduces PyTorch's in-place sparse add (a merge
 * of the two entry lists, see emb__sparse_merge_ref). */
#include "embedding_internal.h"
#include "sparse_grad_internal.h"
#include "kernels/backward.h"
#include "kernels/dispatch.h"
#include "kernels/radix.h"

#include <inttypes.h>
#include <string.h>

/* Floats of gradient per thread below which the dense accumulation stays on one thread. */
#define EMB__BACKWARD_GRAIN (1 << 18)
/* Positions per thread below which the bucketing stays on one thread, and the per-thread
 * counters the parallel bucketing may always use (beyond 2 per position). */
#define EMB__CSR_GRAIN      (1 << 16)
#define EMB__CSR_SMALL_HIST (1 << 16)
/* The dense backward radix-sorts the batch (batch-sized buckets) when V / this > n =
 * numel(indices), else counts over the table's rows (then V + 2 <= 4n + 2 offsets).
 * From V/n = 4 up sorting was as fast or faster, at V/n = 1 and below counting was faster
 * (bench/bench_temporaries.c; docs/PERFORMANCE.md, "Tuning constants"). */
#define EMB__BATCH_BUCKETS_RATIO 4

/* Checks shared by the dense and sparse backward, after the NULL and state checks: the
 * index tensor, then grad_output's dtype and shape. The callers then check their gradient
 * buffer, and the index range last (check_index_range, as it reads every index). */
static emb_status check_inputs(const emb_embedding *e, const emb_tensor *indices,
                               const emb_tensor *grad_output) {
    emb_status st = emb__check_indices(indices, "indices", "embedding_backward");
    if (st) return st;
    int64_t shape[EMB_MAX_DIMS];
    for (int i = 0; i < indices->ndim; i++) shape[i] = indices->shape[i];
    shape[indices->ndim] = e->embedding_dim;
    return emb__check_f32_shape(grad_output, "grad_output", indices->ndim + 1, shape);
}

static emb_status check_index_range(const emb_embedding *e, const emb_tensor *indices) {
    int64_t bad = emb__find_bad_index(indices, e->num_embeddings);
    if (bad >= 0) return emb__index_error(indices, bad, e->num_embeddings, "an embedding");
    return EMB_OK;
}

static emb_status state_error(void) {
    return emb__error(EMB_ERR_STATE,
                      "the embedding's weight does not require grad (created with freeze=true)");
}

/* Stable bucketing of the non-padding positions by row (a counting sort), one thread:
 * offsets[V + 2] receives offsets[r] = first slot of row r in order[], offsets[V] = total. */
static void csr_serial(const emb_tensor *indices, int64_t n, int64_t V, int64_t pad,
                       int64_t *offsets, int64_t *order) {
    memset(offsets, 0, (size_t)(V + 2) * sizeof *offsets);
    if (indices->dtype == EMB_INT64) {
        const int64_t *idx = indices->data;
        for (int64_t i = 0; i < n; i++)
            if (idx[i] != pad) offsets[idx[i] + 2]++;
        for (int64_t r = 2; r < V + 2; r++) offsets[r] += offsets[r - 1];
        for (int64_t i = 0; i < n; i++)
            if (idx[i] != pad) order[offsets[idx[i] + 1]++] = i;
    } else {
        const int32_t *idx = indices->data;
        for (int64_t i = 0; i < n; i++)
            if ((int64_t)idx[i] != pad) offsets[(int64_t)idx[i] + 2]++;
        for (int64_t r = 2; r < V + 2; r++) offsets[r] += offsets[r - 1];
        for (int64_t i = 0; i < n; i++)
            if ((int64_t)idx[i] != pad) order[offsets[(int64_t)idx[i] + 1]++] = i;
    }
}

/* The same bucketing in T shares: share t counts the rows of its contiguous chunk of
 * positions into hist[t][V]; one pass turns the counts into each share's first slot per
 * row (rows ascending, and within a row the chunks in position order); then every share
 * scatters its chunk. Within a row the slots follow the positions, exactly as the serial
 * build, so `order` is identical for any T. */
typedef struct csr_ctx {
    const emb_tensor *indices;
    int64_t n, V, pad;
    int64_t *hist, *order;
    bool scatter; /* false: count */
} csr_ctx;

static void csr_share(void *p, int t, int T) {
    const csr_ctx *c = p;
    const int64_t V = c->V, pad = c->pad;
    int64_t i0, i1;
    emb__split(c->n, t, T, &i0, &i1);
    int64_t *h = c->hist + t * V;
    const int64_t *idx64 = c->indices->data;
    const int32_t *idx32 = c->indices->data;
    const bool i64 = c->indices->dtype == EMB_INT64;
    if (!c->scatter) {
        memset(h, 0, (size_t)V * sizeof *h);
        if (i64) {
            for (int64_t i = i0; i < i1; i++)
                if (idx64[i] != pad) h[idx64[i]]++;
        } else {
            for (int64_t i = i0; i < i1; i++)
                if ((int64_t)idx32[i] != pad) h[idx32[i]]++;
        }
        return;
    }
    int64_t *order = c->order;
    if (i64) {
        for (int64_t i = i0; i < i1; i++)
            if (idx64[i] != pad) order[h[idx64[i]]++] = i;
    } else {
        for (int64_t i = i0; i < i1; i++)
            if ((int64_t)idx32[i] != pad) order[h[idx32[i]]++] = i;
    }
}

static void csr_parallel(const emb_tensor *indices, int64_t n, int64_t V, int64_t pad, int T,
                         int64_t *hist, int64_t *offsets, int64_t *order) {
    csr_ctx c = {indices, n, V, pad, hist, order, false};
    emb__parallel(T, csr_share, &c);
    int64_t run = 0;
    for (int64_t r = 0; r < V; r++) {
        offsets[r] = run;
        for (int64_t u = 0; u < T; u++) {
            int64_t k = hist[u * V + r];
            hist[u * V + r] = run;
            run += k;
        }
    }
    offsets[V] = run;
    c.scatter = true;
    emb__parallel(T, csr_share, &c);
}

/* The dense backward accumulates into a [V, D] table of row sums (backward_accumulate) when
 * the batch names every row about once or more (V <= n), without scale_grad_by_freq, and
 * that table is between 1 and 8 MiB: there it beat the buckets by up to 2.5x, while a larger
 * table of sums, or one in the cache, did not (bench/bench_embedding dense_backward;
 * docs/PERFORMANCE.md, "Tuning constants"). */
#define EMB__ACC_MIN_FLOATS ((int64_t)1 << 18)
#define EMB__ACC_MAX_FLOATS ((int64_t)2 << 20)
/* Positions ahead whose accumulator row is prefetched: the table of sums is larger than
 * L2 here, and without it the adds wait on L3. */
#define EMB__ACC_PF 16
static bool use_accumulators(const emb_embedding *e, int64_t V, int64_t D, int64_t n) {
    if (e->scale_grad_by_freq) return false;
    switch (emb__temp_mode()) {
    case EMB__TEMP_ACC:
        return true;
    case EMB__TEMP_AUTO:
        return V <= n && V * D >= EMB__ACC_MIN_FLOATS && V * D <= EMB__ACC_MAX_FLOATS;
    default:
        return false;
    }
}

/* Rows [r0, r1) of backward_accumulate's table of sums: zeroed with their marks, or
 * (add) added to the gradient where the batch named them. */
typedef struct acc_ctx {
    float *acc;
    uint8_t *named;
    float *gw;
    int64_t D;
    bool add;
} acc_ctx;

static void acc_rows(void *p, int64_t r0, int64_t r1, int ith) {
    (void)ith;
    const acc_ctx *c = p;
    const int64_t D = c->D;
    if (!c->add) {
        memset(c->acc + r0 * D, 0, (size_t)((r1 - r0) * D) * sizeof(float));
        memset(c->named + r0, 0, (size_t)(r1 - r0));
        return;
    }
    for (int64_t r = r0; r < r1; r++) {
        if (!c->named[r]) continue;
        float *restrict w = c->gw + r * D;
        const float *restrict a = c->acc + r * D;
        for (int64_t d = 0; d < D; d++) w[d] = w[d] + a[d];
    }
}

/* The dense backward through row accumulators: acc[r] starts at +0.0 and receives every
 * non-padding position of row r in increasing order (plain float adds), then each row the
 * batch named gets gw[r] = gw[r] + acc[r]: the summation order of the buckets (the row
 * kernel's 0.0f + g, then + g in position order, added to grad_weight once), so the same
 * bits, and rows the batch did not name are not touched. The sums run on one thread (see
 * below), so the bits do not depend on the thread count. Temporaries: V * D floats, V bytes. */
static emb_status backward_accumulate(const emb_embedding *e, const emb_tensor *indices,
                                      const float *go, float *gw, int64_t n, bool overwrite) {
    const int64_t V = e->num_embeddings, D = e->embedding_dim, pad = e->padding_idx;
    int64_t nfloat, abytes;
    if (!emb__mul_i64(V, D, &nfloat) || !emb__mul_i64(nfloat, (int64_t)sizeof(float), &abytes) ||
        (uint64_t)abytes > SIZE_MAX)
        return emb__error(EMB_ERR_OVERFLOW, "embedding_backward: the accumulators overflow");
    if (overwrite) {
        /* grad_weight itself is the table of sums: each row starts at +0.0 and receives its
         * positions in order, which is acc[r], and 0.0f + acc[r] == acc[r] since a sum that
         * starts at +0.0 is never -0.0 */
        emb__zero_floats(gw, nfloat);
        const bool i32 = indices->dtype == EMB_INT32;
        const int32_t *idx32 = indices->data;
        const int64_t *idx64 = indices->data;
        for (int64_t i = 0; i < n; i++) {
            if (i + EMB__ACC_PF < n) {
                const int64_t rp = i32 ? idx32[i + EMB__ACC_PF] : idx64[i + EMB__ACC_PF];
                __builtin_prefetch(gw + rp * D, 1);
            }
            const int64_t r = i32 ? idx32[i] : idx64[i];
            if (r == pad) continue;
            float *restrict a = gw + r * D;
            const float *restrict g = go + i * D;
            for (int64_t d = 0; d < D; d++) a[d] = a[d] + g[d];
        }
        return EMB_OK;
    }
    float *acc = emb__malloc((size_t)abytes);
    uint8_t *named = emb__malloc((size_t)V);
    if (!acc || !named) {
        emb__free(acc);
        emb__free(named);
        return emb__error(EMB_ERR_NOMEM,
                          "embedding_backward: cannot allocate %" PRId64
                          " bytes of row accumulators",
                          abytes + V);
    }
    /* The sums run on one thread: threads owning ranges of rows each streamed the whole
     * output gradient (its rows interleave line by line) and were slower (docs/PERFORMANCE.md,
     * "Dense backward through a table of sums"). The zeroing and the final pass over the
     * rows are split by rows. */
    const int nt = emb__threads_for(nfloat, EMB__BACKWARD_GRAIN);
    acc_ctx c = {acc, named, gw, D, false};
    emb__parallel_for(nt, V, acc_rows, &c);
    const bool i32 = indices->dtype == EMB_INT32;
    const int32_t *idx32 = indices->data;
    const int64_t *idx64 = indices->data;
    for (int64_t i = 0; i < n; i++) {
        if (i + EMB__ACC_PF < n) {
            const int64_t rp = i32 ? idx32[i + EMB__ACC_PF] : idx64[i + EMB__ACC_PF];
            __builtin_prefetch(acc + rp * D, 1);
        }
        const int64_t r = i32 ? idx32[i] : idx64[i];
        if (r == pad) continue;
        named[r] = 1;
        float *restrict a = acc + r * D;
        const float *restrict g = go + i * D;
        for (int64_t d = 0; d < D; d++) a[d] = a[d] + g[d];
    }
    c.add = true;
    emb__parallel_for(nt, V, acc_rows, &c);
    emb__free(acc);
    emb__free(named);
    return EMB_OK;
}

/* Share t of the row kernel's work: the rows whose contributions (offsets, ascending,
 * offsets[units] in all) fall in its part, each summed with the share's accumulator
 * acc + t * D. The table-sized buckets (distinct NULL) call the kernel once on the share's
 * rows; the batch-sized ones (distinct: the table row of each unit) once per unit, on a
 * one-row window. */
typedef struct rows_ctx {
    emb__backward_rows_fn kernel;
    float *gw;
    const float *go;
    int64_t D;
    const int64_t *offsets, *order, *distinct;
    int64_t units;
    bool scale, overwrite;
    float *acc;
} rows_ctx;

static void rows_share(void *p, int t, int nt) {
    const rows_ctx *c = p;
    int64_t u0, u1;
    emb__split_by(c->offsets, c->units, t, nt, &u0, &u1);
    float *acc = c->acc + t * c->D;
    if (!c->distinct) {
        if (u0 < u1)
            c->kernel(c->gw, c->go, c->D, c->offsets, c->order, u0, u1, c->scale, c->overwrite,
                      acc);
        return;
    }
    for (int64_t u = u0; u < u1; u++)
        c->kernel(c->gw + c->distinct[u] * c->D, c->go, c->D, c->offsets + u, c->order, 0, 1,
                  c->scale, false, acc);
}

/* Whether the dense backward buckets the positions by sorting the batch (memory O(n),
 * time O(n) per 11 bits of row number) rather than by counting over the table's rows
 * (memory O(V + n), time O(V + n)). See EMB__BATCH_BUCKETS_RATIO. */
static bool use_batch_buckets(int64_t V, int64_t n) {
    const int bits = emb__bit_width_u64((uint64_t)(V - 1)) + emb__bit_width_u64((uint64_t)(n - 1));
    if (bits > 64) return false; /* (row, position) does not fit one key */
    switch (emb__temp_mode()) {
    case EMB__TEMP_TABLE:
        return false;
    case EMB__TEMP_BATCH:
        return true;
    default:
        return V / EMB__BATCH_BUCKETS_RATIO > n;
    }
}

/* The dense backward with batch-sized buckets: the non-padding positions i are packed as
 * keys (row << pbits) | i and radix-sorted on the row bits, which is stable, so each row's
 * positions stay in increasing order: the same `order` as the counting sort, listed per
 * distinct row instead of per table row. Each distinct row is then summed by the same row
 * kernel (called on a one-row window: offsets + u, grad_weight + row * D), threads owning
 * disjoint ranges of distinct rows balanced by contributions. Same bits as the table-sized
 * path, for any thread count. Temporaries: 3n + 1 words and nt * D floats. */
static emb_status backward_sorted(const emb_embedding *e, const emb_tensor *indices,
                                  const float *go, float *gw, int64_t n, bool overwrite) {
    const int64_t D = e->embedding_dim, pad = e->padding_idx;
    const int pbits = emb__bit_width_u64((uint64_t)(n - 1));
    const int kbits = emb__bit_width_u64((uint64_t)(e->num_embeddings - 1));
    const uint64_t pmask = pbits == 0 ? 0 : UINT64_MAX >> (64 - pbits);
    int64_t kbytes;
    if (!emb__mul_i64(n + 1, (int64_t)sizeof(uint64_t), &kbytes) || (uint64_t)kbytes > SIZE_MAX)
        return emb__error(EMB_ERR_OVERFLOW, "embedding_backward: the bucket sizes overflow");
    uint64_t *a = emb__malloc((size_t)kbytes);
    uint64_t *b = emb__malloc((size_t)kbytes);
    int64_t *offs = emb__malloc((size_t)kbytes);
    if (!a || !b || !offs) {
        emb__free(a);
        emb__free(b);
        emb__free(offs);
        return emb__error(EMB_ERR_NOMEM,
                          "embedding_backward: cannot allocate %" PRId64 " bytes of index buckets",
                          3 * kbytes);
    }
    int64_t m = 0;
    if (indices->dtype == EMB_INT64) {
        const int64_t *idx = indices->data;
        for (int64_t i = 0; i < n; i++)
            if (idx[i] != pad) a[m++] = (uint64_t)idx[i] << pbits | (uint64_t)i;
    } else {
        const int32_t *idx = indices->data;
        for (int64_t i = 0; i < n; i++)
            if ((int64_t)idx[i] != pad) a[m++] = (uint64_t)idx[i] << pbits | (uint64_t)i;
    }
    emb_status st = EMB_OK;
    float *acc = NULL;
    if (m == 0) {
        if (overwrite) emb__zero_floats(gw, e->num_embeddings * D);
        goto done;
    }
    uint64_t *sorted = emb__radix_sort_u64(a, b, m, pbits, pbits + kbits);
    /* order[j] = position of the j-th sorted key (in the other buffer); the distinct rows
     * overwrite the sorted keys in place (rows[u] is written after keys[j >= u] is read) */
    int64_t *order = (int64_t *)(sorted == a ? b : a);
    int64_t *rows = (int64_t *)sorted;
    int64_t U = 0;
    for (int64_t j = 0; j < m; j++) {
        const uint64_t key = sorted[j];
        const int64_t r = (int64_t)(key >> pbits);
        order[j] = (int64_t)(key & pmask);
        if (U == 0 || rows[U - 1] != r) {
            offs[U] = j;
            rows[U++] = r;
        }
    }
    offs[U] = m;

    int64_t work;
    if (!emb__mul_i64(m, D, &work)) work = INT64_MAX;
    const int nt = emb__threads_for(work, EMB__BACKWARD_GRAIN);
    acc = emb__malloc((size_t)nt * (size_t)D * sizeof(float));
    if (!acc) {
        st = emb__error(EMB_ERR_NOMEM,
                        "embedding_backward: cannot allocate %d accumulators of %" PRId64 " floats",
                        nt, D);
        goto done;
    }
    /* overwrite: zero the table, then add into it (the batch names at most a quarter of
     * the rows here, so writing them twice costs little) */
    if (overwrite) emb__zero_floats(gw, e->num_embeddings * D);
    const bool scale = e->scale_grad_by_freq;
    const emb__backward_rows_fn kernel = emb__kernels()->backward_rows;
    rows_ctx c = {kernel, gw, go, D, offs, order, rows, U, scale, false, acc};
    emb__parallel(nt, rows_share, &c);
done:
    emb__free(acc);
    emb__free(a);
    emb__free(b);
    emb__free(offs);
    return st;
}

static emb_status backward_dense(const emb_embedding *e, const emb_tensor *indices,
                                 const emb_tensor *grad_output, emb_tensor *grad_weight,
                                 bool overwrite) {
    if (!e) return emb__null("embedding");
    if (!indices) return emb__null("indices");
    if (!grad_output) return emb__null("grad_output");
    if (!grad_weight) return emb__null("grad_weight");
    if (!e->requires_grad) return state_error();
    emb_status st = check_inputs(e, indices, grad_output);
    if (st) return st;
    const int64_t V = e->num_embeddings, D = e->embedding_dim;
    const int64_t wshape[2] = {V, D};
    st = emb__check_f32_shape(grad_weight, "grad_weight", 2, wshape);
    if (st) return st;
    st = check_index_range(e, indices);
    if (st) return st;

    const int64_t n = emb_tensor_numel(indices);
    if (D == 0) return EMB_OK;
    if (n == 0) {
        if (overwrite) emb__zero_floats(grad_weight->data, V * D);
        return EMB_OK;
    }
    if (use_accumulators(e, V, D, n))
        return backward_accumulate(e, indices, grad_output->data, grad_weight->data, n, overwrite);
    if (use_batch_buckets(V, n))
        return backward_sorted(e, indices, grad_output->data, grad_weight->data, n, overwrite);
    const int64_t pad = e->padding_idx;

    /* offsets: V + 2 counters (the serial build's extra slot leaves offsets[r] = start of
     * row r); order: one slot per position (an upper bound of the non-padding ones);
     * hist: per-thread row counters of the parallel build, used when they cost at most
     * about as much memory as the positions themselves. */
    int csr_threads = emb__threads_for(n, EMB__CSR_GRAIN);
    int64_t hist_words = 0;
    if (csr_threads > 1 &&
        (!emb__mul_i64(csr_threads, V, &hist_words) || hist_words > 2 * n + EMB__CSR_SMALL_HIST))
        csr_threads = 1;
    if (csr_threads <= 1) hist_words = 0;
    int64_t obytes, pbytes, hbytes;
    if (!emb__mul_i64(V + 2, (int64_t)sizeof(int64_t), &obytes) ||
        !emb__mul_i64(n, (int64_t)sizeof(int64_t), &pbytes) ||
        !emb__mul_i64(hist_words, (int64_t)sizeof(int64_t), &hbytes) ||
        (uint64_t)obytes > SIZE_MAX || (uint64_t)pbytes > SIZE_MAX || (uint64_t)hbytes > SIZE_MAX)
        return emb__error(EMB_ERR_OVERFLOW, "embedding_backward: the bucket sizes overflow");
    int64_t *offsets = emb__malloc((size_t)obytes);
    int64_t *order = emb__malloc((size_t)pbytes);
    int64_t *hist = hist_words ? emb__malloc((size_t)hbytes) : NULL;
    if (!offsets || !order || (hist_words && !hist)) {
        emb__free(offsets);
        emb__free(order);
        emb__free(hist);
        return emb__error(EMB_ERR_NOMEM,
                          "embedding_backward: cannot allocate %" PRId64 " bytes of index buckets",
                          obytes + pbytes + hbytes);
    }
    if (hist)
        csr_parallel(indices, n, V, pad, csr_threads, hist, offsets, order);
    else
        csr_serial(indices, n, V, pad, offsets, order);
    emb__free(hist);
    /* now offsets[r] = first slot of row r, offsets[V] = number of contributions */
    const int64_t m = offsets[V];
    if (m == 0) {
        emb__free(offsets);
        emb__free(order);
        if (overwrite) emb__zero_floats(grad_weight->data, V * D);
        return EMB_OK;
    }

    int64_t work;
    if (!emb__mul_i64(m, D, &work)) work = INT64_MAX;
    int nt = emb__threads_for(work, EMB__BACKWARD_GRAIN);
    float *acc = emb__malloc((size_t)nt * (size_t)D * sizeof(float));
    if (!acc) {
        emb__free(offsets);
        emb__free(order);
        return emb__error(
            EMB_ERR_NOMEM,
            "embedding_backward: cannot allocate %d accumulators of %" PRId64 " floats", nt, D);
    }
    float *gw = grad_weight->data;
    const float *go = grad_output->data;
    const bool scale = e->scale_grad_by_freq;
    const emb__backward_rows_fn rows = emb__kernels()->backward_rows;
    /* rows split so that each share gets about m / nt contributions */
    rows_ctx c = {rows, gw, go, D, offsets, order, NULL, V, scale, overwrite, acc};
    emb__parallel(nt, rows_share, &c);
    emb__free(acc);
    emb__free(offsets);
    emb__free(order);
    return EMB_OK;
}

emb_status emb_embedding_backward(const emb_embedding *e, const emb_tensor *indices,
                                  const emb_tensor *grad_output, emb_tensor *grad_weight) {
    return backward_dense(e, indices, grad_output, grad_weight, false);
}

emb_status emb_embedding_backward_overwrite(const emb_embedding *e, const emb_tensor *indices,
                                            const emb_tensor *grad_output,
                                            emb_tensor *grad_weight) {
    return backward_dense(e, indices, grad_output, grad_weight, true);
}

emb_status emb__embedding_sparse_check(const emb_embedding *e, const emb_tensor *indices,
                                       const emb_tensor *grad_output, const emb_sparse_grad *grad,
                                       bool with_grad) {
    if (!e) return emb__null("embedding");
    if (!indices) return emb__null("indices");
    if (!grad_output) return emb__null("grad_output");
    if (with_grad && !grad) return emb__null("grad");
    if (!e->requires_grad) return state_error();
    if (e->scale_grad_by_freq)
        return emb__error(EMB_ERR_UNSUPPORTED,
                          "embedding_backward: scale_grad_by_freq not supported with sparse "
                          "gradients");
    emb_status st = check_inputs(e, indices, grad_output);
    if (st) return st;
    if (with_grad) {
        st = emb__sparse_grad_check(grad, "grad");
        if (st) return st;
        const int64_t V = e->num_embeddings, D = e->embedding_dim;
        if (grad->num_rows != V || grad->dim != D)
            return emb__error(EMB_ERR_SHAPE,
                              "grad is a sparse gradient of shape [%" PRId64 ", %" PRId64
                              "], expected [%" PRId64 ", %" PRId64 "] (the embedding's weight)",
                              grad->num_rows, grad->dim, V, D);
    }
    return check_index_range(e, indices);
}

static emb_status backward_sparse(const emb_embedding *e, const emb_tensor *indices,
                                  const emb_tensor *grad_output, emb_sparse_grad *grad, bool view) {
    emb_status st = emb__embedding_sparse_check(e, indices, grad_output, grad, true);
    if (st) return st;
    const int64_t D = e->embedding_dim;
    const int64_t n = emb_tensor_numel(indices);
    const int64_t pad = e->padding_idx;
    int64_t m = 0; /* entries to add: the non-padding positions */
    if (pad == EMB_PADDING_NONE) {
        m = n;
    } else {
        for (int64_t i = 0; i < n; i++) m += emb__index_at(indices, i) != pad;
    }
    if (m == 0) return EMB_OK; /* PyTorch: adding an empty sparse tensor changes nothing */
    const bool i32 = indices->dtype == EMB_INT32;
    const float *go = grad_output->data;

    if (grad->nnz == 0 && view && m == n && !i32) {
        /* The new gradient is the caller's indices and grad_output themselves: borrow them
         * (PyTorch's sparse gradient views both). */
        emb__sparse_grad_release(grad);
        grad->indices = indices->data;
        grad->values = (float *)grad_output->data;
        grad->borrowed = true;
        grad->nnz = n;
        grad->coalesced = n < 2;
        return EMB_OK;
    }
    if (grad->nnz == 0) {
        /* The new gradient itself (PyTorch: an empty grad + src is src). Reuse the storage
         * when it is large enough, else grow geometrically. */
        if (grad->capacity < m) {
            int64_t cap = grad->capacity > INT64_MAX / 2 ? INT64_MAX : 2 * grad->capacity;
            if (cap < m) cap = m;
            int64_t *ni = NULL;
            float *nv = NULL;
            st = emb__sparse_grad_alloc(cap, D, &ni, &nv);
            if (st && cap > m) st = emb__sparse_grad_alloc(cap = m, D, &ni, &nv);
            if (st) return st;
            emb__sparse_grad_release(grad);
            grad->indices = ni;
            grad->values = nv;
            grad->capacity = cap;
        }
        if (pad == EMB_PADDING_NONE) {
            /* Every position is an entry: the values are grad_output itself, copied in
             * large blocks (on several threads when big) rather than row by row. */
            if (i32) {
                const int32_t *src = indices->data;
                for (int64_t i = 0; i < n; i++) grad->indices[i] = src[i];
            } else {
                memcpy(grad->indices, indices->data, (size_t)n * sizeof(int64_t));
            }
            emb__copy_floats(grad->values, go, n * D);
            grad->nnz = n;
        } else {
            grad->nnz = emb__sparse_gather_ref(grad->indices, grad->values, indices->data, i32, go,
                                               n, D, pad);
        }
        /* PyTorch flags a fresh sparse gradient with fewer than 2 entries as coalesced */
        grad->coalesced = grad->nnz < 2;
        return EMB_OK;
    }

    /* grad += new: PyTorch's in-place sparse add merges the two entry lists. */
    emb__sparse_add add;
    st = emb__sparse_add_begin(grad, m, D, "embedding_backward", &add);
    if (st) return st;
    int64_t got = emb__sparse_gather_ref(add.si, add.sv, indices->data, i32, go, n, D, pad);
    emb__sparse_add_finish(grad, &add, got, D);
    return EMB_OK;
}

emb_status emb_embedding_backward_sparse(const emb_embedding *e, const emb_tensor *indices,
                                         const emb_tensor *grad_output, emb_sparse_grad *grad) {
    return backward_sparse(e, indices, grad_output, grad, false);
}

emb_status emb_embedding_backward_sparse_view(const emb_embedding *e, const emb_tensor *indices,
                                              const emb_tensor *grad_output,
                                              emb_sparse_grad *grad) {
    return backward_sparse(e, indices, grad_output, grad, true);
}
