/* src/nn/embedding_bag.c: nn.EmbeddingBag and F.embedding_bag — construction, argument
 * checks shared by every bag call, and the forward. The backward lives in
 * embedding_bag_backward.c. See docs/semantics.md §14.
 *
 * A bag is an emb_embedding (the table, with padding_idx, max_norm, requires_grad and
 * its storage: owned, copied or borrowed) plus the pooling mode. Every call validates all
 * of its arguments and resolves the bags into starts[B + 1] before it writes anything;
 * the kernels in src/kernels/bag_ref.c then run on bag ranges. */
#include "embedding_bag_internal.h"

#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Parallelise the pooling once it reads more than this many floats. */
#define EMB__BAG_GRAIN 32768

static const char *mode_name(emb_bag_mode m) {
    return m == EMB_BAG_SUM ? "sum" : m == EMB_BAG_MEAN ? "mean" : "max";
}

/* ---------------------------------------------------------------------------------------
 * Options and construction
 * ------------------------------------------------------------------------------------- */

emb_bag_options emb_bag_options_default(void) {
    emb_bag_options o;
    memset(&o, 0, sizeof o);
    o.mode = EMB_BAG_MEAN;
    o.padding_idx = EMB_PADDING_NONE;
    o.max_norm = INFINITY;
    o.norm_type = 2.0;
    return o;
}

emb_status emb__bag_check_mode(emb_bag_mode mode, bool scale_grad_by_freq, bool sparse) {
    if (mode != EMB_BAG_SUM && mode != EMB_BAG_MEAN && mode != EMB_BAG_MAX)
        return emb__error(EMB_ERR_INVALID, "mode has to be one of sum, mean or max (got %d)",
                          (int)mode);
    if (mode == EMB_BAG_MAX && scale_grad_by_freq)
        return emb__error(EMB_ERR_INVALID,
                          "max mode does not support scaling the gradient by the frequency");
    if (mode == EMB_BAG_MAX && sparse)
        return emb__error(EMB_ERR_INVALID, "max mode does not support sparse weights");
    return EMB_OK;
}

/* The bag's own checks (mode, and padding_idx with nn.EmbeddingBag's lowercase wording),
 * then the embedding options the table is created with. */
static emb_status bag_config(int64_t num_embeddings, const emb_bag_options *o,
                             emb_embedding_options *eo) {
    emb_status st = emb__bag_check_mode(o->mode, o->scale_grad_by_freq, o->sparse);
    if (st) return st;
    int64_t p = o->padding_idx;
    if (p != EMB_PADDING_NONE && num_embeddings >= 1 &&
        (p >= num_embeddings || p < -num_embeddings))
        return emb__error(EMB_ERR_INVALID,
                          "padding_idx must be within num_embeddings: got padding_idx=%" PRId64
                          ", valid: [%" PRId64 ", %" PRId64 ")",
                          p, -num_embeddings, num_embeddings);
    *eo = emb_embedding_options_default();
    eo->padding_idx = o->padding_idx;
    eo->max_norm = o->max_norm;
    eo->norm_type = o->norm_type;
    eo->scale_grad_by_freq = o->scale_grad_by_freq;
    eo->sparse = o->sparse;
    eo->generator = o->generator;
    return EMB_OK;
}

/* A zeroed bag handle in *b: allocated before the table, so that nothing can fail once the
 * table exists (or its memory was handed over). */
static emb_status bag_alloc(emb_bag **b) {
    *b = calloc(1, sizeof **b);
    return *b ? EMB_OK : emb__error(EMB_ERR_NOMEM, "cannot allocate an embedding bag handle");
}

/* Fills in the bag's own fields and hands it out. */
static emb_status bag_finish(emb_bag *b, const emb_bag_options *o, emb_bag **out) {
    b->mode = o->mode;
    b->include_last_offset = o->include_last_offset;
    *out = b;
    return EMB_OK;
}

/* The checks shared by the constructors from a weight tensor: weights and out given, and
 * the options (opts NULL: the defaults, copied into *o) valid for weights' rows. */
static emb_status weights_config(const emb_tensor *weights, const emb_bag_options *opts,
                                 emb_bag **out, emb_bag_options *o, emb_embedding_options *eo) {
    *o = opts ? *opts : emb_bag_options_default();
    if (!weights) return emb__null("weights");
    if (!out) return emb__null("out");
    return bag_config(weights->ndim == 2 ? weights->shape[0] : 0, o, eo);
}

emb_status emb_bag_create(int64_t num_embeddings, int64_t embedding_dim,
                          const emb_bag_options *opts, emb_bag **out) {
    if (!out) return emb__null("out");
    emb_bag_options defaults = emb_bag_options_default();
    const emb_bag_options *o = opts ? opts : &defaults;
    emb_embedding_options eo;
    emb_status st = bag_config(num_embeddings, o, &eo);
    if (st) return st;
    emb_bag *b;
    if ((st = bag_alloc(&b))) return st;
    st = emb_embedding_create(num_embeddings, embedding_dim, &eo, &b->emb);
    if (st) {
        free(b);
        return st;
    }
    return bag_finish(b, o, out);
}

/* from_pretrained (a copy of weights) or, with wrap, a bag over the caller's weights. */
static emb_status bag_from_weights(const emb_tensor *weights, bool wrap, const emb_storage *storage,
                                   bool freeze, const emb_bag_options *opts, emb_bag **out) {
    emb_bag_options o;
    emb_embedding_options eo;
    emb_status st = weights_config(weights, opts, out, &o, &eo);
    if (st) return st;
    emb_bag *b;
    if ((st = bag_alloc(&b))) return st;
    st = wrap ? emb_embedding_wrap(weights, storage, freeze, &eo, &b->emb)
              : emb_embedding_from_pretrained(weights, freeze, &eo, &b->emb);
    if (st) {
        free(b);
        return st;
    }
    return bag_finish(b, &o, out);
}

emb_status emb_bag_from_pretrained(const emb_tensor *weights, bool freeze,
                                   const emb_bag_options *opts, emb_bag **out) {
    return bag_from_weights(weights, false, NULL, freeze, opts, out);
}

emb_status emb_bag_wrap(const emb_tensor *weights, const emb_storage *storage, bool freeze,
                        const emb_bag_options *opts, emb_bag **out) {
    return bag_from_weights(weights, true, storage, freeze, opts, out);
}

void emb_bag_free(emb_bag *bag) {
    if (!bag) return;
    emb_embedding_free(bag->emb);
    free(bag);
}

emb_embedding *emb_bag_embedding(emb_bag *bag) {
    return bag ? bag->emb : NULL;
}

void emb__bag_info(const emb_bag *bag, emb__table_info *out) {
    emb__embedding_info(bag->emb, out);
}

emb_status emb_bag_weight(emb_bag *bag, emb_tensor *view) {
    if (!bag) return emb__null("bag");
    return emb_embedding_weight(bag->emb, view);
}

emb_bag_mode emb_bag_mode_of(const emb_bag *bag) {
    return bag ? bag->mode : EMB_BAG_MEAN;
}
bool emb_bag_include_last_offset(const emb_bag *bag) {
    return bag ? bag->include_last_offset : false;
}

/* ---------------------------------------------------------------------------------------
 * Argument checks shared by forward and backward
 * ------------------------------------------------------------------------------------- */

void emb__bag_batch_free(emb__bag_batch *bb) {
    emb__free(bb->starts);
    bb->starts = NULL;
}

static emb_status resolve_starts(emb__bag_batch *bb, const emb_tensor *offsets,
                                 bool include_last_offset);

emb_status emb__bag_batch_init(const emb__bag_cfg *c, const emb_tensor *input,
                               const emb_tensor *offsets, const emb_tensor *psw,
                               emb__bag_batch *bb) {
    memset(bb, 0, sizeof *bb);
    emb_status st = emb__check_indices(input, "input", "embedding_bag");
    if (st) return st;
    if (input->ndim != 1 && input->ndim != 2)
        return emb__error(EMB_ERR_SHAPE,
                          "input has to be 1D or 2D Tensor, but got Tensor of "
                          "dimension %d",
                          input->ndim);
    char a[300], b[300];
    if (psw) {
        st = emb_tensor_check(psw, "per_sample_weights");
        if (st) return st;
        if (!emb__tensor_same_shape(psw, input))
            return emb__error(EMB_ERR_SHAPE,
                              "embedding_bag: If per_sample_weights (%s) is not NULL, then it "
                              "must have the same shape as the input (%s)",
                              emb__shape_fmt(a, sizeof a, psw->ndim, psw->shape),
                              emb__shape_fmt(b, sizeof b, input->ndim, input->shape));
        if (psw->dtype != EMB_FLOAT32) /* PyTorch: "... to have the same type as ..." */
            return emb__error(EMB_ERR_DTYPE,
                              "per_sample_weights must have the same type as the weight "
                              "(float32), got %s",
                              emb_dtype_name(psw->dtype));
    }
    const int64_t n = emb_tensor_numel(input);
    int64_t K = 0;
    if (input->ndim == 2) {
        if (offsets)
            return emb__error(EMB_ERR_INVALID,
                              "if input is 2D, then offsets has to be NULL, as input is treated "
                              "as a mini-batch of fixed length sequences; but offsets were "
                              "given");
    } else {
        if (!offsets) return emb__error(EMB_ERR_NULL, "offsets has to be a 1D Tensor but got NULL");
        st = emb__check_indices(offsets, "offsets", "embedding_bag");
        if (st) return st;
        if (offsets->ndim != 1)
            return emb__error(EMB_ERR_SHAPE, "offsets has to be a 1D Tensor, got %d dimensions",
                              offsets->ndim);
        K = offsets->shape[0];
    }
    if (psw && c->mode != EMB_BAG_SUM)
        return emb__error(EMB_ERR_UNSUPPORTED,
                          "embedding_bag: per_sample_weights was not NULL. per_sample_weights "
                          "is only supported for mode='sum' (got mode='%s')",
                          mode_name(c->mode));
    int64_t B;
    if (input->ndim == 2) {
        B = input->shape[0];
    } else {
        if (c->include_last_offset && K < 1)
            return emb__error(EMB_ERR_INVALID,
                              "include_last_offset: number of offset should be at least 1");
        B = c->include_last_offset ? K - 1 : K;
        for (int64_t i = 0; i < K; i++) {
            const int64_t v = emb__index_at(offsets, i);
            if (i == 0 && v != 0)
                return emb__error(EMB_ERR_INVALID,
                                  "offsets[0] has to be 0, i.e., the first sequence in the "
                                  "mini-batch has to start from position 0. However, got %" PRId64,
                                  v);
            if (i > 0 && v < emb__index_at(offsets, i - 1))
                return emb__error(EMB_ERR_INVALID,
                                  "offsets must be non-decreasing, but offsets[%" PRId64
                                  "] = %" PRId64 " is less than offsets[%" PRId64 "] = %" PRId64,
                                  i, v, i - 1, emb__index_at(offsets, i - 1));
            if (v > n)
                return emb__error(EMB_ERR_INVALID,
                                  "offsets[%" PRId64 "] = %" PRId64
                                  " is past the end of the input (length %" PRId64 ")",
                                  i, v, n);
        }
    }
    bb->input = input;
    bb->idx = input->data;
    bb->i32 = input->dtype == EMB_INT32;
    bb->n = n;
    bb->B = B;
    bb->psw = psw ? psw->data : NULL;
    bb->fixed = input->ndim == 2 ? input->shape[1] : -1;
    if (input->ndim == 2 && input->shape[1] == 0) {
        /* B bags of no positions: nothing in the caller's memory bounds B (a [2^31, 0] input
         * costs nothing), so the offsets are resolved only once the outputs, of B rows, have
         * been checked (emb__bag_batch_ready) */
        bb->end = 0;
        return EMB_OK;
    }
    return resolve_starts(bb, offsets, c->include_last_offset);
}

emb_status emb__bag_batch_ready(emb__bag_batch *bb) {
    return bb->starts ? EMB_OK : resolve_starts(bb, NULL, false);
}

static emb_status resolve_starts(emb__bag_batch *bb, const emb_tensor *offsets,
                                 bool include_last_offset) {
    const emb_tensor *input = bb->input;
    const int64_t B = bb->B, n = bb->n, K = offsets ? offsets->shape[0] : 0;
    int64_t bytes;
    if (!emb__mul_i64(B + 1, (int64_t)sizeof(int64_t), &bytes) || (uint64_t)bytes > SIZE_MAX)
        return emb__error(EMB_ERR_OVERFLOW, "embedding_bag: %" PRId64 " bags overflow", B);
    int64_t *starts = emb__malloc((size_t)bytes);
    if (!starts)
        return emb__error(EMB_ERR_NOMEM, "embedding_bag: cannot allocate %" PRId64 " bag offsets",
                          B + 1);
    if (input->ndim == 2) {
        const int64_t N = input->shape[1];
        for (int64_t i = 0; i <= B; i++) starts[i] = i * N;
    } else {
        for (int64_t i = 0; i < B; i++) starts[i] = emb__index_at(offsets, i);
        /* with no bags at all (empty offsets), no position lies in a bag: end = 0 */
        starts[B] = include_last_offset ? emb__index_at(offsets, K - 1) : B > 0 ? n : 0;
    }
    bb->end = starts[B];
    bb->starts = starts;
    return EMB_OK;
}

/* The bag that holds position p < end (the last bag b with starts[b] <= p: empty bags
 * that share its start come before it). */
int64_t emb__bag_of(const emb__bag_batch *bb, int64_t p) {
    int64_t lo = 0, hi = bb->B; /* answer in [0, B) */
    while (hi - lo > 1) {
        int64_t mid = lo + (hi - lo) / 2;
        if (bb->starts[mid] <= p)
            lo = mid;
        else
            hi = mid;
    }
    return lo;
}

emb_status emb__bag_check_index_values(const emb__bag_cfg *c, const emb__bag_batch *bb) {
    int64_t bad = emb__find_bad_index(bb->input, c->V);
    if (bad < 0) return EMB_OK;
    const int64_t v = emb__index_at(bb->input, bad);
    if (bad >= bb->end)
        return emb__error(EMB_ERR_INDEX,
                          "embedding_bag: index %" PRId64 " at input position %" PRId64
                          " (after the last bag, which ends at %" PRId64
                          ") is out of range for a table of %" PRId64 " rows (valid: [0, %" PRId64
                          "))",
                          v, bad, bb->end, c->V, c->V);
    const int64_t bag = emb__bag_of(bb, bad);
    return emb__error(EMB_ERR_INDEX,
                      "embedding_bag: index %" PRId64 " at position %" PRId64 " of bag %" PRId64
                      " (input position %" PRId64 ") is out of range for a table of %" PRId64
                      " rows (valid: [0, %" PRId64 "))",
                      v, bad - bb->starts[bag], bag, bad, c->V, c->V);
}

/* [B, dim] float32 output, and max_indices (int64 [B, dim], only in mode max). */
emb_status emb__bag_check_outputs(const emb__bag_cfg *c, const emb__bag_batch *bb,
                                  const emb_tensor *out, const emb_tensor *max_indices) {
    const int64_t shape[2] = {bb->B, c->D};
    emb_status st = emb__check_f32_shape(out, "out", 2, shape);
    if (st) return st;
    if (!max_indices) return EMB_OK;
    if (c->mode != EMB_BAG_MAX)
        return emb__error(EMB_ERR_INVALID,
                          "max_indices is only produced in mode max (the mode is %s); pass NULL",
                          mode_name(c->mode));
    return emb__bag_check_i64_shape(max_indices, "max_indices", shape);
}

emb_status emb__bag_check_i64_shape(const emb_tensor *t, const char *what, const int64_t shape[2]) {
    emb_status st = emb_tensor_check(t, what);
    if (st) return st;
    if (t->dtype != EMB_INT64)
        return emb__error(EMB_ERR_DTYPE, "%s must be int64, got %s", what,
                          emb_dtype_name(t->dtype));
    if (t->ndim != 2 || t->shape[0] != shape[0] || t->shape[1] != shape[1]) {
        char g[300], w[300];
        return emb__error(EMB_ERR_SHAPE, "%s has shape %s, expected %s", what,
                          emb__shape_fmt(g, sizeof g, t->ndim, t->shape),
                          emb__shape_fmt(w, sizeof w, 2, shape));
    }
    return EMB_OK;
}

/* ---------------------------------------------------------------------------------------
 * Forward
 * ------------------------------------------------------------------------------------- */

/* Share t of the pooling: bags split so that each share gets about end / nt positions. */
typedef struct pool_ctx {
    const emb__bag_kernel_table *K;
    const emb__bag_cfg *c;
    const emb__bag_batch *bb;
    const float *W;
    float *out;
    int64_t *max_idx;
} pool_ctx;

static void pool_share(void *p, int t, int nt) {
    const pool_ctx *x = p;
    const emb__bag_cfg *c = x->c;
    const emb__bag_batch *bb = x->bb;
    int64_t b0, b1;
    emb__split_by(bb->starts, bb->B, t, nt, &b0, &b1);
    if (b0 >= b1) return;
    if (c->mode == EMB_BAG_MAX)
        x->K->max(x->out, x->max_idx, x->W, c->D, bb->idx, bb->i32, bb->starts, b0, b1, c->pad);
    else
        x->K->pool(x->out, x->W, c->D, bb->idx, bb->i32, bb->starts, b0, b1, bb->psw, c->pad,
                   c->mode == EMB_BAG_MEAN);
}

static void pool(const emb__bag_cfg *c, const emb__bag_batch *bb, const float *W, float *out,
                 int64_t *max_idx) {
    const int64_t B = bb->B, D = c->D, end = bb->end;
    if (B == 0 || D == 0) return; /* nothing to write (out may be NULL: it has no elements) */
    const emb__bag_kernel_table *K = emb__kernels()->bag;
    int64_t work;
    if (!emb__mul_i64(end + B, D, &work)) work = INT64_MAX;
    int nt = emb__threads_for(work, EMB__BAG_GRAIN);
    if (nt > B) nt = (int)B;
    pool_ctx p = {K, c, bb, W, out, max_idx};
    emb__parallel(nt, pool_share, &p);
}

/* The whole forward on a validated configuration: checks, optional renorm, pooling. */
static emb_status forward(const emb__bag_cfg *c, float *W, bool read_only, const emb_tensor *input,
                          const emb_tensor *offsets, const emb_tensor *psw, emb_tensor *out,
                          emb_tensor *max_indices) {
    if (!input) return emb__null("input");
    if (!out) return emb__null("out");
    emb__bag_batch bb;
    emb_status st = emb__bag_batch_init(c, input, offsets, psw, &bb);
    if (st) return st;
    st = emb__bag_check_outputs(c, &bb, out, max_indices);
    if (!st && c->D > 0) st = emb__bag_batch_ready(&bb); /* out holds B rows */
    if (!st) st = emb__bag_check_index_values(c, &bb);
    if (!st && c->max_norm != INFINITY && bb.end > 0) {
        if (read_only) {
            st = emb__error(EMB_ERR_READ_ONLY,
                            "embedding_bag: the table is read-only, and max_norm would "
                            "renormalise its rows in place");
        } else {
            /* every position inside a bag, padding included, as PyTorch */
            emb_tensor w, ix;
            const int64_t ws[2] = {c->V, c->D}, is[1] = {bb.end};
            st = emb_tensor_init(&w, EMB_FLOAT32, W, 2, ws);
            if (!st) st = emb_tensor_init(&ix, input->dtype, input->data, 1, is);
            if (!st) st = emb_embedding_renorm_(&w, &ix, c->max_norm, c->norm_type);
        }
    }
    if (!st) pool(c, &bb, W, out->data, max_indices ? max_indices->data : NULL);
    emb__bag_batch_free(&bb);
    return st;
}

void emb__bag_cfg_of(const emb_bag *bag, emb__bag_cfg *c) {
    const emb_embedding *e = bag->emb;
    c->V = e->num_embeddings;
    c->D = e->embedding_dim;
    c->pad = e->padding_idx;
    c->mode = bag->mode;
    c->include_last_offset = bag->include_last_offset;
    c->scale_grad_by_freq = e->scale_grad_by_freq;
    c->max_norm = e->max_norm;
    c->norm_type = e->norm_type;
}

emb_status emb_bag_num_bags(const emb_bag *bag, const emb_tensor *input, const emb_tensor *offsets,
                            int64_t *num_bags) {
    if (!bag) return emb__null("bag");
    if (!input) return emb__null("input");
    if (!num_bags) return emb__null("num_bags");
    emb__bag_cfg c;
    emb__bag_cfg_of(bag, &c);
    c.mode = EMB_BAG_SUM; /* no per_sample_weights check here */
    emb__bag_batch bb;
    emb_status st = emb__bag_batch_init(&c, input, offsets, NULL, &bb);
    if (st) return st;
    *num_bags = bb.B;
    emb__bag_batch_free(&bb);
    return EMB_OK;
}

emb_status emb_bag_forward(emb_bag *bag, const emb_tensor *input, const emb_tensor *offsets,
                           const emb_tensor *per_sample_weights, emb_tensor *out,
                           emb_tensor *max_indices) {
    if (!bag) return emb__null("bag");
    emb__bag_cfg c;
    emb__bag_cfg_of(bag, &c);
    return forward(&c, bag->emb->weight, bag->emb->read_only, input, offsets, per_sample_weights,
                   out, max_indices);
}

emb_status emb__bag_cfg_from_options(int64_t V, int64_t D, const emb_bag_options *opts,
                                     emb__bag_cfg *out) {
    emb_bag_options defaults = emb_bag_options_default();
    const emb_bag_options *o = opts ? opts : &defaults;
    emb_status st = emb__bag_check_mode(o->mode, o->scale_grad_by_freq, o->sparse);
    if (st) return st;
    int64_t pad = o->padding_idx;
    if (pad != EMB_PADDING_NONE) {
        if (pad >= V || pad < -V)
            return emb__error(EMB_ERR_INVALID,
                              "padding_idx must be within the number of embeddings, %" PRId64
                              " through %" PRId64 ", but got %" PRId64,
                              -V, V - 1, pad);
        if (pad < 0) pad += V;
    }
    if (isnan(o->max_norm) || !(o->max_norm > 0))
        return emb__error(EMB_ERR_INVALID, "max_norm must be > 0 (INFINITY for none), got %g",
                          o->max_norm);
    if (isnan(o->norm_type)) return emb__error(EMB_ERR_INVALID, "norm_type must not be NaN");
    emb__bag_cfg c;
    c.V = V;
    c.D = D;
    c.pad = pad;
    c.mode = o->mode;
    c.include_last_offset = o->include_last_offset;
    c.scale_grad_by_freq = o->scale_grad_by_freq;
    c.max_norm = o->max_norm;
    c.norm_type = o->norm_type;
    *out = c;
    return EMB_OK;
}

emb_status emb_bag_lookup(emb_tensor *weight, const emb_tensor *input, const emb_tensor *offsets,
                          const emb_tensor *per_sample_weights, const emb_bag_options *opts,
                          emb_tensor *out, emb_tensor *max_indices) {
    if (!weight) return emb__null("weight");
    emb_status st = emb_tensor_check(weight, "weight");
    if (st) return st;
    if (weight->ndim != 2) /* later PyTorch's wording (1.13 accepts such a weight) */
        return emb__error(EMB_ERR_SHAPE,
                          "weight has to be a 2D Tensor, but got Tensor of dimension %d",
                          weight->ndim);
    if (weight->dtype != EMB_FLOAT32) /* PyTorch's wording; emb's tables are float32 */
        return emb__error(EMB_ERR_DTYPE,
                          "Expected tensor for argument #1 'weight' to have one of the following "
                          "scalar types: Float; but got %s instead (while checking arguments for "
                          "embedding_bag)",
                          emb_dtype_nbytes(weight->dtype) ? emb__dtype_torch_type(weight->dtype)
                                                          : "unknown");
    emb__bag_cfg c;
    st = emb__bag_cfg_from_options(weight->shape[0], weight->shape[1], opts, &c);
    if (st) return st;
    return forward(&c, weight->data, false, input, offsets, per_sample_weights, out, max_indices);
}
