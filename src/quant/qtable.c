/* src/quant/qtable.c: reduced-precision and rowwise-quantized embedding tables
 * (include/emb/quant.h, docs/quantization.md): the storage types, conversion from float32
 * (PyTorch's prepack recipes), tables, lookups, bags and the quantization error. */
#include "quant_internal.h"

#include "internal.h"
#include "nn/nn_face.h"

#include <emb/io.h>

#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <sys/mman.h>
#include <unistd.h>

/* The kernels' names of the storage types (kernels/qkernels.h) are emb_qtype's values. */
_Static_assert(EMB__QT_F32 == (int)EMB_QTYPE_F32 && EMB__QT_F16 == (int)EMB_QTYPE_F16 &&
                   EMB__QT_BF16 == (int)EMB_QTYPE_BF16 && EMB__QT_INT8 == (int)EMB_QTYPE_INT8 &&
                   EMB__QT_INT4 == (int)EMB_QTYPE_INT4,
               "kernels/qkernels.h and emb_qtype disagree");

/* Work per thread before a second one is worth waking (floats written). */
#define EMB__Q_GRAIN 32768
/* Tables of at least this many bytes have their rows loaded ahead for real, in bursts
 * (kernels/qkernels_body.h, QK_AHEAD), where that was measured to pay: int8 lookups and bags
 * and f16 bags of tables of gigabytes, about 3x faster, but not f16 lookups, f32 ones, nor
 * any type on a table of tens of megabytes, which got slower (docs/PERFORMANCE.md, "Tuning
 * constants"). */
#define EMB__Q_TOUCH_BYTES ((size_t)1 << 30)

struct emb_qtable {
    emb_qtype qtype;
    int64_t rows, dim, row_bytes;
    const uint8_t *data;
    size_t nbytes;
    bool owned;     /* data is emb__malloc'ed by emb */
    bool read_only; /* the storage may not be written (emb_qtable_sgd_step) */
    bool in_memory; /* emb's own allocation (quantize, load): nothing to prefetch */
    void (*release)(void *data, void *release_ctx);
    void *release_ctx;
};

/* ---------------------------------------------------------------------------------------
 * Storage types
 * ------------------------------------------------------------------------------------- */

static bool qtype_valid(emb_qtype q) {
    return (unsigned)q <= (unsigned)EMB_QTYPE_INT4;
}

const char *emb_qtype_name(emb_qtype qtype) {
    switch (qtype) {
    case EMB_QTYPE_F32:
        return "f32";
    case EMB_QTYPE_F16:
        return "f16";
    case EMB_QTYPE_BF16:
        return "bf16";
    case EMB_QTYPE_INT8:
        return "int8";
    case EMB_QTYPE_INT4:
        return "int4";
    }
    return "unknown";
}

emb_status emb_qtype_parse(const char *name, emb_qtype *out) {
    if (!name) return emb__null("name");
    if (!out) return emb__null("out");
    static const struct {
        const char *name;
        emb_qtype q;
    } names[] = {
        {"f32", EMB_QTYPE_F32},       {"float32", EMB_QTYPE_F32}, {"f16", EMB_QTYPE_F16},
        {"float16", EMB_QTYPE_F16},   {"half", EMB_QTYPE_F16},    {"bf16", EMB_QTYPE_BF16},
        {"bfloat16", EMB_QTYPE_BF16}, {"int8", EMB_QTYPE_INT8},   {"uint8", EMB_QTYPE_INT8},
        {"byte", EMB_QTYPE_INT8},     {"8bit", EMB_QTYPE_INT8},   {"int4", EMB_QTYPE_INT4},
        {"4bit", EMB_QTYPE_INT4},
    };
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (!strcmp(name, names[i].name)) {
            *out = names[i].q;
            return EMB_OK;
        }
    return emb__error(EMB_ERR_INVALID,
                      "unknown storage type '%s' (expected f32, f16, bf16, int8 or int4)", name);
}

static emb_status row_bytes(emb_qtype q, int64_t dim, int64_t *out) {
    if (!qtype_valid(q)) return emb__error(EMB_ERR_INVALID, "unknown storage type %d", (int)q);
    if (dim < 0) return emb__error(EMB_ERR_SHAPE, "dim must be >= 0, got %" PRId64, dim);
    if ((q == EMB_QTYPE_INT8 || q == EMB_QTYPE_INT4) && dim < 1)
        return emb__error(EMB_ERR_SHAPE,
                          "%s rows need dim >= 1 (a row's scale and bias come from its "
                          "values), got %" PRId64,
                          emb_qtype_name(q), dim);
    if (dim > INT64_MAX / 8)
        return emb__error(EMB_ERR_OVERFLOW, "dim %" PRId64 " is too large", dim);
    switch (q) {
    case EMB_QTYPE_F32:
        *out = dim * 4;
        break;
    case EMB_QTYPE_F16:
    case EMB_QTYPE_BF16:
        *out = dim * 2;
        break;
    case EMB_QTYPE_INT8:
        *out = dim + 8;
        break;
    case EMB_QTYPE_INT4:
        *out = (dim + 1) / 2 + 4;
        break;
    default:
        *out = 0;
        break;
    }
    return EMB_OK;
}

emb_status emb_qtype_row_nbytes(emb_qtype qtype, int64_t dim, int64_t *out) {
    if (!out) return emb__null("out");
    return row_bytes(qtype, dim, out);
}

/* rows * row_bytes of (q, dim) into *total, with the checks of both. */
static emb_status table_bytes(emb_qtype q, int64_t rows, int64_t dim, int64_t *rb, size_t *total) {
    emb_status st = row_bytes(q, dim, rb);
    if (st) return st;
    if (rows < 0) return emb__error(EMB_ERR_SHAPE, "rows must be >= 0, got %" PRId64, rows);
    int64_t t;
    if (!emb__mul_i64(rows, *rb, &t) || (uint64_t)t > (uint64_t)SIZE_MAX)
        return emb__error(EMB_ERR_OVERFLOW,
                          "%" PRId64 " rows of %" PRId64 " bytes do not fit in the address space",
                          rows, *rb);
    *total = (size_t)t;
    return EMB_OK;
}

/* ---------------------------------------------------------------------------------------
 * Conversion
 * ------------------------------------------------------------------------------------- */

/* First element of each row not representable, or EMB_OK. Also the int8/int4 conditions
 * on a row's range. Runs before anything is written. */
static emb_status check_row(emb_qtype q, const float *x, int64_t dim, int64_t r) {
    for (int64_t j = 0; j < dim; j++) {
        if (!isfinite(x[j]))
            return emb__error(EMB_ERR_INVALID,
                              "row %" PRId64 " holds %s at column %" PRId64
                              "; only finite values can be stored as %s",
                              r, isnan(x[j]) ? "NaN" : "an infinity", j, emb_qtype_name(q));
        if ((q == EMB_QTYPE_F16 && isinf(emb__f16_to_f32(emb__f32_to_f16(x[j])))) ||
            (q == EMB_QTYPE_BF16 && isinf(emb__bf16_to_f32(emb__f32_to_bf16(x[j])))))
            return emb__error(EMB_ERR_INVALID,
                              "row %" PRId64 " column %" PRId64 " holds %g, which overflows %s "
                              "(largest finite %s: %g)",
                              r, j, (double)x[j], emb_qtype_name(q), emb_qtype_name(q),
                              q == EMB_QTYPE_F16 ? 65504.0 : 3.3895313892515355e38);
    }
    if (q != EMB_QTYPE_INT8 && q != EMB_QTYPE_INT4) return EMB_OK;
    float mn = x[0], mx = x[0];
    for (int64_t j = 1; j < dim; j++) {
        if (x[j] < mn) mn = x[j];
        if (mx < x[j]) mx = x[j];
    }
    if (q == EMB_QTYPE_INT4) {
        const float mh = emb__f16_to_f32(emb__f32_to_f16(mn));
        if (isinf(mh))
            return emb__error(EMB_ERR_INVALID,
                              "row %" PRId64 ": its minimum %g overflows float16, where int4 "
                              "stores a row's bias (largest finite: 65504)",
                              r, (double)mn);
        mn = mh;
    }
    const float range = mx - mn;
    if (isinf(range))
        return emb__error(EMB_ERR_INVALID,
                          "row %" PRId64 ": its range %g - (%g) overflows float32 and cannot "
                          "be quantized to %s",
                          r, (double)mx, (double)mn, emb_qtype_name(q));
    if (q == EMB_QTYPE_INT4 && isinf(emb__f16_to_f32(emb__f32_to_f16(range / 15.0f))))
        return emb__error(EMB_ERR_INVALID,
                          "row %" PRId64 ": its range %g gives an int4 scale (range / 15) that "
                          "overflows float16 (largest finite: 65504)",
                          r, (double)range);
    return EMB_OK;
}

static void wr_f32(uint8_t *p, float f) {
    memcpy(p, &f, 4);
}
static void wr_u16(uint8_t *p, uint16_t h) {
    p[0] = (uint8_t)(h & 0xff);
    p[1] = (uint8_t)(h >> 8);
}

/* One checked row to its storage type (PyTorch 1.13's recipes, include/emb/quant.h). */
static void quantize_row(emb_qtype q, const float *x, int64_t dim, uint8_t *out) {
    switch (q) {
    case EMB_QTYPE_F32:
        memcpy(out, x, (size_t)dim * 4);
        return;
    case EMB_QTYPE_F16:
        for (int64_t j = 0; j < dim; j++) wr_u16(out + 2 * j, emb__f32_to_f16(x[j]));
        return;
    case EMB_QTYPE_BF16:
        for (int64_t j = 0; j < dim; j++) wr_u16(out + 2 * j, emb__f32_to_bf16(x[j]));
        return;
    case EMB_QTYPE_INT8:
    case EMB_QTYPE_INT4:
        break;
    }
    /* std::min_element / std::max_element: the first of equal values (-0.0 vs +0.0) */
    float mn = x[0], mx = x[0];
    for (int64_t j = 1; j < dim; j++) {
        if (x[j] < mn) mn = x[j];
        if (mx < x[j]) mx = x[j];
    }
    if (q == EMB_QTYPE_INT8) {
        const float range = mx - mn;
        const float inv = 255.0f / (range + 1e-8f);
        for (int64_t j = 0; j < dim; j++) out[j] = (uint8_t)lrintf((x[j] - mn) * inv);
        wr_f32(out + dim, range / 255.0f);
        wr_f32(out + dim + 4, mn);
        return;
    }
    const uint16_t mn_h = emb__f32_to_f16(mn);
    mn = emb__f16_to_f32(mn_h);
    const float range = mx - mn;
    uint16_t sc_h = emb__f32_to_f16(range == 0.0f ? 1.0f : range / 15.0f);
    float sc = emb__f16_to_f32(sc_h);
    float inv = sc == 0.0f ? 1.0f : 1.0f / sc;
    if (sc == 0.0f || isinf(inv)) {
        sc_h = emb__f32_to_f16(1.0f);
        inv = 1.0f;
    }
    const int64_t nb = (dim + 1) / 2;
    memset(out, 0, (size_t)nb);
    for (int64_t j = 0; j < dim; j++) {
        long c = lrintf((x[j] - mn) * inv);
        if (c > 15) c = 15;
        if (c < 0) c = 0;
        out[j / 2] |= (uint8_t)(c << ((j & 1) * 4));
    }
    wr_u16(out + nb, sc_h);
    wr_u16(out + nb + 2, mn_h);
}

static emb_status check_buffers(emb_qtype q, const void *f32, const void *qbuf, size_t qbytes,
                                int64_t rows, int64_t dim, int64_t *rb, size_t *need) {
    emb_status st = table_bytes(q, rows, dim, rb, need);
    if (st) return st;
    if (qbytes < *need)
        return emb__error(EMB_ERR_INVALID,
                          "the %s buffer has %zu bytes; %" PRId64 " rows of %" PRId64
                          " bytes (%s, dim %" PRId64 ") need %zu",
                          emb_qtype_name(q), qbytes, rows, *rb, emb_qtype_name(q), dim, *need);
    int64_t nf;
    if (!emb__mul_i64(rows, dim, &nf) || nf > INT64_MAX / 4)
        return emb__error(EMB_ERR_OVERFLOW, "%" PRId64 " x %" PRId64 " floats overflow", rows, dim);
    if (emb__overlap(f32, (size_t)nf * 4, qbuf, *need))
        return emb__error(EMB_ERR_INVALID, "the float32 and %s buffers overlap", emb_qtype_name(q));
    return EMB_OK;
}

typedef struct quantize_ctx {
    emb_qtype qtype;
    const float *src;
    int64_t dim;
    uint8_t *dst;
    int64_t rb;
} quantize_ctx;

static void quantize_range(void *p, int64_t r0, int64_t r1, int ith) {
    (void)ith;
    const quantize_ctx *c = p;
    for (int64_t r = r0; r < r1; r++)
        quantize_row(c->qtype, c->src + r * c->dim, c->dim, c->dst + r * c->rb);
}

emb_status emb_quantize_rows(emb_qtype qtype, const float *src, int64_t rows, int64_t dim,
                             void *dst, size_t dst_bytes) {
    return emb__quantize_rows_from(qtype, src, rows, dim, dst, dst_bytes, 0);
}

emb_status emb__quantize_rows_from(emb_qtype qtype, const float *src, int64_t rows, int64_t dim,
                                   void *dst, size_t dst_bytes, int64_t row0) {
    int64_t rb = 0;
    size_t need = 0;
    emb_status st = check_buffers(qtype, src, dst, dst_bytes, rows, dim, &rb, &need);
    if (st) return st;
    if (need == 0) return EMB_OK;
    if (!src) return emb__null("src");
    if (!dst) return emb__null("dst");
    for (int64_t r = 0; r < rows; r++) {
        st = check_row(qtype, src + r * dim, dim, row0 + r);
        if (st) return st;
    }
    int64_t work = rows > INT64_MAX / (dim + 1) ? INT64_MAX : rows * (dim + 1);
    quantize_ctx c = {qtype, src, dim, dst, rb};
    emb__parallel_for(emb__threads_for(work, EMB__Q_GRAIN), rows, quantize_range, &c);
    return EMB_OK;
}

typedef struct dequantize_ctx {
    const emb__qkernel_table *K;
    emb_qtype q;
    float *out;
    const uint8_t *base;
    int64_t rb, dim, r0;
} dequantize_ctx;

static void dequantize_range(void *p, int64_t a, int64_t b, int ith) {
    (void)ith;
    const dequantize_ctx *c = p;
    c->K->rows(c->q, c->out + a * c->dim, c->base, c->rb, c->dim, c->r0 + a, c->r0 + b);
}

static void dequantize(const emb__qkernel_table *K, emb_qtype q, float *out, const uint8_t *base,
                       int64_t rb, int64_t dim, int64_t r0, int64_t n) {
    if (n == 0 || dim == 0) return;
    int64_t work = n > INT64_MAX / dim ? INT64_MAX : n * dim;
    dequantize_ctx c = {K, q, out, base, rb, dim, r0};
    emb__parallel_for(emb__threads_for(work, EMB__Q_GRAIN), n, dequantize_range, &c);
}

emb_status emb_dequantize_rows(emb_qtype qtype, const void *src, size_t src_bytes, int64_t rows,
                               int64_t dim, float *dst) {
    int64_t rb = 0;
    size_t need = 0;
    emb_status st = check_buffers(qtype, dst, src, src_bytes, rows, dim, &rb, &need);
    if (st) return st;
    if (need == 0 || dim == 0) return EMB_OK;
    if (!src) return emb__null("src");
    if (!dst) return emb__null("dst");
    dequantize(emb__qkernels(), qtype, dst, src, rb, dim, 0, rows);
    return EMB_OK;
}

/* ---------------------------------------------------------------------------------------
 * Tables
 * ------------------------------------------------------------------------------------- */

/* The table's layout: rows of dim values of qtype, rb bytes each, nbytes at data. */
static void set_layout(emb_qtable *q, emb_qtype qtype, int64_t rows, int64_t dim, int64_t rb,
                       const void *data, size_t nbytes) {
    q->qtype = qtype;
    q->rows = rows;
    q->dim = dim;
    q->row_bytes = rb;
    q->data = data;
    q->nbytes = nbytes;
}

emb_status emb_qtable_quantize(const emb_tensor *weight, emb_qtype qtype, emb_qtable **out) {
    if (!weight) return emb__null("weight");
    if (!out) return emb__null("out");
    emb_status st = emb_tensor_check(weight, "weight");
    if (st) return st;
    if (weight->dtype != EMB_FLOAT32)
        return emb__error(EMB_ERR_DTYPE, "weight must be float32, got %s",
                          emb_dtype_name(weight->dtype));
    if (weight->ndim != 2)
        return emb__error(EMB_ERR_SHAPE, "weight must be 2-D, got %d dimensions", weight->ndim);
    const int64_t V = weight->shape[0], D = weight->shape[1];
    int64_t rb = 0;
    size_t need = 0;
    st = table_bytes(qtype, V, D, &rb, &need);
    if (st) return st;
    emb_qtable *q = calloc(1, sizeof *q);
    uint8_t *data = emb__malloc(need);
    if (!q || !data) {
        free(q);
        emb__free(data);
        return emb__error(EMB_ERR_NOMEM, "cannot allocate a %s table of %zu bytes",
                          emb_qtype_name(qtype), need);
    }
    st = emb_quantize_rows(qtype, weight->data, V, D, data, need);
    if (st) {
        free(q);
        emb__free(data);
        return st;
    }
    set_layout(q, qtype, V, D, rb, data, need);
    q->owned = true;
    *out = q;
    return EMB_OK;
}

emb_status emb_qtable_wrap(emb_qtype qtype, int64_t rows, int64_t dim, const void *data,
                           size_t nbytes, const emb_storage *storage, emb_qtable **out) {
    if (!out) return emb__null("out");
    int64_t rb = 0;
    size_t need = 0;
    emb_status st = table_bytes(qtype, rows, dim, &rb, &need);
    if (st) return st;
    if (nbytes != need)
        return emb__error(EMB_ERR_INVALID,
                          "%zu bytes given, but %" PRId64 " rows of %" PRId64
                          " bytes (%s, dim %" PRId64 ") need %zu",
                          nbytes, rows, rb, emb_qtype_name(qtype), dim, need);
    if (!data && nbytes > 0) return emb__null("data");
    emb_qtable *q = calloc(1, sizeof *q);
    if (!q) return emb__error(EMB_ERR_NOMEM, "cannot allocate a table handle");
    set_layout(q, qtype, rows, dim, rb, data, nbytes);
    q->read_only = storage && storage->read_only;
    q->release = storage ? storage->release : NULL;
    q->release_ctx = storage ? storage->release_ctx : NULL;
    *out = q;
    return EMB_OK;
}

void emb_qtable_free(emb_qtable *q) {
    if (!q) return;
    if (q->owned)
        emb__free((void *)q->data);
    else if (q->release)
        q->release((void *)q->data, q->release_ctx);
    free(q);
}

bool emb_qtable_is_read_only(const emb_qtable *q) {
    return !q || q->read_only;
}

uint8_t *emb__qtable_rows_mut(emb_qtable *q) {
    return q->read_only ? NULL : (uint8_t *)q->data;
}

void emb__qtable_set_in_memory(emb_qtable *q) {
    q->in_memory = true;
}

emb_qtype emb_qtable_qtype(const emb_qtable *q) {
    return q ? q->qtype : EMB_QTYPE_F32;
}
int64_t emb_qtable_num_rows(const emb_qtable *q) {
    return q ? q->rows : 0;
}
int64_t emb_qtable_dim(const emb_qtable *q) {
    return q ? q->dim : 0;
}
int64_t emb_qtable_row_nbytes(const emb_qtable *q) {
    return q ? q->row_bytes : 0;
}
const void *emb_qtable_data(const emb_qtable *q) {
    return q ? q->data : NULL;
}
size_t emb_qtable_nbytes(const emb_qtable *q) {
    return q ? q->nbytes : 0;
}

static bool touch_lookup(const emb_qtable *q) {
    return q->nbytes >= EMB__Q_TOUCH_BYTES &&
           (q->qtype == EMB_QTYPE_INT8 || q->qtype == EMB_QTYPE_INT4);
}

static bool touch_bag(const emb_qtable *q) {
    return q->nbytes >= EMB__Q_TOUCH_BYTES && q->qtype != EMB_QTYPE_F32;
}

typedef struct lookup_ctx {
    const emb__qkernel_table *K;
    const emb_qtable *q;
    float *out;
    const void *idx;
    bool i32, touch;
} lookup_ctx;

static void lookup_range(void *p, int64_t p0, int64_t p1, int ith) {
    (void)ith;
    const lookup_ctx *c = p;
    const emb_qtable *q = c->q;
    c->K->lookup(q->qtype, c->out, q->data, q->row_bytes, q->dim, c->idx, c->i32, p0, p1, c->touch);
}

emb_status emb_qtable_forward(const emb_qtable *q, const emb_tensor *indices, emb_tensor *out) {
    if (!q) return emb__null("table");
    if (!indices) return emb__null("indices");
    if (!out) return emb__null("out");
    emb_status st = emb__lookup_check(q->rows, q->dim, indices, out);
    if (st) return st;
    const int64_t n = emb_tensor_numel(indices), D = q->dim;
    if (n == 0 || D == 0) return EMB_OK;
    const emb__qkernel_table *K = emb__qkernels();
    const bool i32 = indices->dtype == EMB_INT32;
    int64_t work = n > INT64_MAX / D ? INT64_MAX : n * D;
    lookup_ctx c = {K, q, out->data, indices->data, i32, touch_lookup(q)};
    emb__parallel_for(emb__threads_for(work, EMB__Q_GRAIN), n, lookup_range, &c);
    return EMB_OK;
}

emb_status emb_qtable_prefetch(const emb_qtable *q, const emb_tensor *indices) {
    if (!q) return emb__null("table");
    if (!indices) return emb__null("indices");
    emb_status st = emb__check_indices(indices, "indices", "prefetch");
    if (st) return st;
    const int64_t bad = emb__find_bad_index(indices, q->rows);
    if (bad >= 0) return emb__index_error(indices, bad, q->rows, "a table");
    const int64_t n = emb_tensor_numel(indices), rb = q->row_bytes;
    if (q->owned || q->in_memory || n == 0 || rb == 0) return EMB_OK; /* in RAM already */
    const uintptr_t pg = (uintptr_t)sysconf(_SC_PAGESIZE);
    const uintptr_t mask = ~(pg - 1);
    uintptr_t last = 0;
    for (int64_t i = 0; i < n; i++) {
        const uintptr_t a = (uintptr_t)(q->data + emb__index_at(indices, i) * rb);
        const uintptr_t first = a & mask, end = (a + (uintptr_t)rb + pg - 1) & mask;
        if (first == last && end == first + pg) continue; /* the page just asked for */
        /* Advice only: a failure (memory the kernel cannot read ahead) changes nothing. */
        (void)madvise((void *)first, end - first, MADV_WILLNEED);
        last = first;
    }
    return EMB_OK;
}

/* Share t of a bag: bags split so that each share gets about end / nt positions, with
 * its own row of scratch. */
typedef struct bag_ctx {
    const emb__qkernel_table *K;
    const emb_qtable *q;
    const emb__bag_cfg *c;
    const emb__bag_batch *bb;
    float *out;
    int64_t *mi;
    float *tmp;
    bool touch;
} bag_ctx;

static void bag_share(void *p, int t, int nt) {
    const bag_ctx *x = p;
    const emb_qtable *q = x->q;
    const emb__bag_batch *bb = x->bb;
    const int64_t D = q->dim, pad = x->c->pad;
    int64_t b0, b1;
    emb__split_by(bb->starts, bb->B, t, nt, &b0, &b1);
    if (b0 >= b1) return;
    float *scratch = x->tmp + (size_t)t * (size_t)D;
    if (x->c->mode == EMB_BAG_MAX)
        x->K->max(q->qtype, x->out, x->mi, q->data, q->row_bytes, D, bb->idx, bb->i32, bb->starts,
                  b0, b1, pad, scratch, x->touch);
    else
        x->K->pool(q->qtype, x->out, q->data, q->row_bytes, D, bb->idx, bb->i32, bb->starts, b0, b1,
                   bb->psw, pad, x->c->mode == EMB_BAG_MEAN, scratch, x->touch);
}

emb_status emb_qtable_bag_forward(const emb_qtable *q, const emb_tensor *input,
                                  const emb_tensor *offsets, const emb_tensor *per_sample_weights,
                                  const emb_bag_options *opts, emb_tensor *out,
                                  emb_tensor *max_indices) {
    if (!q) return emb__null("table");
    if (!input) return emb__null("input");
    if (!out) return emb__null("out");
    emb__bag_cfg c;
    emb_status st = emb__bag_cfg_from_options(q->rows, q->dim, opts, &c);
    if (st) return st;
    emb__bag_batch bb;
    st = emb__bag_batch_init(&c, input, offsets, per_sample_weights, &bb);
    if (st) return st;
    st = emb__bag_check_outputs(&c, &bb, out, max_indices);
    if (!st && q->dim > 0) st = emb__bag_batch_ready(&bb); /* out holds B rows */
    if (!st) st = emb__bag_check_index_values(&c, &bb);
    if (!st && c.max_norm != INFINITY)
        st = emb__error(EMB_ERR_READ_ONLY,
                        "embedding_bag: a %s table is read-only, and max_norm would "
                        "renormalise its rows in place",
                        emb_qtype_name(q->qtype));
    const int64_t B = bb.B, D = q->dim, end = bb.end;
    int64_t work;
    if (!emb__mul_i64(end + B, D, &work)) work = INT64_MAX;
    int nt = emb__threads_for(work, EMB__Q_GRAIN);
    if (nt > B) nt = (int)(B > 0 ? B : 1);
    float *tmp = NULL;
    if (!st && B > 0 && D > 0) {
        tmp = emb__malloc((size_t)nt * (size_t)D * sizeof(float));
        if (!tmp) st = emb__error(EMB_ERR_NOMEM, "cannot allocate %d rows of scratch", nt);
    }
    if (st || B == 0 || D == 0) {
        emb__free(tmp);
        emb__bag_batch_free(&bb);
        return st;
    }
    bag_ctx x = {
        emb__qkernels(), q, &c, &bb, out->data, max_indices ? max_indices->data : NULL, tmp,
        touch_bag(q)};
    emb__parallel(nt, bag_share, &x);
    emb__free(tmp);
    emb__bag_batch_free(&bb);
    return EMB_OK;
}

emb_status emb_qtable_dequantize(const emb_qtable *q, int64_t first, int64_t n, float *out) {
    if (!q) return emb__null("table");
    if (first < 0 || n < 0 || first > q->rows || n > q->rows - first)
        return emb__error(EMB_ERR_INDEX,
                          "rows [%" PRId64 ", %" PRId64 " + %" PRId64
                          ") are outside the table's %" PRId64 " rows",
                          first, first, n, q->rows);
    if (n == 0 || q->dim == 0) return EMB_OK;
    if (!out) return emb__null("out");
    dequantize(emb__qkernels(), q->qtype, out, q->data, q->row_bytes, q->dim, first, n);
    return EMB_OK;
}

/* ---------------------------------------------------------------------------------------
 * Error against the float32 source
 * ------------------------------------------------------------------------------------- */

void emb_qerror_init(emb_qerror *e) {
    if (e) memset(e, 0, sizeof *e);
}

emb_status emb_qerror_add(emb_qerror *e, const float *src, const float *deq, int64_t rows,
                          int64_t dim) {
    if (!e) return emb__null("error");
    if (rows < 0 || dim < 0)
        return emb__error(EMB_ERR_SHAPE, "rows and dim must be >= 0, got %" PRId64 " x %" PRId64,
                          rows, dim);
    if (rows == 0) return EMB_OK;
    if (dim > 0 && (!src || !deq)) return emb__null(!src ? "src" : "deq");
    /* rows without columns: each is the empty vector on both sides, cosine 1, no work per row
     * (a table may have 2^62 of them) */
    if (dim == 0) e->sum_cosine += (double)rows;
    for (int64_t r = 0; r < rows && dim > 0; r++) {
        const float *a = dim ? src + r * dim : src, *b = dim ? deq + r * dim : deq;
        double dot = 0, na = 0, nb = 0;
        for (int64_t j = 0; j < dim; j++) {
            const double x = a[j], y = b[j], d = fabs(x - y);
            if (d > e->max_abs || d != d) e->max_abs = d;
            e->sum_abs += d;
            dot += x * y;
            na += x * x;
            nb += y * y;
        }
        double cosv;
        if (na == 0 || nb == 0)
            cosv = na == nb ? 1.0 : 0.0;
        else
            cosv = dot / (sqrt(na) * sqrt(nb));
        e->sum_cosine += cosv;
    }
    e->rows += rows;
    e->elements += rows * dim;
    e->mean_abs = e->elements ? e->sum_abs / (double)e->elements : 0.0;
    e->mean_cosine = e->rows ? e->sum_cosine / (double)e->rows : 0.0;
    return EMB_OK;
}

emb_status emb_qtable_error(const emb_qtable *q, const emb_tensor *weight, emb_qerror *out) {
    if (!q) return emb__null("table");
    if (!weight) return emb__null("weight");
    if (!out) return emb__null("out");
    const int64_t shape[2] = {q->rows, q->dim};
    emb_status st = emb__check_f32_shape(weight, "weight", 2, shape);
    if (st) return st;
    emb_qerror e;
    emb_qerror_init(&e);
    /* about a megabyte of rows at a time, and never more rows than the table has: a table
     * of no rows and 2^32 columns allocated 16 GiB for nothing */
    int64_t chunk = q->dim > 0 ? (1 << 20) / q->dim + 1 : q->rows;
    if (chunk > q->rows) chunk = q->rows;
    const bool scratch = q->dim > 0 && chunk > 0;
    float *buf = scratch ? emb__malloc((size_t)chunk * (size_t)q->dim * 4) : NULL;
    if (scratch && !buf) return emb__error(EMB_ERR_NOMEM, "cannot allocate scratch rows");
    const float *w = weight->data;
    for (int64_t r = 0; r < q->rows; r += chunk) {
        const int64_t n = q->rows - r < chunk ? q->rows - r : chunk;
        if (q->dim > 0) emb_qtable_dequantize(q, r, n, buf);
        /* rows without columns: the weight may have no storage (NULL + 0 is undefined) */
        emb_qerror_add(&e, q->dim > 0 ? w + r * q->dim : w, buf, n, q->dim);
    }
    emb__free(buf);
    *out = e;
    return EMB_OK;
}
