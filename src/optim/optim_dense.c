/* src/optim/optim_dense.c: the dense step (emb_optimizer_step) and the dense elementwise
 * helpers the sparse steps share, over fixed chunks of elements split between threads (the
 * kernels are elementwise, so the bits do not depend on the thread count). */
#include "optim_internal.h"
#include "kernels/dispatch.h"

#include <inttypes.h>

#define DENSE_CHUNK ((int64_t)1 << 14)

/* Chunks [c0, c1) of a dense elementwise update of n elements: the step of an optimizer
 * kind on p with gradient g and state s1..s3 (args: its argument struct), or the scale
 * (p *= alpha) or axpy (p += alpha * g) the sparse steps share. */
enum { DENSE_SCALE = -1, DENSE_AXPY = -2 };
typedef struct dense_ctx {
    const emb__optim_kernel_table *K;
    int kind; /* an emb_optimizer_kind, DENSE_SCALE or DENSE_AXPY */
    int64_t n;
    float *p;
    const float *g;
    float *s1, *s2, *s3;
    const void *args;
    float alpha;
} dense_ctx;

static void dense_chunks(void *ctx, int64_t c0, int64_t c1, int ith) {
    (void)ith;
    const dense_ctx *d = ctx;
    const emb__optim_kernel_table *K = d->K;
    for (int64_t c = c0; c < c1; c++) {
        const int64_t b = c * DENSE_CHUNK, e = b + DENSE_CHUNK < d->n ? b + DENSE_CHUNK : d->n;
        switch (d->kind) {
        case DENSE_SCALE:
            K->scale(d->p + b, d->alpha, e - b);
            break;
        case DENSE_AXPY:
            K->axpy(d->p + b, d->g + b, d->alpha, e - b);
            break;
        case EMB_OPTIMIZER_SGD:
            K->sgd_dense(d->p + b, d->g + b, d->s1 ? d->s1 + b : NULL, e - b, d->args);
            break;
        case EMB_OPTIMIZER_ADAGRAD:
            K->adagrad_dense(d->p + b, d->g + b, d->s1 + b, e - b, d->args);
            break;
        default: /* Adam, AdamW */
            K->adam_dense(d->p + b, d->g + b, d->s1 + b, d->s2 + b, d->s3 ? d->s3 + b : NULL, e - b,
                          d->args);
            break;
        }
    }
}

emb_status emb_optimizer_step(emb_optimizer *opt, int param_id, const emb_tensor *grad) {
    emb__param_state *ps = NULL;
    emb_status st = emb__optim_get_param(opt, param_id, &ps);
    if (st) return st;
    if (!grad) return emb__null("grad");
    st = emb__check_f32_shape(grad, "grad", ps->ndim, ps->shape);
    if (st) return st;
    const emb_optimizer_options *o = &opt->o;
    if (o->kind == EMB_OPTIMIZER_SPARSE_ADAM)
        return emb__error(EMB_ERR_UNSUPPORTED,
                          "SparseAdam does not support dense gradients, please consider Adam "
                          "instead");
    bool momentum = o->kind == EMB_OPTIMIZER_SGD && o->momentum != 0.0;
    if (momentum && ps->buf_kind == EMB__BUF_SPARSE)
        return emb__error(EMB_ERR_UNSUPPORTED,
                          "SGD: parameter %d has a sparse momentum buffer from sparse steps, "
                          "which cannot take a dense gradient (PyTorch fails here with "
                          "\"add(sparse, dense) is not supported\")",
                          param_id);
    if (ps->steps == INT64_MAX) return emb__optim_steps_overflow(param_id);
    /* State (allocated before anything changes). */
    float *newbuf = NULL;
    if (momentum && ps->buf_kind == EMB__BUF_NONE) {
        newbuf = emb__malloc((size_t)ps->numel * sizeof(float));
        if (!newbuf)
            return emb__error(EMB_ERR_NOMEM,
                              "cannot allocate the momentum buffer (%" PRId64 " floats)",
                              ps->numel);
    }
    st = emb__optim_ensure_state(opt, ps);
    if (st) {
        emb__free(newbuf);
        return st;
    }

    const emb__optim_kernel_table *K = emb__kernels()->optim;
    const float *g = grad->data;
    float *p = emb__optim_param_data(ps);
    const int64_t n = ps->numel;
    const int64_t nchunks = (n + DENSE_CHUNK - 1) / DENSE_CHUNK;
    const int nt = emb__threads_for(n, DENSE_CHUNK);
    int64_t step = ps->steps + 1;

    switch (o->kind) {
    case EMB_OPTIMIZER_SGD: {
        emb__sgd_args a = emb__optim_sgd_args(o);
        float *buf = ps->s1;
        if (newbuf) {
            buf = newbuf;
            a.first = true;
        }
        dense_ctx d = {K, o->kind, n, p, g, buf, NULL, NULL, &a, 0.0f};
        emb__parallel_for(nt, nchunks, dense_chunks, &d);
        if (newbuf) {
            ps->s1 = newbuf;
            ps->buf_kind = EMB__BUF_DENSE;
        }
        break;
    }
    case EMB_OPTIMIZER_ADAGRAD: {
        emb__adagrad_args a = emb__optim_adagrad_args(o, step);
        float *sum = ps->s1;
        dense_ctx d = {K, o->kind, n, p, g, sum, NULL, NULL, &a, 0.0f};
        emb__parallel_for(nt, nchunks, dense_chunks, &d);
        break;
    }
    case EMB_OPTIMIZER_ADAM:
    case EMB_OPTIMIZER_ADAMW: {
        emb__adam_args a = emb__optim_adam_args(o, step);
        float *m = ps->s1, *v = ps->s2, *vmax = ps->s3;
        dense_ctx d = {K, o->kind, n, p, g, m, v, vmax, &a, 0.0f};
        emb__parallel_for(nt, nchunks, dense_chunks, &d);
        break;
    }
    case EMB_OPTIMIZER_SPARSE_ADAM:
        break; /* rejected above */
    }
    ps->steps = step;
    return EMB_OK;
}

void emb__optim_dense_scale(const emb__optim_kernel_table *K, float *x, float s, int64_t n) {
    dense_ctx d = {K, DENSE_SCALE, n, x, NULL, NULL, NULL, NULL, NULL, s};
    emb__parallel_for(emb__threads_for(n, DENSE_CHUNK), (n + DENSE_CHUNK - 1) / DENSE_CHUNK,
                      dense_chunks, &d);
}

void emb__optim_dense_axpy(const emb__optim_kernel_table *K, float *y, const float *x, float alpha,
                           int64_t n) {
    dense_ctx d = {K, DENSE_AXPY, n, y, x, NULL, NULL, NULL, NULL, alpha};
    emb__parallel_for(emb__threads_for(n, DENSE_CHUNK), (n + DENSE_CHUNK - 1) / DENSE_CHUNK,
                      dense_chunks, &d);
}
