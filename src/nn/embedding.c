/* nn.Embedding: construction, accessors, forward (lookup) and max_norm renormalisation.
 * The backward lives in embedding_backward.c. Every public call validates all of its
 * arguments before it writes anything; the kernels in src/kernels/lookup_ref.c do the work
 * on position or row ranges. */
#include "embedding_internal.h"
#include "kernels/dispatch.h"
#include "kernels/lookup.h"
#include "kernels/radix.h"

#include <inttypes.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* Parallelise a lookup over positions once it copies more than this many floats. */
#define EMB__LOOKUP_GRAIN 32768
/* Prefetch weight rows this many positions ahead when the table exceeds EMB__PF_BYTES and
 * rows are at most EMB__PF_ROW_BYTES long (the first 2048 bytes of a row): random rows of a
 * table larger than the caches gained at every row length measured, and the prefetch keeps
 * the line in every cache level (locality 3), as the non-temporal hint was slower
 * (docs/PERFORMANCE.md, "Tuning constants"). */
#define EMB__PF_DIST      8
#define EMB__PF_BYTES     ((int64_t)4 << 20)
#define EMB__PF_ROW_BYTES 4096
/* Parallelise a renorm over distinct rows once it touches more than this many floats. */
#define EMB__RENORM_GRAIN 32768
/* The renorm lists its distinct rows by radix-sorting the batch when V / this > n =
 * numel(indices), else with a V-bit bitmap (then at most 64n bits: one word per index).
 * From V/n = 64 up sorting was as fast or faster, as the norms of the rows dominate; below
 * the bitmap won (bench/bench_temporaries.c; docs/PERFORMANCE.md, "Tuning constants"). */
#define EMB__RENORM_SORT_RATIO 64

static int temp_mode = EMB__TEMP_AUTO;
void emb__set_temp_mode(int mode) {
    temp_mode = mode;
}
int emb__temp_mode(void) {
    return temp_mode;
}

/* ---------------------------------------------------------------------------------------
 * Options and construction
 * ------------------------------------------------------------------------------------- */

emb_embedding_options emb_embedding_options_default(void) {
    emb_embedding_options o;
    memset(&o, 0, sizeof o);
    o.padding_idx = EMB_PADDING_NONE;
    o.max_norm = INFINITY;
    o.norm_type = 2.0;
    o.scale_grad_by_freq = false;
    o.sparse = false;
    o.generator = NULL;
    return o;
}

/* max_norm must be > 0 (INFINITY: none) and not NaN; norm_type any p but NaN. */
static emb_status check_norm_args(double max_norm, double norm_type) {
    if (isnan(max_norm) || !(max_norm > 0))
        return emb__error(EMB_ERR_INVALID, "max_norm must be > 0 (INFINITY for none), got %g",
                          max_norm);
    if (isnan(norm_type)) return emb__error(EMB_ERR_INVALID, "norm_type must not be NaN");
    return EMB_OK;
}

/* Validates sizes and options; on success *pad receives the normalised padding row. */
static emb_status check_config(int64_t num_embeddings, int64_t embedding_dim,
                               const emb_embedding_options *o, int64_t *pad) {
    if (num_embeddings < 1)
        return emb__error(EMB_ERR_INVALID,
                          "num_embeddings must be at least 1, got %" PRId64
                          " (emb does not create empty tables)",
                          num_embeddings);
    if (embedding_dim < 1)
        return emb__error(EMB_ERR_INVALID,
                          "embedding_dim must be at least 1, got %" PRId64
                          " (emb does not create empty tables)",
                          embedding_dim);
    int64_t p = o->padding_idx;
    if (p != EMB_PADDING_NONE) {
        if (p >= num_embeddings || p < -num_embeddings)
            return emb__error(EMB_ERR_INVALID,
                              "Padding_idx must be within num_embeddings: got padding_idx=%" PRId64
                              ", valid: [%" PRId64 ", %" PRId64 ")",
                              p, -num_embeddings, num_embeddings);
        if (p < 0) p += num_embeddings;
    }
    emb_status st = check_norm_args(o->max_norm, o->norm_type);
    if (st) return st;
    int64_t numel, bytes;
    if (!emb__mul_i64(num_embeddings, embedding_dim, &numel) ||
        !emb__mul_i64(numel, (int64_t)sizeof(float), &bytes) || (uint64_t)bytes > SIZE_MAX)
        return emb__error(EMB_ERR_OVERFLOW,
                          "a weight of %" PRId64 " x %" PRId64
                          " float32 values does not fit in memory addresses",
                          num_embeddings, embedding_dim);
    *pad = p;
    return EMB_OK;
}

/* Allocates a handle and its (uninitialised) weight after check_config succeeded. */
static emb_status alloc_embedding(int64_t num_embeddings, int64_t embedding_dim, int64_t pad,
                                  const emb_embedding_options *o, emb_embedding **out) {
    emb_embedding *e = calloc(1, sizeof *e);
    if (!e) return emb__error(EMB_ERR_NOMEM, "cannot allocate an embedding handle");
    size_t bytes = (size_t)num_embeddings * (size_t)embedding_dim * sizeof(float);
    e->weight = emb__malloc(bytes);
    if (!e->weight) {
        free(e);
        return emb__error(EMB_ERR_NOMEM,
                          "cannot allocate %zu bytes for a %" PRId64 " x %" PRId64 " weight", bytes,
                          num_embeddings, embedding_dim);
    }
    e->owned = true;
    e->num_embeddings = num_embeddings;
    e->embedding_dim = embedding_dim;
    e->padding_idx = pad;
    e->max_norm = o->max_norm;
    e->norm_type = o->norm_type;
    e->scale_grad_by_freq = o->scale_grad_by_freq;
    e->sparse = o->sparse;
    e->requires_grad = true;
    *out = e;
    return EMB_OK;
}

emb_status emb_embedding_create(int64_t num_embeddings, int64_t embedding_dim,
                                const emb_embedding_options *opts, emb_embedding **out) {
    if (!out) return emb__null("out");
    emb_embedding_options defaults = emb_embedding_options_default();
    const emb_embedding_options *o = opts ? opts : &defaults;
    int64_t pad = EMB_PADDING_NONE;
    emb_status st = check_config(num_embeddings, embedding_dim, o, &pad);
    if (st) return st;
    emb_embedding *e = NULL;
    st = alloc_embedding(num_embeddings, embedding_dim, pad, o, &e);
    if (st) return st;
    emb_tensor w;
    int64_t shape[2] = {num_embeddings, embedding_dim};
    st = emb_tensor_init(&w, EMB_FLOAT32, e->weight, 2, shape);
    if (!st) st = emb_normal_(&w, 0.0, 1.0, o->generator);
    if (st) {
        emb_embedding_free(e);
        return st;
    }
    if (pad != EMB_PADDING_NONE)
        memset(e->weight + pad * embedding_dim, 0, (size_t)embedding_dim * sizeof(float));
    *out = e;
    return EMB_OK;
}

/* What from_pretrained and wrap build from: the options to use (opts, or the defaults
 * kept here) and the normalised padding row. */
typedef struct {
    emb_embedding_options defaults;
    const emb_embedding_options *o;
    int64_t pad;
} pretrained_config;

/* The checks shared by from_pretrained and wrap: weights and out given, weights a 2-D
 * float32 tensor with data, then the table configuration, which fills *c. */
static emb_status check_pretrained(const emb_tensor *weights, const emb_embedding_options *opts,
                                   emb_embedding **out, pretrained_config *c) {
    if (!weights) return emb__null("weights");
    if (!out) return emb__null("out");
    emb_status st = emb_tensor_check(weights, "weights");
    if (st) return st;
    if (weights->ndim != 2)
        return emb__error(EMB_ERR_SHAPE,
                          "Embeddings parameter is expected to be 2-dimensional, got %d "
                          "dimensions",
                          weights->ndim);
    if (weights->dtype != EMB_FLOAT32)
        return emb__error(EMB_ERR_DTYPE, "weights must be float32, got %s",
                          emb_dtype_name(weights->dtype));
    c->defaults = emb_embedding_options_default();
    c->o = opts ? opts : &c->defaults;
    c->pad = EMB_PADDING_NONE;
    return check_config(weights->shape[0], weights->shape[1], c->o, &c->pad);
}

emb_status emb_embedding_from_pretrained(const emb_tensor *weights, bool freeze,
                                         const emb_embedding_options *opts, emb_embedding **out) {
    pretrained_config c;
    emb_status st = check_pretrained(weights, opts, out, &c);
    if (st) return st;
    emb_embedding *e = NULL;
    st = alloc_embedding(weights->shape[0], weights->shape[1], c.pad, c.o, &e);
    if (st) return st;
    memcpy(e->weight, weights->data,
           (size_t)weights->shape[0] * (size_t)weights->shape[1] * sizeof(float));
    e->requires_grad = !freeze;
    *out = e;
    return EMB_OK;
}

emb_status emb_embedding_wrap(const emb_tensor *weights, const emb_storage *storage, bool freeze,
                              const emb_embedding_options *opts, emb_embedding **out) {
    pretrained_config c;
    emb_status st = check_pretrained(weights, opts, out, &c);
    if (st) return st;
    const emb_embedding_options *o = c.o;
    const int64_t pad = c.pad;
    /* The kernels read and write whole floats (never wider aligned vectors), so float
     * alignment is all a borrowed weight needs; emb's own allocations are 64-byte aligned. */
    if ((uintptr_t)weights->data % _Alignof(float) != 0)
        return emb__error(EMB_ERR_INVALID,
                          "weights data %p is not aligned to %zu bytes (a float); "
                          "emb_embedding_wrap needs float-aligned memory",
                          weights->data, (size_t) _Alignof(float));
    emb_embedding *e = calloc(1, sizeof *e);
    if (!e) return emb__error(EMB_ERR_NOMEM, "cannot allocate an embedding handle");
    e->weight = weights->data;
    e->owned = false;
    e->read_only = storage && storage->read_only;
    e->release = storage ? storage->release : NULL;
    e->release_ctx = storage ? storage->release_ctx : NULL;
    e->num_embeddings = weights->shape[0];
    e->embedding_dim = weights->shape[1];
    e->padding_idx = pad;
    e->max_norm = o->max_norm;
    e->norm_type = o->norm_type;
    e->scale_grad_by_freq = o->scale_grad_by_freq;
    e->sparse = o->sparse;
    e->requires_grad = !freeze;
    *out = e;
    return EMB_OK;
}

void emb_embedding_free(emb_embedding *e) {
    if (!e) return;
    if (e->owned)
        emb__free(e->weight);
    else if (e->release)
        e->release(e->weight, e->release_ctx);
    free(e);
}

bool emb_embedding_is_read_only(const emb_embedding *e) {
    return e && e->read_only;
}

/* ---------------------------------------------------------------------------------------
 * Accessors
 * ------------------------------------------------------------------------------------- */

emb_status emb_embedding_weight(emb_embedding *e, emb_tensor *view) {
    if (!e) return emb__null("embedding");
    if (!view) return emb__null("view");
    if (e->read_only)
        return emb__error(EMB_ERR_READ_ONLY,
                          "emb_embedding_weight: the embedding's weight is read-only "
                          "(emb_storage.read_only); use emb_embedding_weight_const to read it");
    int64_t shape[2] = {e->num_embeddings, e->embedding_dim};
    return emb_tensor_init(view, EMB_FLOAT32, e->weight, 2, shape);
}

emb_status emb_embedding_weight_const(const emb_embedding *e, emb_tensor *view) {
    if (!e) return emb__null("embedding");
    if (!view) return emb__null("view");
    int64_t shape[2] = {e->num_embeddings, e->embedding_dim};
    return emb_tensor_init(view, EMB_FLOAT32, e->weight, 2, shape);
}

void emb__embedding_info(const emb_embedding *e, emb__table_info *out) {
    out->weight = e->weight;
    out->rows = e->num_embeddings;
    out->dim = e->embedding_dim;
    out->padding_idx = e->padding_idx;
    out->read_only = e->read_only;
}

int64_t emb_embedding_num_embeddings(const emb_embedding *e) {
    return e ? e->num_embeddings : 0;
}
int64_t emb_embedding_embedding_dim(const emb_embedding *e) {
    return e ? e->embedding_dim : 0;
}
int64_t emb_embedding_padding_idx(const emb_embedding *e) {
    return e ? e->padding_idx : EMB_PADDING_NONE;
}
double emb_embedding_max_norm(const emb_embedding *e) {
    return e ? e->max_norm : NAN;
}
double emb_embedding_norm_type(const emb_embedding *e) {
    return e ? e->norm_type : NAN;
}
bool emb_embedding_scale_grad_by_freq(const emb_embedding *e) {
    return e ? e->scale_grad_by_freq : false;
}
bool emb_embedding_is_sparse(const emb_embedding *e) {
    return e ? e->sparse : false;
}
bool emb_embedding_requires_grad(const emb_embedding *e) {
    return e ? e->requires_grad : false;
}
void emb_embedding_set_requires_grad(emb_embedding *e, bool requires_grad) {
    if (e) e->requires_grad = requires_grad;
}

/* ---------------------------------------------------------------------------------------
 * Lookup
 * ------------------------------------------------------------------------------------- */

/* Checks `out` against indices.shape + [dim] (indices already checked). */
static emb_status check_out(const emb_tensor *indices, int64_t dim, const emb_tensor *out) {
    int64_t shape[EMB_MAX_DIMS];
    for (int i = 0; i < indices->ndim; i++) shape[i] = indices->shape[i];
    shape[indices->ndim] = dim;
    return emb__check_f32_shape(out, "out", indices->ndim + 1, shape);
}

/* Checks indices, out and the index values for a lookup into a [V, D] table. */
emb_status emb__lookup_check(int64_t V, int64_t D, const emb_tensor *indices,
                             const emb_tensor *out) {
    emb_status st = emb__check_indices(indices, "indices", "embedding");
    if (st) return st;
    st = check_out(indices, D, out);
    if (st) return st;
    /* the gather reads indices while it writes out: they must not share memory (rows read
     * from a weight that out overlaps are merely stale; indices overwritten before they are
     * read would be out of range) */
    if (emb__tensors_overlap(out, indices))
        return emb__error(EMB_ERR_INVALID, "out must not overlap indices");
    int64_t bad = emb__find_bad_index(indices, V);
    if (bad >= 0) return emb__index_error(indices, bad, V, "an embedding");
    return EMB_OK;
}

typedef struct gather_ctx {
    const emb__kernel_table *K;
    float *out;
    const float *weight;
    int64_t D;
    const void *idx;
    bool i64;
    int pf;
} gather_ctx;

static void gather_range(void *p, int64_t b, int64_t e, int ith) {
    (void)ith;
    const gather_ctx *c = p;
    if (c->i64)
        c->K->lookup_rows_i64(c->out, c->weight, c->D, c->idx, b, e, c->pf);
    else
        c->K->lookup_rows_i32(c->out, c->weight, c->D, c->idx, b, e, c->pf);
}

/* The validated gather out = weight[indices], parallel over chunks of positions. */
static void gather(const float *weight, int64_t V, int64_t D, const emb_tensor *indices,
                   float *out) {
    int64_t n = emb_tensor_numel(indices);
    if (n == 0) return;
    int64_t work = n > INT64_MAX / D ? INT64_MAX : n * D;
    int nt = work > EMB__LOOKUP_GRAIN ? emb__threads_for(work, EMB__LOOKUP_GRAIN) : 1;
    int64_t table_bytes = V > INT64_MAX / D / 4 ? INT64_MAX : V * D * 4;
    int pf = table_bytes > EMB__PF_BYTES && D * 4 <= EMB__PF_ROW_BYTES ? EMB__PF_DIST : 0;
    const bool i64 = indices->dtype == EMB_INT64;
    const void *idx = indices->data;
    gather_ctx c = {emb__kernels(), out, weight, D, idx, i64, pf};
    emb__parallel_for(nt, n, gather_range, &c);
}

/* ---------------------------------------------------------------------------------------
 * Renorm
 * ------------------------------------------------------------------------------------- */

/* Lists the distinct rows of the (validated) indices in ascending order into rows[] and
 * returns their number, with a bitmap of the table's V rows: V/8 bytes, scanned whole. */
static int64_t distinct_rows_bitmap(const emb_tensor *indices, int64_t n, int64_t V, uint64_t *seen,
                                    int64_t *rows) {
    int64_t words = (V + 63) / 64, nrows = 0;
    memset(seen, 0, (size_t)words * sizeof(uint64_t));
    for (int64_t i = 0; i < n; i++) {
        int64_t r = emb__index_at(indices, i);
        seen[r >> 6] |= UINT64_C(1) << (r & 63);
    }
    for (int64_t w = 0; w < words; w++)
        for (uint64_t m = seen[w]; m; m &= m - 1) rows[nrows++] = w * 64 + __builtin_ctzll(m);
    return nrows;
}

/* The same list by radix-sorting a copy of the indices (keys and tmp hold n each) and
 * dropping repeats; returns the list's address (inside keys or tmp) in *rows_out. */
static int64_t distinct_rows_sorted(const emb_tensor *indices, int64_t n, int64_t V, uint64_t *keys,
                                    uint64_t *tmp, int64_t **rows_out) {
    for (int64_t i = 0; i < n; i++) keys[i] = (uint64_t)emb__index_at(indices, i);
    uint64_t *sorted = emb__radix_sort_u64(keys, tmp, n, 0, emb__bit_width_u64((uint64_t)(V - 1)));
    int64_t *rows = (int64_t *)sorted, nrows = 0; /* in place: rows[k] written after
                                                     sorted[i >= k] was read */
    for (int64_t i = 0; i < n; i++)
        if (nrows == 0 || (uint64_t)rows[nrows - 1] != sorted[i])
            rows[nrows++] = (int64_t)sorted[i];
    *rows_out = rows;
    return nrows;
}

typedef struct renorm_ctx {
    emb__renorm_rows_fn renorm_rows;
    float *weight;
    int64_t D;
    const int64_t *rows;
    double max_norm, norm_type;
} renorm_ctx;

static void renorm_range(void *p, int64_t b, int64_t e, int ith) {
    (void)ith;
    const renorm_ctx *c = p;
    c->renorm_rows(c->weight, c->D, c->rows, b, e, c->max_norm, c->norm_type);
}

/* Renormalises each distinct row named in the (validated) indices, in ascending row order
 * (rows are independent, so the order only matters for reproducing PyTorch's "once per
 * distinct row"). The distinct rows come from a V-bit bitmap when the batch is large
 * relative to the table, else from sorting the batch (EMB__RENORM_SORT_RATIO), so the
 * temporaries are O(min(n, V) + V/64) or O(n). Allocates before writing: EMB_ERR_NOMEM
 * leaves the weight unchanged. */
static emb_status renorm(float *weight, int64_t V, int64_t D, const emb_tensor *indices,
                         double max_norm, double norm_type) {
    int64_t n = emb_tensor_numel(indices);
    if (n == 0 || max_norm == INFINITY) return EMB_OK;
    const int mode = emb__temp_mode();
    const bool sorted =
        mode == EMB__TEMP_BATCH || (mode == EMB__TEMP_AUTO && V / EMB__RENORM_SORT_RATIO > n);
    int64_t *rows = NULL, nrows = 0;
    void *buf1 = NULL, *buf2 = NULL;
    if (sorted) {
        buf1 = emb__malloc((size_t)n * sizeof(uint64_t));
        buf2 = emb__malloc((size_t)n * sizeof(uint64_t));
        if (!buf1 || !buf2) {
            emb__free(buf1);
            emb__free(buf2);
            return emb__error(EMB_ERR_NOMEM, "cannot allocate 2 x %" PRId64 " indices for max_norm",
                              n);
        }
        nrows = distinct_rows_sorted(indices, n, V, buf1, buf2, &rows);
    } else {
        int64_t cap = n < V ? n : V;
        buf1 = emb__malloc((size_t)cap * sizeof(int64_t));
        buf2 = emb__malloc((size_t)((V + 63) / 64) * sizeof(uint64_t));
        if (!buf1 || !buf2) {
            emb__free(buf1);
            emb__free(buf2);
            return emb__error(EMB_ERR_NOMEM,
                              "cannot allocate %" PRId64 " row numbers and a %" PRId64
                              "-row bitmap for max_norm",
                              cap, V);
        }
        rows = buf1;
        nrows = distinct_rows_bitmap(indices, n, V, buf2, rows);
    }
    int64_t work = nrows > INT64_MAX / D ? INT64_MAX : nrows * D;
    int nt = work > EMB__RENORM_GRAIN ? emb__threads_for(work, EMB__RENORM_GRAIN) : 1;
    renorm_ctx c = {emb__kernels()->renorm_rows, weight, D, rows, max_norm, norm_type};
    emb__parallel_for(nt, nrows, renorm_range, &c);
    emb__free(buf1);
    emb__free(buf2);
    return EMB_OK;
}

/* ---------------------------------------------------------------------------------------
 * Public lookups
 * ------------------------------------------------------------------------------------- */

emb_status emb_embedding_output_shape(const emb_embedding *e, const emb_tensor *indices, int *ndim,
                                      int64_t *shape) {
    if (!e) return emb__null("embedding");
    if (!indices) return emb__null("indices");
    if (!ndim) return emb__null("ndim");
    if (!shape) return emb__null("shape");
    emb_status st = emb__check_indices(indices, "indices", "embedding");
    if (st) return st;
    for (int i = 0; i < indices->ndim; i++) shape[i] = indices->shape[i];
    shape[indices->ndim] = e->embedding_dim;
    *ndim = indices->ndim + 1;
    return EMB_OK;
}

emb_status emb_embedding_forward(emb_embedding *e, const emb_tensor *indices, emb_tensor *out) {
    if (!e) return emb__null("embedding");
    if (!indices) return emb__null("indices");
    if (!out) return emb__null("out");
    const int64_t V = e->num_embeddings, D = e->embedding_dim;
    emb_status st = emb__lookup_check(V, D, indices, out);
    if (st) return st;
    if (e->max_norm != INFINITY && e->read_only)
        return emb__error(EMB_ERR_READ_ONLY,
                          "embedding forward with max_norm=%g would renormalise rows of a "
                          "read-only weight (emb_storage.read_only); look it up without "
                          "max_norm, or wrap a writable copy",
                          e->max_norm);
    if (e->max_norm != INFINITY) {
        st = renorm(e->weight, V, D, indices, e->max_norm, e->norm_type);
        if (st) return st;
    }
    gather(e->weight, V, D, indices, out->data);
    return EMB_OK;
}

/* Checks a caller's weight tensor: float32, 2-D; renorm_msg selects PyTorch's
 * embedding_renorm_ wording for a wrong rank. */
static emb_status check_weight(const emb_tensor *weight, bool renorm_msg) {
    if (!weight) return emb__null("weight");
    emb_status st = emb_tensor_check(weight, "weight");
    if (st) return st;
    if (weight->ndim != 2) {
        if (renorm_msg)
            return emb__error(EMB_ERR_SHAPE,
                              "Expected 2-dimensional tensor, but got %d-dimensional tensor "
                              "for argument #1 'self' (while checking arguments for "
                              "embedding_renorm_)",
                              weight->ndim);
        return emb__error(EMB_ERR_SHAPE, "'weight' must be 2-D, got %d dimensions", weight->ndim);
    }
    if (weight->dtype != EMB_FLOAT32)
        return emb__error(EMB_ERR_DTYPE, "weight must be float32, got %s",
                          emb_dtype_name(weight->dtype));
    return EMB_OK;
}

emb_status emb_embedding_lookup(const emb_tensor *weight, const emb_tensor *indices,
                                emb_tensor *out) {
    emb_status st = check_weight(weight, false);
    if (st) return st;
    if (!indices) return emb__null("indices");
    if (!out) return emb__null("out");
    const int64_t V = weight->shape[0], D = weight->shape[1];
    st = emb__lookup_check(V, D, indices, out);
    if (st) return st;
    if (D > 0) gather(weight->data, V, D, indices, out->data);
    return EMB_OK;
}

emb_status emb_embedding_renorm_(emb_tensor *weight, const emb_tensor *indices, double max_norm,
                                 double norm_type) {
    emb_status st = check_weight(weight, true);
    if (st) return st;
    if (!indices) return emb__null("indices");
    if (indices->dtype != EMB_INT64 && indices->dtype != EMB_INT32) {
        const char *tn =
            emb_dtype_nbytes(indices->dtype) ? emb__dtype_torch_type(indices->dtype) : "unknown";
        return emb__error(EMB_ERR_DTYPE,
                          "Expected tensor for argument #2 'indices' to have one of the "
                          "following scalar types: Long, Int; but got %s instead (while "
                          "checking arguments for embedding_renorm_)",
                          tn);
    }
    st = emb__check_indices(indices, "indices", "embedding_renorm_");
    if (st) return st;
    st = check_norm_args(max_norm, norm_type);
    if (st) return st;
    const int64_t V = weight->shape[0], D = weight->shape[1];
    int64_t bad = emb__find_bad_index(indices, V);
    if (bad >= 0) return emb__index_error(indices, bad, V, "an embedding");
    if (D == 0) return EMB_OK;
    return renorm(weight->data, V, D, indices, max_norm, norm_type);
}
