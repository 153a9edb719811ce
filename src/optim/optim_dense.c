/* src/optim/optim_dense.c: the dense step (emb_optimizer_step) and the dense elementwise
 * helpers the sparse steps share, over fixed chunks of elements split between threads (the
 * kernels are elementwise, so the bits do not depend on the thread count). */
#include "optim_internal.h"
#include "kernels/dispatch.h"

#include <inttypes.h>

#define DENSE_CHUNK ((int64_t)1 << 14)

emb_status emb_optimizer_step(emb_optimizer *opt, int param_id, const emb_tensor *grad) {
    emb__param_state *ps = NULL;
    emb_status st = emb__optim_get_param(opt, param_id, &ps);
    if (st) return st;
    if (!grad) return emb__null("grad");
    st = emb__check_f32_shape(grad, "grad", ps->ndim, ps->shape);
    if (st) return st;
    const emb_optim_options *o = &opt->o;
    if (o->kind == EMB_OPTIM_SPARSE_ADAM)
        return emb__error(EMB_ERR_UNSUPPORTED,
                          "SparseAdam does not support dense gradients, please consider Adam "
                          "instead");
    bool momentum = o->kind == EMB_OPTIM_SGD && o->momentum != 0.0;
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
        newbuf = emb_malloc((size_t)ps->numel * sizeof(float));
        if (!newbuf)
            return emb__error(EMB_ERR_NOMEM, "cannot allocate the momentum buffer (%" PRId64
                              " floats)", ps->numel);
    }
    st = emb__optim_ensure_state(opt, ps);
    if (st) {
        emb_free(newbuf);
        return st;
    }

    const emb__optim_kernel_table *K = emb__kernels()->optim;
    const float *g = grad->data;
    float *p = emb__optim_param_data(ps);
    const int64_t n = ps->numel;
    const int64_t nchunks = (n + DENSE_CHUNK - 1) / DENSE_CHUNK;
    const int nt = emb__threads_for(n, DENSE_CHUNK);
    (void)nt; /* used only by the OpenMP pragmas */
    int64_t step = ps->steps + 1;

    switch (o->kind) {
    case EMB_OPTIM_SGD: {
        emb__sgd_args a = emb__optim_sgd_args(o);
        float *buf = ps->s1;
        if (newbuf) {
            buf = newbuf;
            a.first = true;
        }
#ifdef _OPENMP
#pragma omp parallel for num_threads(nt) schedule(static)
#endif
        for (int64_t c = 0; c < nchunks; c++) {
            int64_t b = c * DENSE_CHUNK, e = b + DENSE_CHUNK < n ? b + DENSE_CHUNK : n;
            K->sgd_dense(p + b, g + b, buf ? buf + b : NULL, e - b, &a);
        }
        if (newbuf) {
            ps->s1 = newbuf;
            ps->buf_kind = EMB__BUF_DENSE;
        }
        break;
    }
    case EMB_OPTIM_ADAGRAD: {
        emb__adagrad_args a = emb__optim_adagrad_args(o, step);
        float *sum = ps->s1;
#ifdef _OPENMP
#pragma omp parallel for num_threads(nt) schedule(static)
#endif
        for (int64_t c = 0; c < nchunks; c++) {
            int64_t b = c * DENSE_CHUNK, e = b + DENSE_CHUNK < n ? b + DENSE_CHUNK : n;
            K->adagrad_dense(p + b, g + b, sum + b, e - b, &a);
        }
        break;
    }
    case EMB_OPTIM_ADAM:
    case EMB_OPTIM_ADAMW: {
        emb__adam_args a = emb__optim_adam_args(o, step);
        float *m = ps->s1, *v = ps->s2, *vmax = ps->s3;
#ifdef _OPENMP
#pragma omp parallel for num_threads(nt) schedule(static)
#endif
        for (int64_t c = 0; c < nchunks; c++) {
            int64_t b = c * DENSE_CHUNK, e = b + DENSE_CHUNK < n ? b + DENSE_CHUNK : n;
            K->adam_dense(p + b, g + b, m + b, v + b, vmax ? vmax + b : NULL, e - b, &a);
        }
        break;
    }
    case EMB_OPTIM_SPARSE_ADAM: break; /* rejected above */
    }
    ps->steps = step;
    return EMB_OK;
}

void emb__optim_dense_scale(const emb__optim_kernel_table *K, float *x, float s, int64_t n) {
    const int64_t nchunks = (n + DENSE_CHUNK - 1) / DENSE_CHUNK;
    const int nt = emb__threads_for(n, DENSE_CHUNK);
    (void)nt; /* used only by the OpenMP pragmas */
#ifdef _OPENMP
#pragma omp parallel for num_threads(nt) schedule(static)
#endif
    for (int64_t c = 0; c < nchunks; c++) {
        int64_t b = c * DENSE_CHUNK, e = b + DENSE_CHUNK < n ? b + DENSE_CHUNK : n;
        K->scale(x + b, s, e - b);
    }
}

void emb__optim_dense_axpy(const emb__optim_kernel_table *K, float *y, const float *x,
                           float alpha, int64_t n) {
    const int64_t nchunks = (n + DENSE_CHUNK - 1) / DENSE_CHUNK;
    const int nt = emb__threads_for(n, DENSE_CHUNK);
    (void)nt; /* used only by the OpenMP pragmas */
#ifdef _OPENMP
#pragma omp parallel for num_threads(nt) schedule(static)
#endif
    for (int64_t c = 0; c < nchunks; c++) {
        int64_t b = c * DENSE_CHUNK, e = b + DENSE_CHUNK < n ? b + DENSE_CHUNK : n;
        K->axpy(y + b, x + b, alpha, e - b);
    }
}
