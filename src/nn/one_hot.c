/* F.one_hot (docs/semantics.md §9). */
#include "internal.h"
#include <emb/linear.h>

#include <inttypes.h>
#include <string.h>

/* Validates `indices` and resolves the number of classes; the checks and their order are
 * PyTorch's: dtype, empty input, negative values, values too large. */
static emb_status resolve_classes(const emb_tensor *indices, int64_t num_classes,
                                  int64_t *out_classes) {
    if (!indices) return emb__null("indices");
    emb_status st = emb_tensor_check(indices, "indices");
    if (st) return st;
    if (indices->dtype != EMB_INT64)
        return emb__error(EMB_ERR_DTYPE,
                          "one_hot is only applicable to index tensor. (indices are %s; "
                          "one_hot takes int64)",
                          emb_dtype_name(indices->dtype));
    if (indices->ndim > EMB_MAX_INDEX_DIMS)
        return emb__error(EMB_ERR_SHAPE, "indices have %d dimensions; at most %d are supported",
                          indices->ndim, EMB_MAX_INDEX_DIMS);
    int64_t n = emb_tensor_numel(indices);
    if (n == 0) {
        if (num_classes <= 0)
            return emb__error(EMB_ERR_INVALID,
                              "Can not infer total number of classes from empty tensor. "
                              "(num_classes is %" PRId64 "; give a positive value)",
                              num_classes);
        *out_classes = num_classes;
        return EMB_OK;
    }
    const int64_t *p = indices->data;
    int64_t min_pos = 0, max_pos = 0;
    for (int64_t i = 1; i < n; i++) {
        if (p[i] < p[min_pos]) min_pos = i;
        if (p[i] > p[max_pos]) max_pos = i;
    }
    if (p[min_pos] < 0)
        return emb__error(EMB_ERR_INDEX,
                          "Class values must be non-negative. (value %" PRId64
                          " at position %" PRId64 ")",
                          p[min_pos], min_pos);
    int64_t mx = p[max_pos];
    if (num_classes == -1) {
        if (mx == INT64_MAX)
            return emb__error(EMB_ERR_OVERFLOW,
                              "one_hot: the inferred number of classes (max value %" PRId64
                              " + 1) overflows int64",
                              mx);
        *out_classes = mx + 1;
        return EMB_OK;
    }
    if (mx >= num_classes)
        return emb__error(EMB_ERR_INDEX,
                          "Class values must be smaller than num_classes. (value %" PRId64
                          " at position %" PRId64 "; num_classes is %" PRId64 ")",
                          mx, max_pos, num_classes);
    *out_classes = num_classes;
    return EMB_OK;
}

emb_status emb_one_hot_num_classes(const emb_tensor *indices, int64_t num_classes,
                                   int64_t *out_classes) {
    if (!out_classes) return emb__null("out_classes");
    int64_t c = 0;
    emb_status st = resolve_classes(indices, num_classes, &c);
    if (st) return st;
    *out_classes = c;
    return EMB_OK;
}

/* Rows [lo, hi) of the one-hot output: zeros (all-zero bits, +0.0f for float32) and a one
 * at the row's index. */
typedef struct one_hot_ctx {
    const int64_t *idx;
    void *out;
    int64_t classes;
    bool i64;
} one_hot_ctx;

static void one_hot_rows(void *p, int64_t lo, int64_t hi, int ith) {
    (void)ith;
    const one_hot_ctx *c = p;
    const int64_t classes = c->classes;
    for (int64_t i = lo; i < hi; i++) {
        if (c->i64) {
            int64_t *row = (int64_t *)c->out + i * classes;
            memset(row, 0, (size_t)classes * sizeof *row);
            row[c->idx[i]] = 1;
        } else {
            float *row = (float *)c->out + i * classes;
            memset(row, 0, (size_t)classes * sizeof *row);
            row[c->idx[i]] = 1.0f;
        }
    }
}

emb_status emb_one_hot(const emb_tensor *indices, int64_t num_classes, emb_tensor *out) {
    int64_t classes = 0;
    emb_status st = resolve_classes(indices, num_classes, &classes);
    if (st) return st;
    if (!out) return emb__null("out");
    st = emb_tensor_check(out, "out");
    if (st) return st;
    if (out->dtype != EMB_INT64 && out->dtype != EMB_FLOAT32)
        return emb__error(EMB_ERR_DTYPE, "one_hot: out must be int64 or float32, got %s",
                          emb_dtype_name(out->dtype));
    int64_t want[EMB_MAX_DIMS];
    int nd = indices->ndim + 1;
    for (int i = 0; i < indices->ndim; i++) want[i] = indices->shape[i];
    want[indices->ndim] = classes;
    bool same = out->ndim == nd;
    for (int i = 0; same && i < nd; i++) same = out->shape[i] == want[i];
    if (!same) {
        char got_s[300], want_s[300];
        return emb__error(EMB_ERR_SHAPE, "one_hot: out has shape %s, expected %s",
                          emb__shape_fmt(got_s, sizeof got_s, out->ndim, out->shape),
                          emb__shape_fmt(want_s, sizeof want_s, nd, want));
    }
    if (emb__overlap(out->data, emb_tensor_nbytes(out), indices->data, emb_tensor_nbytes(indices)))
        return emb__error(EMB_ERR_INVALID, "one_hot: out must not overlap indices");

    int64_t n = emb_tensor_numel(indices);
    if (n == 0 || classes == 0) return EMB_OK; /* out has no elements */
    one_hot_ctx c = {indices->data, out->data, classes, out->dtype == EMB_INT64};
    emb__parallel_for(emb__threads_for(n * classes, 1 << 16), n, one_hot_rows, &c);
    return EMB_OK;
}
