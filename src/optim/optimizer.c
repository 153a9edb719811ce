/* src/optim/optimizer.c: torch.optim.SGD, Adagrad, Adam, AdamW and SparseAdam of PyTorch
 * 1.13 (single-tensor implementations, foreach=False, CPU): the optimizer handle, its
 * parameters and their lazily created state. The steps are in optim_dense.c,
 * optim_sparse.c, optim_fused.c and optim_hogwild.c (see optim_internal.h). */
#include "optim_internal.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

emb_status emb_optimizer_create(const emb_optimizer_options *opts, emb_optimizer **out) {
    if (!opts) return emb__null("opts");
    if (!out) return emb__null("out");
    emb_status st = emb__optim_check_options(opts);
    if (st) return st;
    emb_optimizer *opt = calloc(1, sizeof *opt);
    if (!opt) return emb__error(EMB_ERR_NOMEM, "cannot allocate an optimizer");
    opt->o = *opts;
    *out = opt;
    return EMB_OK;
}

void emb__optim_free_state(emb__param_state *ps) {
    emb__free(ps->s1);
    emb__free(ps->s2);
    emb__free(ps->s3);
    emb__free(ps->sp_rows);
    emb__free(ps->sp_vals);
}

void emb_optimizer_free(emb_optimizer *opt) {
    if (!opt) return;
    for (int i = 0; i < opt->nparams; i++) emb__optim_free_state(&opt->ps[i]);
    free(opt->ps);
    emb__free(opt->scratch);
    free(opt);
}

emb_status emb_optimizer_add_param(emb_optimizer *opt, const emb_tensor *param, int *param_id) {
    if (!opt) return emb__null("opt");
    emb_status st = emb_tensor_check(param, "param");
    if (st) return st;
    if (param->dtype != EMB_FLOAT32)
        return emb__error(EMB_ERR_DTYPE, "param must be float32, got %s",
                          emb_dtype_name(param->dtype));
    int64_t numel = emb_tensor_numel(param);
    /* PyTorch: "some parameters appear in more than one parameter group". */
    if (numel > 0) {
        const char *b0 = param->data;
        const char *e0 = b0 + numel * (int64_t)sizeof(float);
        for (int i = 0; i < opt->nparams; i++) {
            const emb__param_state *q = &opt->ps[i];
            if (q->numel == 0) continue;
            const char *b1 = (const char *)q->data;
            const char *e1 = b1 + q->numel * (int64_t)sizeof(float);
            if (b0 < e1 && b1 < e0)
                return emb__error(EMB_ERR_INVALID,
                                  "param overlaps the memory of parameter %d, which is "
                                  "already registered with this optimizer",
                                  i);
        }
    }
    if (opt->nparams == INT32_MAX) return emb__error(EMB_ERR_OVERFLOW, "too many parameters");
    if (opt->nparams == opt->cap) {
        int ncap = opt->cap ? (opt->cap > INT32_MAX / 2 ? INT32_MAX : opt->cap * 2) : 4;
        emb__param_state *nps = realloc(opt->ps, (size_t)ncap * sizeof *nps);
        if (!nps) return emb__error(EMB_ERR_NOMEM, "cannot grow the parameter list");
        opt->ps = nps;
        opt->cap = ncap;
    }
    emb__param_state *ps = &opt->ps[opt->nparams];
    memset(ps, 0, sizeof *ps);
    ps->data = param->data;
    ps->ndim = param->ndim;
    for (int i = 0; i < param->ndim; i++) ps->shape[i] = param->shape[i];
    ps->numel = numel;
    if (param_id) *param_id = opt->nparams;
    opt->nparams++;
    return EMB_OK;
}

int64_t emb_optimizer_param_steps(const emb_optimizer *opt, int param_id) {
    if (!opt || param_id < 0 || param_id >= opt->nparams) return -1;
    return opt->ps[param_id].steps;
}

float *emb__optim_param_data(const emb__param_state *ps) {
    static float no_elements[1];
    return ps->data ? ps->data : no_elements;
}

emb_status emb__optim_steps_overflow(int param_id) {
    return emb__error(EMB_ERR_OVERFLOW, "parameter %d: the step count overflows", param_id);
}

emb_status emb__optim_check_param_id(const emb_optimizer *opt, int param_id) {
    if (!opt) return emb__null("opt");
    if (param_id < 0 || param_id >= opt->nparams)
        return emb__error(EMB_ERR_INDEX,
                          "param_id %d is out of range for an optimizer with %d parameters "
                          "(valid: [0, %d))",
                          param_id, opt->nparams, opt->nparams);
    return EMB_OK;
}

emb_status emb__optim_get_param(emb_optimizer *opt, int param_id, emb__param_state **out) {
    emb_status st = emb__optim_check_param_id(opt, param_id);
    if (st) return st;
    *out = &opt->ps[param_id];
    return EMB_OK;
}

int emb__optim_state_buffers(const emb_optimizer_options *o) {
    switch (o->kind) {
    case EMB_OPTIMIZER_ADAGRAD:
        return 1;
    case EMB_OPTIMIZER_ADAM:
    case EMB_OPTIMIZER_ADAMW:
        return o->amsgrad ? 3 : 2;
    case EMB_OPTIMIZER_SPARSE_ADAM:
        return 2;
    default:
        return 0;
    }
}

emb_status emb__optim_ensure_state(const emb_optimizer *opt, emb__param_state *ps) {
    if (ps->initialized) return EMB_OK;
    const emb_optimizer_options *o = &opt->o;
    const int nbuf = emb__optim_state_buffers(o);
    if (nbuf == 0) return EMB_OK; /* SGD: no dense state */
    size_t nbytes = (size_t)ps->numel * sizeof(float);
    float *b[3] = {NULL, NULL, NULL};
    for (int i = 0; i < nbuf; i++) {
        b[i] = emb__malloc(nbytes);
        if (!b[i]) {
            for (int j = 0; j < i; j++) emb__free(b[j]);
            return emb__error(EMB_ERR_NOMEM, "cannot allocate %zu bytes of optimizer state",
                              nbytes * (size_t)nbuf);
        }
    }
    if (o->kind == EMB_OPTIMIZER_ADAGRAD) {
        float init = (float)o->initial_accumulator_value;
        for (int64_t i = 0; i < ps->numel; i++) b[0][i] = init;
    } else {
        for (int i = 0; i < nbuf; i++) memset(b[i], 0, nbytes);
    }
    ps->s1 = b[0];
    ps->s2 = b[1];
    ps->s3 = b[2];
    ps->initialized = true;
    return EMB_OK;
}

emb_status emb_optimizer_init_state(emb_optimizer *opt, int param_id) {
    emb__param_state *ps = NULL;
    emb_status st = emb__optim_get_param(opt, param_id, &ps);
    if (st) return st;
    return emb__optim_ensure_state(opt, ps);
}

emb_status emb__optim_alloc_i64(int64_t n, int64_t **out, const char *what) {
    int64_t bytes;
    if (!emb__mul_i64(n > 0 ? n : 1, (int64_t)sizeof(int64_t), &bytes) ||
        (uint64_t)bytes > SIZE_MAX)
        return emb__error(EMB_ERR_OVERFLOW, "%s: %" PRId64 " entries overflow", what, n);
    *out = emb__malloc((size_t)bytes);
    if (!*out)
        return emb__error(EMB_ERR_NOMEM, "%s: cannot allocate %" PRId64 " bytes", what, bytes);
    return EMB_OK;
}

emb_status emb__optim_alloc_f32(int64_t n, int64_t m, float **out, const char *what) {
    int64_t cnt, bytes;
    if (!emb__mul_i64(n, m, &cnt) ||
        !emb__mul_i64(cnt > 0 ? cnt : 1, (int64_t)sizeof(float), &bytes) ||
        (uint64_t)bytes > SIZE_MAX)
        return emb__error(EMB_ERR_OVERFLOW, "%s: %" PRId64 " x %" PRId64 " floats overflow", what,
                          n, m);
    *out = emb__malloc((size_t)bytes);
    if (!*out)
        return emb__error(EMB_ERR_NOMEM, "%s: cannot allocate %" PRId64 " bytes", what, bytes);
    return EMB_OK;
}
