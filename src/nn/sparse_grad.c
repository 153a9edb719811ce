/* src/nn/sparse_grad.c: emb_sparse_grad, PyTorch's COO row gradient (sparse_dim 1,
 * dense_dim 1): init/clear/free, coalesce() in PyTorch's summation order, and
 * dense.add_(sparse). See docs/semantics.md §6.3, §6.4, §6.5, §6.6. */
#include "sparse_grad_internal.h"
#include "kernels/argsort.h"
#include "kernels/backward.h"

#include <inttypes.h>
#include <string.h>

/* Columns per thread below which add_to_dense stays on one thread. */
#define EMB__ADD_DENSE_GRAIN 4096

emb_status emb__sparse_grad_check(const emb_sparse_grad *g, const char *what) {
    if (!g) return emb__null(what);
    if (g->num_rows < 0 || g->dim < 0 || g->nnz < 0 || g->capacity < 0 ||
        (g->borrowed ? g->capacity != 0 : g->nnz > g->capacity))
        return emb__error(EMB_ERR_INVALID,
                          "%s is not a valid sparse gradient (num_rows %" PRId64 ", dim %" PRId64
                          ", nnz %" PRId64 ", capacity %" PRId64 "); initialise it with "
                          "emb_sparse_grad_init",
                          what, g->num_rows, g->dim, g->nnz, g->capacity);
    if ((g->capacity > 0 || (g->borrowed && g->nnz > 0)) && (!g->indices || !g->values))
        return emb__error(EMB_ERR_INVALID,
                          "%s is not a valid sparse gradient (capacity %" PRId64
                          " but no storage); initialise it with emb_sparse_grad_init",
                          what, g->capacity);
    return EMB_OK;
}

void emb__sparse_grad_release(emb_sparse_grad *g) {
    if (!g->borrowed) {
        emb__free(g->indices);
        emb__free(g->values);
    }
    g->indices = NULL;
    g->values = NULL;
    g->capacity = 0;
    g->borrowed = false;
}

emb_status emb__sparse_grad_alloc(int64_t rows, int64_t dim, int64_t **indices, float **values) {
    int64_t nval, ibytes, vbytes;
    if (rows < 0 || dim < 0 || !emb__mul_i64(rows, dim, &nval) ||
        !emb__mul_i64(nval, (int64_t)sizeof(float), &vbytes) ||
        !emb__mul_i64(rows, (int64_t)sizeof(int64_t), &ibytes) || (uint64_t)vbytes > SIZE_MAX ||
        (uint64_t)ibytes > SIZE_MAX)
        return emb__error(EMB_ERR_OVERFLOW,
                          "a sparse gradient of %" PRId64 " entries of dimension %" PRId64
                          " does not fit in memory",
                          rows, dim);
    int64_t *idx = emb__malloc((size_t)ibytes);
    float *val = emb__malloc((size_t)vbytes);
    if (!idx || !val) {
        emb__free(idx);
        emb__free(val);
        return emb__error(EMB_ERR_NOMEM,
                          "cannot allocate a sparse gradient of %" PRId64
                          " entries of dimension %" PRId64 " (%" PRId64 " bytes)",
                          rows, dim, ibytes + vbytes);
    }
    *indices = idx;
    *values = val;
    return EMB_OK;
}

emb_status emb__sparse_add_begin(const emb_sparse_grad *grad, int64_t m, int64_t dim,
                                 const char *who, emb__sparse_add *a) {
    memset(a, 0, sizeof *a);
    if (!emb__add_i64(grad->nnz, m, &a->total))
        return emb__error(EMB_ERR_OVERFLOW, "%s: the number of entries overflows", who);
    emb_status st = emb__sparse_grad_alloc(m, dim, &a->si, &a->sv);
    if (st) return st;
    st = emb__sparse_grad_alloc(a->total, dim, &a->ri, &a->rv);
    if (st) {
        emb__free(a->si);
        emb__free(a->sv);
        a->si = NULL;
        a->sv = NULL;
    }
    return st;
}

void emb__sparse_add_finish(emb_sparse_grad *grad, emb__sparse_add *a, int64_t got, int64_t dim) {
    int64_t r = emb__sparse_merge_ref(a->ri, a->rv, grad->indices, grad->values, grad->nnz, a->si,
                                      a->sv, got, dim);
    emb__free(a->si);
    emb__free(a->sv);
    emb__sparse_grad_release(grad); /* borrowed entries are only forgotten */
    grad->coalesced = grad->coalesced && got < 2;
    grad->indices = a->ri;
    grad->values = a->rv;
    grad->capacity = a->total;
    grad->nnz = r;
    memset(a, 0, sizeof *a);
}

/* The checks of the constructors: g given, sizes not negative. */
static emb_status check_sizes(const emb_sparse_grad *g, int64_t num_rows, int64_t dim) {
    if (!g) return emb__null("grad");
    if (num_rows < 0 || dim < 0)
        return emb__error(EMB_ERR_INVALID,
                          "a sparse gradient needs non-negative sizes, got [%" PRId64 ", %" PRId64
                          "]",
                          num_rows, dim);
    return EMB_OK;
}

emb_status emb_sparse_grad_init(emb_sparse_grad *g, int64_t num_rows, int64_t dim) {
    emb_status st = check_sizes(g, num_rows, dim);
    if (st) return st;
    memset(g, 0, sizeof *g);
    g->num_rows = num_rows;
    g->dim = dim;
    g->coalesced = true; /* an empty sparse tensor is coalesced, as in PyTorch */
    return EMB_OK;
}

void emb_sparse_grad_clear(emb_sparse_grad *g) {
    if (!g) return;
    if (g->borrowed) emb__sparse_grad_release(g); /* forget the caller's entries */
    g->nnz = 0;
    g->coalesced = true;
}

void emb_sparse_grad_release(emb_sparse_grad *g) {
    if (!g) return;
    emb__sparse_grad_release(g);
    g->nnz = 0;
    g->coalesced = true;
}

emb_status emb_sparse_grad_coalesce(emb_sparse_grad *g) {
    emb_status st = emb__sparse_grad_check(g, "grad");
    if (st) return st;
    if (g->coalesced) return EMB_OK; /* PyTorch returns a coalesced tensor unchanged */
    const int64_t n = g->nnz, dim = g->dim;
    if (n < 2) { /* PyTorch: a copy flagged as coalesced */
        g->coalesced = true;
        return EMB_OK;
    }
    /* perm [n] + pair scratch [2n] */
    int64_t words;
    if (!emb__mul_i64(n, 3 * (int64_t)sizeof(int64_t), &words) || (uint64_t)words > SIZE_MAX)
        return emb__error(EMB_ERR_OVERFLOW, "coalesce: %" PRId64 " entries overflow", n);
    int64_t *perm = emb__malloc((size_t)words);
    if (!perm)
        return emb__error(EMB_ERR_NOMEM,
                          "coalesce: cannot allocate the sort buffers for %" PRId64 " entries", n);
    emb__argsort_unstable_i64_mt(g->indices, n, perm, perm + n,
                                 emb__threads_for(n, EMB__ARGSORT_GRAIN));
    int64_t unique = 1;
    for (int64_t j = 1; j < n; j++) unique += g->indices[perm[j]] != g->indices[perm[j - 1]];
    int64_t *new_idx = NULL;
    float *new_val = NULL;
    st = emb__sparse_grad_alloc(unique, dim, &new_idx, &new_val);
    if (st) {
        emb__free(perm);
        return st;
    }
    int64_t written =
        emb__sparse_coalesce_ref(new_idx, new_val, g->indices, g->values, perm, n, dim);
    (void)written; /* == unique */
    emb__free(perm);
    emb__sparse_grad_release(g);
    g->indices = new_idx;
    g->values = new_val;
    g->nnz = unique;
    g->capacity = unique;
    g->coalesced = true;
    return EMB_OK;
}

emb_status emb_sparse_grad_coalesce_order(const emb_tensor *rows, emb_tensor *perm) {
    if (!rows) return emb__null("rows");
    if (!perm) return emb__null("perm");
    emb_status st = emb_tensor_check(rows, "rows");
    if (!st) st = emb_tensor_check(perm, "perm");
    if (st) return st;
    if (rows->dtype != EMB_INT64 || perm->dtype != EMB_INT64)
        return emb__error(EMB_ERR_DTYPE,
                          "coalesce order: rows and perm must be int64, got %s "
                          "and %s",
                          emb_dtype_name(rows->dtype), emb_dtype_name(perm->dtype));
    if (rows->ndim != 1 || !emb__tensor_same_shape(rows, perm))
        return emb__error(EMB_ERR_SHAPE, "coalesce order: rows must be 1-D and perm of its "
                                         "shape");
    if (emb__tensors_overlap(rows, perm))
        return emb__error(EMB_ERR_INVALID, "coalesce order: perm overlaps rows");
    const int64_t n = rows->shape[0];
    if (n == 0) return EMB_OK;
    int64_t bytes;
    if (!emb__mul_i64(n, 2 * (int64_t)sizeof(int64_t), &bytes) || (uint64_t)bytes > SIZE_MAX)
        return emb__error(EMB_ERR_OVERFLOW, "coalesce order: %" PRId64 " entries overflow", n);
    int64_t *scratch = emb__malloc((size_t)bytes);
    if (!scratch)
        return emb__error(EMB_ERR_NOMEM,
                          "coalesce order: cannot allocate the sort buffers "
                          "for %" PRId64 " entries",
                          n);
    emb__argsort_unstable_i64_mt(rows->data, n, perm->data, scratch,
                                 emb__threads_for(n, EMB__ARGSORT_GRAIN));
    emb__free(scratch);
    return EMB_OK;
}

/* Columns [16 * b0, 16 * b1) (cut at dim) of dense.add_(sparse). */
typedef struct add_dense_ctx {
    float *out;
    const int64_t *idx;
    const float *val;
    int64_t n, dim;
} add_dense_ctx;

static void add_dense_blocks(void *p, int64_t b0, int64_t b1, int ith) {
    (void)ith;
    const add_dense_ctx *c = p;
    const int64_t c0 = b0 * 16, c1 = b1 * 16 < c->dim ? b1 * 16 : c->dim;
    if (c0 < c1) emb__sparse_add_to_dense_ref(c->out, c->idx, c->val, c->n, c->dim, c0, c1);
}

emb_status emb_sparse_grad_add_to_dense(const emb_sparse_grad *g, emb_tensor *dense) {
    emb_status st = emb__sparse_grad_check(g, "grad");
    if (st) return st;
    if (!dense) return emb__null("dense");
    const int64_t shape[2] = {g->num_rows, g->dim};
    st = emb__check_f32_shape(dense, "dense", 2, shape);
    if (st) return st;
    for (int64_t k = 0; k < g->nnz; k++) {
        int64_t r = g->indices[k];
        if (r < 0 || r >= g->num_rows)
            return emb__error(EMB_ERR_INDEX,
                              "grad entry %" PRId64 " has row %" PRId64
                              ", out of range for %" PRId64 " rows (valid: [0, %" PRId64 "))",
                              k, r, g->num_rows, g->num_rows);
    }
    const int64_t n = g->nnz, dim = g->dim;
    if (n == 0 || dim == 0) return EMB_OK;
    float *out = dense->data;
    /* Threads own disjoint column ranges, so each element still receives its entries in
     * entry order: identical bits for any thread count. */
    int64_t work;
    if (!emb__mul_i64(n, dim, &work)) work = INT64_MAX;
    int nt = emb__threads_for(work, EMB__ADD_DENSE_GRAIN * 16);
    if (nt > dim / 16) nt = (int)(dim / 16);
    /* column blocks of 16 floats (one cache line) */
    add_dense_ctx c = {out, g->indices, g->values, n, dim};
    emb__parallel_for(nt, (dim + 15) / 16, add_dense_blocks, &c);
    return EMB_OK;
}

emb_status emb_sparse_grad_from_rows(emb_sparse_grad *g, int64_t num_rows, int64_t dim,
                                     const emb_tensor *rows, const emb_tensor *values) {
    emb_status st = check_sizes(g, num_rows, dim);
    if (st) return st;
    st = emb__check_index_list(rows, "rows", "emb_sparse_grad_from_rows");
    if (st) return st;
    if (!values) return emb__null("values");
    const int64_t n = rows->shape[0];
    const int64_t vshape[2] = {n, dim};
    st = emb__check_f32_shape(values, "values", 2, vshape);
    if (st) return st;
    int64_t bad = emb__find_bad_index(rows, num_rows);
    if (bad >= 0) return emb__index_error(rows, bad, num_rows, "a sparse gradient");
    int64_t *idx = NULL;
    float *val = NULL;
    if (n > 0) {
        st = emb__sparse_grad_alloc(n, dim, &idx, &val);
        if (st) return st;
        for (int64_t i = 0; i < n; i++) idx[i] = emb__index_at(rows, i);
        if (n * dim > 0) memcpy(val, values->data, (size_t)(n * dim) * sizeof(float));
    }
    memset(g, 0, sizeof *g);
    g->num_rows = num_rows;
    g->dim = dim;
    g->nnz = n;
    g->capacity = n;
    g->indices = idx;
    g->values = val;
    g->coalesced = n < 2; /* as a fresh gradient from emb_embedding_backward_sparse */
    return EMB_OK;
}
