/* src/quant/qtrain.c: training f16 and bf16 tables (include/emb/quant.h, "Training";
 * docs/quantization.md). The SGD step widens each touched row to float32, applies
 * PyTorch's sparse SGD rule to that copy, and rounds back once per element; every new row
 * is formed in scratch first, so a refused step writes nothing. */
#include <emb/quant.h>

#include "quant_internal.h"

#include "internal.h"
#include "nn/nn_face.h"

#include <emb/io.h>

#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

emb_status emb_qtable_bag_backward_sparse(const emb_qtable *q, const emb_tensor *input,
                                          const emb_tensor *offsets,
                                          const emb_tensor *per_sample_weights,
                                          const emb_bag_options *opts,
                                          const emb_tensor *grad_output, emb_sparse_grad *grad) {
    if (!q) return emb__null("table");
    emb__bag_cfg c;
    emb_status st = emb__bag_cfg_from_options(emb_qtable_num_rows(q), emb_qtable_dim(q), opts, &c);
    if (st) return st;
    if (c.max_norm != INFINITY)
        return emb__error(
            EMB_ERR_READ_ONLY,
            "embedding_bag: max_norm would renormalise the rows of a %s table "
            "in place during the forward pass, which emb_qtable_bag_forward does not do",
            emb_qtype_name(emb_qtable_qtype(q)));
    return emb__bag_backward_sparse_cfg(&c, input, offsets, per_sample_weights, grad_output, grad);
}

/* ---------------------------------------------------------------------------------------
 * Rounding float32 to the storage type
 * ------------------------------------------------------------------------------------- */

typedef struct half_format {
    const char *name;
    uint16_t (*narrow)(float); /* round to nearest even */
    float (*widen)(uint16_t);
    float max_finite;
} half_format;

static const half_format F16 = {"float16", emb__f32_to_f16, emb__f16_to_f32, 65504.0f};
static const half_format BF16 = {"bfloat16", emb__f32_to_bf16, emb__bf16_to_f32, 3.38953139e38f};

/* u rounded to the format: nearest, or stochastically with the draw r (uniform 32 bits).
 * Returns false when u cannot be stored (NaN, infinite, or out of range as documented). */
static bool round_half(const half_format *f, float u, emb_qround mode, uint32_t r, uint16_t *out) {
    if (!isfinite(u)) return false;
    const uint16_t h = f->narrow(u);
    if (mode == EMB_QROUND_NEAREST) {
        if (!isfinite(f->widen(h))) return false;
        *out = h;
        return true;
    }
    if (fabsf(u) > f->max_finite) return false;
    /* The neighbour towards zero (lo) and away from it (hi): stored values are ordered by
     * their magnitude bits, so they are one apart. */
    const float hv = f->widen(h);
    const uint16_t lo = fabsf(hv) > fabsf(u) ? (uint16_t)(h - 1) : h;
    const float lov = f->widen(lo);
    if (lov == u) {
        *out = lo;
        return true;
    }
    const uint16_t hi = (uint16_t)(lo + 1);
    const double gap = fabs((double)f->widen(hi)) - fabs((double)lov);
    const double frac = (fabs((double)u) - fabs((double)lov)) / gap; /* in (0, 1) */
    *out = (double)r < frac * 4294967296.0 ? hi : lo;
    return true;
}

/* ---------------------------------------------------------------------------------------
 * The step
 * ------------------------------------------------------------------------------------- */

/* Entry order sorted by row, stable (entries of a row keep their gradient order). */
typedef struct entry_key {
    int64_t row, k;
} entry_key;

static int entry_cmp(const void *a, const void *b) {
    const entry_key *x = a, *y = b;
    if (x->row != y->row) return x->row < y->row ? -1 : 1;
    return x->k < y->k ? -1 : x->k > y->k;
}

/* Every row of the gradient names a row of a table of V rows. */
static emb_status check_grad_rows(const emb_sparse_grad *grad, int64_t V) {
    for (int64_t k = 0; k < grad->nnz; k++)
        if (grad->indices[k] < 0 || grad->indices[k] >= V)
            return emb__error(EMB_ERR_INDEX,
                              "index %" PRId64 " at position %" PRId64
                              " is out of range for a table with %" PRId64
                              " rows (valid: [0, %" PRId64 "))",
                              grad->indices[k], k, V, V);
    return EMB_OK;
}

emb_status emb_qtable_sgd_step(emb_qtable *q, const emb_sparse_grad *grad, float lr,
                               emb_qround rounding, emb_generator *gen) {
    if (!q) return emb__null("table");
    emb_status st = emb__sparse_grad_check(grad, "grad");
    if (st) return st;
    const emb_qtype qt = emb_qtable_qtype(q);
    const int64_t V = emb_qtable_num_rows(q), D = emb_qtable_dim(q), rb = emb_qtable_row_nbytes(q);
    if (!(lr >= 0.0f) || !isfinite(lr)) {
        char b[48];
        snprintf(b, sizeof b, "%.9g", (double)lr);
        return emb__error(EMB_ERR_INVALID, "Invalid learning rate: %s", b);
    }
    if (rounding != EMB_QROUND_NEAREST && rounding != EMB_QROUND_STOCHASTIC)
        return emb__error(EMB_ERR_INVALID,
                          "unknown rounding %d (expected EMB_QROUND_NEAREST or "
                          "EMB_QROUND_STOCHASTIC)",
                          (int)rounding);
    if (grad->num_rows != V || grad->dim != D)
        return emb__error(EMB_ERR_SHAPE,
                          "grad is a sparse gradient of shape [%" PRId64 ", %" PRId64
                          "], expected [%" PRId64 ", %" PRId64 "] (the table's shape)",
                          grad->num_rows, grad->dim, V, D);
    if (qt == EMB_QTYPE_INT8 || qt == EMB_QTYPE_INT4)
        return emb__error(EMB_ERR_UNSUPPORTED,
                          "a %s table is not trained: its rows share one scale and bias, so "
                          "an update would requantize the whole row (train in f32, f16 or "
                          "bf16 and convert)",
                          emb_qtype_name(qt));
    uint8_t *rows = emb__qtable_rows_mut(q);
    if (!rows && V > 0)
        return emb__error(EMB_ERR_READ_ONLY,
                          "the %s table's rows are read-only (a mapped file or read-only "
                          "storage); load it with emb_qtable_load to train it",
                          emb_qtype_name(qt));
    const int64_t n = grad->nnz;
    if ((st = check_grad_rows(grad, V))) return st;
    if (n == 0 || D == 0) return EMB_OK;
    if (!gen) gen = emb_default_generator();

    /* Scratch: the sorted entries, one float32 row, the new stored rows. */
    entry_key *keys = emb__malloc((size_t)n * sizeof *keys);
    float *w = emb__malloc((size_t)D * sizeof *w);
    int64_t nrows_bound;
    if (!emb__mul_i64(n, rb, &nrows_bound)) nrows_bound = INT64_MAX;
    uint8_t *staged =
        nrows_bound <= (int64_t)(SIZE_MAX / 2) ? emb__malloc((size_t)nrows_bound) : NULL;
    const size_t gsize = emb_generator_state_nbytes();
    void *saved = malloc(gsize);
    if (!keys || !w || !staged || !saved) {
        emb__free(keys);
        emb__free(w);
        emb__free(staged);
        free(saved);
        return emb__error(EMB_ERR_NOMEM,
                          "cannot allocate the scratch of a step over %" PRId64 " gradient entries",
                          n);
    }
    for (int64_t k = 0; k < n; k++) keys[k] = (entry_key){grad->indices[k], k};
    qsort(keys, (size_t)n, sizeof *keys, entry_cmp);
    emb_generator_get_state(gen, saved, gsize);

    const half_format *f = qt == EMB_QTYPE_F16 ? &F16 : qt == EMB_QTYPE_BF16 ? &BF16 : NULL;
    const float nlr = -lr;
    int64_t u = 0; /* unique rows staged */
    st = EMB_OK;
    for (int64_t a = 0; a < n && !st; u++) {
        const int64_t r = keys[a].row;
        const uint8_t *src = rows + r * rb;
        uint8_t *dst = staged + u * rb;
        if (f) {
            for (int64_t d = 0; d < D; d++) w[d] = f->widen(emb__get_u16le(src + 2 * d));
        } else {
            memcpy(w, src, (size_t)D * 4);
        }
        int64_t b = a;
        for (; b < n && keys[b].row == r; b++) {
            const float *v = grad->values + keys[b].k * D;
            for (int64_t d = 0; d < D; d++) w[d] = fmaf(v[d], nlr, w[d]);
        }
        for (int64_t d = 0; d < D && !st; d++) {
            if (!f) {
                if (!isfinite(w[d]))
                    st = emb__error(EMB_ERR_OVERFLOW,
                                    "row %" PRId64 ", column %" PRId64 ": the update gives %g", r,
                                    d, (double)w[d]);
                continue;
            }
            uint16_t h = 0;
            const uint32_t rnd = rounding == EMB_QROUND_STOCHASTIC ? emb_generator_random(gen) : 0;
            if (!round_half(f, w[d], rounding, rnd, &h))
                st = emb__error(EMB_ERR_OVERFLOW,
                                "row %" PRId64 ", column %" PRId64 ": %g is out of %s's range", r,
                                d, (double)w[d], f->name);
            dst[2 * d] = (uint8_t)(h & 0xff);
            dst[2 * d + 1] = (uint8_t)(h >> 8);
        }
        if (!f) memcpy(dst, w, (size_t)D * 4);
        a = b;
    }
    if (st) {
        emb_generator_set_state(gen, saved, gsize);
    } else {
        int64_t i = 0;
        for (int64_t a = 0; a < n; i++) {
            const int64_t r = keys[a].row;
            memcpy(rows + r * rb, staged + i * rb, (size_t)rb);
            while (a < n && keys[a].row == r) a++;
        }
    }
    emb__free(keys);
    emb__free(w);
    emb__free(staged);
    free(saved);
    return st;
}

emb_status emb_qtable_sgd_step_bag(emb_qtable *q, const emb_tensor *input,
                                   const emb_tensor *offsets, const emb_tensor *per_sample_weights,
                                   const emb_bag_options *opts, const emb_tensor *grad_output,
                                   float lr, emb_qround rounding, emb_generator *gen) {
    if (!q) return emb__null("table");
    emb_sparse_grad g;
    emb_status st = emb_sparse_grad_init(&g, emb_qtable_num_rows(q), emb_qtable_dim(q));
    if (st) return st;
    st = emb_qtable_bag_backward_sparse(q, input, offsets, per_sample_weights, opts, grad_output,
                                        &g);
    if (!st) st = emb_qtable_sgd_step(q, &g, lr, rounding, gen);
    emb_sparse_grad_release(&g);
    return st;
}
