/* Optimizers: torch.optim.SGD, Adagrad, Adam, AdamW and SparseAdam of PyTorch 1.13
 * (single-tensor implementations, foreach=False, CPU), dense and sparse, plus the fused
 * sparse step for embedding tables. See include/emb/optim.h.
 *
 * The module validates every argument once, creates state lazily, rounds the scalar
 * hyper-parameters as PyTorch's tensor ops do, and calls the kernels of
 * src/kernels/optim_kernels.h on element or row ranges. Nothing the caller owns changes
 * before all checks and allocations have succeeded. */
#include "internal.h"
#include <emb/optim.h>
#include "nn/embedding_bag_internal.h"
#include "nn/sparse_grad_internal.h"
#include "kernels/argsort.h"
#include "kernels/dispatch.h"
#include "kernels/optim_kernels.h"
#include "nn/embedding_internal.h"

#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------------------------------
 * State
 * ------------------------------------------------------------------------------------- */

enum { BUF_NONE = 0, BUF_DENSE = 1, BUF_SPARSE = 2 };

typedef struct param_state {
    float *data; /* the caller's parameter */
    int ndim;
    int64_t shape[EMB_MAX_DIMS];
    int64_t numel;
    int64_t steps;
    bool initialized; /* dense state below allocated (Adagrad, Adam, AdamW, SparseAdam) */
    /* Dense state, numel floats each: SGD momentum buffer (s1, when buf_kind == BUF_DENSE);
     * Adagrad sum (s1); Adam/AdamW/SparseAdam exp_avg (s1), exp_avg_sq (s2), max_exp_avg_sq
     * (s3, amsgrad only). */
    float *s1, *s2, *s3;
    /* SGD momentum buffer kind, and the sparse buffer (PyTorch keeps the clone of a sparse
     * gradient as a sparse tensor and grows it by merging): sp_nnz rows and values. */
    int buf_kind;
    int64_t sp_nnz;
    int64_t *sp_rows;
    float *sp_vals;
} param_state;

struct emb_optimizer {
    emb_optim_options o;
    int nparams, cap;
    param_state *ps;
    /* The sparse step's sort and accumulator buffer, kept between steps (it grows to the
     * largest step's need): allocating it afresh each step cost its page faults every time. */
    void *scratch;
    size_t scratch_bytes;
};

/* A sparse row gradient as the update code sees it: entry k is row rows[k] with values at
 * values + (pos ? pos[k] : k) * dim. step_sparse views an emb_sparse_grad this way, the
 * fused step views (indices, grad_output) without copying the values. */
typedef struct spview {
    int64_t nnz, dim;
    const int64_t *rows;
    const float *values;
    const int64_t *pos;
    bool coalesced; /* rows strictly ascending: coalesce() is the identity */
} spview;

static inline const float *sv_row(const spview *s, int64_t k) {
    return s->values + (s->pos ? s->pos[k] : k) * s->dim;
}

/* ---------------------------------------------------------------------------------------
 * Options
 * ------------------------------------------------------------------------------------- */

emb_optim_options emb_optim_options_default(emb_optim_kind kind) {
    emb_optim_options o;
    memset(&o, 0, sizeof o);
    o.kind = kind;
    o.lr = 1e-3;
    o.beta1 = 0.9;
    o.beta2 = 0.999;
    o.eps = 1e-8;
    switch (kind) {
    case EMB_OPTIM_SGD: o.eps = 0; break;
    case EMB_OPTIM_ADAGRAD: o.lr = 1e-2; o.eps = 1e-10; break;
    case EMB_OPTIM_ADAM: break;
    case EMB_OPTIM_ADAMW: o.weight_decay = 1e-2; break;
    case EMB_OPTIM_SPARSE_ADAM: break;
    }
    return o;
}

/* Python's repr() of a float ("1.0", "-0.001", "1e-05", "nan", "inf"), as PyTorch's
 * messages print it: the shortest digits that round-trip, positional notation for decimal
 * exponents in [-4, 16), scientific otherwise. */
static const char *pyfloat(double x, char *buf, size_t size) {
    if (isnan(x)) { snprintf(buf, size, "nan"); return buf; }
    if (isinf(x)) { snprintf(buf, size, x < 0 ? "-inf" : "inf"); return buf; }
    char tmp[40];
    int prec = 1;
    for (; prec <= 17; prec++) {
        snprintf(tmp, sizeof tmp, "%.*e", prec - 1, x);
        if (strtod(tmp, NULL) == x) break;
    }
    /* tmp: [-]d[.ddd]e[+-]XX */
    const char *s = tmp;
    bool neg = *s == '-';
    if (neg) s++;
    char digits[24];
    int nd = 0;
    for (; *s && *s != 'e'; s++)
        if (*s != '.') digits[nd++] = *s;
    while (nd > 1 && digits[nd - 1] == '0') nd--;
    digits[nd] = '\0';
    int exp10 = atoi(s + 1);
    char out[64];
    size_t k = 0;
    if (neg) out[k++] = '-';
    if (exp10 >= -4 && exp10 < 16) {
        if (exp10 < 0) {
            out[k++] = '0';
            out[k++] = '.';
            for (int i = -1; i > exp10; i--) out[k++] = '0';
            for (int i = 0; i < nd; i++) out[k++] = digits[i];
        } else {
            for (int i = 0; i <= exp10; i++) out[k++] = i < nd ? digits[i] : '0';
            out[k++] = '.';
            if (nd > exp10 + 1)
                for (int i = exp10 + 1; i < nd; i++) out[k++] = digits[i];
            else
                out[k++] = '0';
        }
        out[k] = '\0';
    } else {
        out[k++] = digits[0];
        if (nd > 1) {
            out[k++] = '.';
            for (int i = 1; i < nd; i++) out[k++] = digits[i];
        }
        snprintf(out + k, sizeof out - k, "e%c%02d", exp10 < 0 ? '-' : '+', abs(exp10));
    }
    snprintf(buf, size, "%s", out);
    return buf;
}

/* "Invalid <what>: <repr(x)>" as PyTorch's optimizers raise it. */
static emb_status invalid_value(const char *what, double x) {
    char b[40];
    return emb__error(EMB_ERR_INVALID, "Invalid %s: %s", what, pyfloat(x, b, sizeof b));
}

/* PyTorch's check `0.0 <= x` (which lets +inf through and, for SGD's `x < 0.0`, NaN too),
 * plus emb's own: the value must be finite. */
static bool nonneg_finite(double x) { return x >= 0.0 && isfinite(x); }

/* The learning rate check of an optimizer kind (create and emb_optimizer_set_lr). */
static emb_status check_lr(emb_optim_kind kind, double lr) {
    bool ok = kind == EMB_OPTIM_SPARSE_ADAM ? lr > 0.0 && isfinite(lr) : nonneg_finite(lr);
    return ok ? EMB_OK : invalid_value("learning rate", lr);
}

/* PyTorch's checks and messages in PyTorch's order; emb also rejects every non-finite
 * value a kind uses (docs/differences.md), with the same message form. */
static emb_status check_options(const emb_optim_options *o) {
    switch (o->kind) {
    case EMB_OPTIM_SGD:
        if (check_lr(o->kind, o->lr)) return EMB_ERR_INVALID;
        if (!nonneg_finite(o->momentum)) return invalid_value("momentum value", o->momentum);
        if (!nonneg_finite(o->weight_decay))
            return invalid_value("weight_decay value", o->weight_decay);
        /* PyTorch never checks dampening; emb only requires it to be finite. */
        if (!isfinite(o->dampening)) return invalid_value("dampening value", o->dampening);
        if (o->nesterov && (o->momentum <= 0.0 || o->dampening != 0.0))
            return emb__error(EMB_ERR_INVALID,
                              "Nesterov momentum requires a momentum and zero dampening");
        return EMB_OK;
    case EMB_OPTIM_ADAGRAD:
        if (check_lr(o->kind, o->lr)) return EMB_ERR_INVALID;
        if (!nonneg_finite(o->lr_decay)) return invalid_value("lr_decay value", o->lr_decay);
        if (!nonneg_finite(o->weight_decay))
            return invalid_value("weight_decay value", o->weight_decay);
        if (!nonneg_finite(o->initial_accumulator_value))
            return invalid_value("initial_accumulator_value value",
                                 o->initial_accumulator_value);
        if (!nonneg_finite(o->eps)) return invalid_value("epsilon value", o->eps);
        return EMB_OK;
    case EMB_OPTIM_ADAM:
    case EMB_OPTIM_ADAMW:
        if (check_lr(o->kind, o->lr)) return EMB_ERR_INVALID;
        if (!nonneg_finite(o->eps)) return invalid_value("epsilon value", o->eps);
        if (!(o->beta1 >= 0.0 && o->beta1 < 1.0))
            return invalid_value("beta parameter at index 0", o->beta1);
        if (!(o->beta2 >= 0.0 && o->beta2 < 1.0))
            return invalid_value("beta parameter at index 1", o->beta2);
        if (!nonneg_finite(o->weight_decay))
            return invalid_value("weight_decay value", o->weight_decay);
        return EMB_OK;
    case EMB_OPTIM_SPARSE_ADAM:
        if (check_lr(o->kind, o->lr)) return EMB_ERR_INVALID;
        if (!(o->eps > 0.0 && isfinite(o->eps))) return invalid_value("epsilon value", o->eps);
        if (!(o->beta1 >= 0.0 && o->beta1 < 1.0))
            return invalid_value("beta parameter at index 0", o->beta1);
        if (!(o->beta2 >= 0.0 && o->beta2 < 1.0))
            return invalid_value("beta parameter at index 1", o->beta2);
        return EMB_OK;
    }
    return emb__error(EMB_ERR_INVALID,
                      "unknown optimizer kind %d (valid: 0 SGD, 1 Adagrad, 2 Adam, 3 AdamW, "
                      "4 SparseAdam)",
                      (int)o->kind);
}

/* ---------------------------------------------------------------------------------------
 * Create, free, parameters
 * ------------------------------------------------------------------------------------- */

emb_status emb_optimizer_create(const emb_optim_options *opts, emb_optimizer **out) {
    if (!opts) return emb__null("opts");
    if (!out) return emb__null("out");
    emb_status st = check_options(opts);
    if (st) return st;
    emb_optimizer *opt = calloc(1, sizeof *opt);
    if (!opt) return emb__error(EMB_ERR_NOMEM, "cannot allocate an optimizer");
    opt->o = *opts;
    *out = opt;
    return EMB_OK;
}

static void free_state(param_state *ps) {
    emb_free(ps->s1);
    emb_free(ps->s2);
    emb_free(ps->s3);
    emb_free(ps->sp_rows);
    emb_free(ps->sp_vals);
}

void emb_optimizer_free(emb_optimizer *opt) {
    if (!opt) return;
    for (int i = 0; i < opt->nparams; i++) free_state(&opt->ps[i]);
    free(opt->ps);
    emb_free(opt->scratch);
    free(opt);
}

emb_status emb_optimizer_add_param(emb_optimizer *opt, const emb_tensor *param,
                                   int *param_id) {
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
            const param_state *q = &opt->ps[i];
            if (q->numel == 0) continue;
            const char *b1 = (const char *)q->data;
            const char *e1 = b1 + q->numel * (int64_t)sizeof(float);
            if (b0 < e1 && b1 < e0)
                return emb__error(EMB_ERR_INVALID,
                                  "param overlaps the memory of parameter %d, which is "
                                  "already registered with this optimizer", i);
        }
    }
    if (opt->nparams == INT32_MAX)
        return emb__error(EMB_ERR_OVERFLOW, "too many parameters");
    if (opt->nparams == opt->cap) {
        int ncap = opt->cap ? (opt->cap > INT32_MAX / 2 ? INT32_MAX : opt->cap * 2) : 4;
        param_state *nps = realloc(opt->ps, (size_t)ncap * sizeof *nps);
        if (!nps) return emb__error(EMB_ERR_NOMEM, "cannot grow the parameter list");
        opt->ps = nps;
        opt->cap = ncap;
    }
    param_state *ps = &opt->ps[opt->nparams];
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

/* The parameter's data for pointer arithmetic: a parameter without elements may have a NULL
 * data pointer, and NULL + 0 is undefined in C, so such a parameter computes on a dummy
 * (nothing is ever read or written through it: every length is 0). */
static float *param_data(const param_state *ps) {
    static float no_elements[1];
    return ps->data ? ps->data : no_elements;
}

/* A parameter whose step count cannot grow (only reachable through a loaded state). */
static emb_status steps_overflow(int param_id) {
    return emb__error(EMB_ERR_OVERFLOW, "parameter %d: the step count overflows", param_id);
}

static emb_status get_param(emb_optimizer *opt, int param_id, param_state **out) {
    if (!opt) return emb__null("opt");
    if (param_id < 0 || param_id >= opt->nparams)
        return emb__error(EMB_ERR_INDEX,
                          "param_id %d is out of range for an optimizer with %d parameters "
                          "(valid: [0, %d))",
                          param_id, opt->nparams, opt->nparams);
    *out = &opt->ps[param_id];
    return EMB_OK;
}

/* Allocates the dense state of Adagrad / Adam / AdamW / SparseAdam on the first step. On
 * failure nothing is kept. */
static emb_status ensure_state(const emb_optimizer *opt, param_state *ps) {
    if (ps->initialized) return EMB_OK;
    const emb_optim_options *o = &opt->o;
    int nbuf = 0;
    switch (o->kind) {
    case EMB_OPTIM_SGD: return EMB_OK;
    case EMB_OPTIM_ADAGRAD: nbuf = 1; break;
    case EMB_OPTIM_ADAM:
    case EMB_OPTIM_ADAMW: nbuf = o->amsgrad ? 3 : 2; break;
    case EMB_OPTIM_SPARSE_ADAM: nbuf = 2; break;
    }
    size_t nbytes = (size_t)ps->numel * sizeof(float);
    float *b[3] = {NULL, NULL, NULL};
    for (int i = 0; i < nbuf; i++) {
        b[i] = emb_malloc(nbytes);
        if (!b[i]) {
            for (int j = 0; j < i; j++) emb_free(b[j]);
            return emb__error(EMB_ERR_NOMEM, "cannot allocate %zu bytes of optimizer state",
                              nbytes * (size_t)nbuf);
        }
    }
    if (o->kind == EMB_OPTIM_ADAGRAD) {
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

emb_status emb_optimizer_set_lr(emb_optimizer *opt, double lr) {
    if (!opt) return emb__null("opt");
    emb_status st = check_lr(opt->o.kind, lr);
    if (st) return st;
    opt->o.lr = lr;
    return EMB_OK;
}

double emb_optimizer_get_lr(const emb_optimizer *opt) { return opt ? opt->o.lr : NAN; }

emb_status emb_optimizer_init_state(emb_optimizer *opt, int param_id) {
    param_state *ps = NULL;
    emb_status st = get_param(opt, param_id, &ps);
    if (st) return st;
    return ensure_state(opt, ps);
}

/* ---------------------------------------------------------------------------------------
 * Hyper-parameters as the kernels see them (step = the new step count)
 * ------------------------------------------------------------------------------------- */

static emb__sgd_args sgd_args(const emb_optim_options *o) {
    emb__sgd_args a;
    memset(&a, 0, sizeof a);
    a.neg_lr = (float)(-o->lr);
    a.weight_decay = (float)o->weight_decay;
    a.momentum = (float)o->momentum;
    a.one_minus_dampening = (float)(1.0 - o->dampening);
    a.has_weight_decay = o->weight_decay != 0.0;
    a.has_momentum = o->momentum != 0.0;
    a.nesterov = o->nesterov;
    a.maximize = o->maximize;
    return a;
}

static emb__adagrad_args adagrad_args(const emb_optim_options *o, int64_t step) {
    emb__adagrad_args a;
    memset(&a, 0, sizeof a);
    double clr = o->lr / (1.0 + ((double)step - 1.0) * o->lr_decay);
    a.neg_clr = (float)(-clr);
    a.eps = (float)o->eps;
    a.weight_decay = (float)o->weight_decay;
    a.has_weight_decay = o->weight_decay != 0.0;
    a.maximize = o->maximize;
    return a;
}

static emb__adam_args adam_args(const emb_optim_options *o, int64_t step) {
    emb__adam_args a;
    memset(&a, 0, sizeof a);
    double t = (double)step;
    double bc1 = 1.0 - pow(o->beta1, t);
    double bc2 = 1.0 - pow(o->beta2, t);
    double step_size = o->lr / bc1;
    a.beta1 = (float)o->beta1;
    a.one_minus_beta1 = (float)(1.0 - o->beta1);
    a.beta2 = (float)o->beta2;
    a.one_minus_beta2 = (float)(1.0 - o->beta2);
    a.weight_decay = (float)o->weight_decay;
    a.decay_factor = (float)(1.0 - o->lr * o->weight_decay);
    a.neg_step_size = (float)(-step_size);
    a.bias_correction2_sqrt = (float)sqrt(bc2);
    a.eps = (float)o->eps;
    a.decoupled = o->kind == EMB_OPTIM_ADAMW;
    a.has_weight_decay = !a.decoupled && o->weight_decay != 0.0;
    a.amsgrad = o->amsgrad;
    a.maximize = o->maximize;
    return a;
}

static emb__sparse_adam_args sparse_adam_args(const emb_optim_options *o, int64_t step) {
    emb__sparse_adam_args a;
    double t = (double)step;
    double bc1 = 1.0 - pow(o->beta1, t);
    double bc2 = 1.0 - pow(o->beta2, t);
    double step_size = o->lr * sqrt(bc2) / bc1;
    a.one_minus_beta1 = (float)(1.0 - o->beta1);
    a.one_minus_beta2 = (float)(1.0 - o->beta2);
    a.eps = (float)o->eps;
    a.neg_step_size = (float)(-step_size);
    return a;
}

/* ---------------------------------------------------------------------------------------
 * Dense step
 * ------------------------------------------------------------------------------------- */

#define DENSE_CHUNK ((int64_t)1 << 14)

emb_status emb_optimizer_step(emb_optimizer *opt, int param_id, const emb_tensor *grad) {
    param_state *ps = NULL;
    emb_status st = get_param(opt, param_id, &ps);
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
    if (momentum && ps->buf_kind == BUF_SPARSE)
        return emb__error(EMB_ERR_UNSUPPORTED,
                          "SGD: parameter %d has a sparse momentum buffer from sparse steps, "
                          "which cannot take a dense gradient (PyTorch fails here with "
                          "\"add(sparse, dense) is not supported\")",
                          param_id);
    if (ps->steps == INT64_MAX) return steps_overflow(param_id);
    /* State (allocated before anything changes). */
    float *newbuf = NULL;
    if (momentum && ps->buf_kind == BUF_NONE) {
        newbuf = emb_malloc((size_t)ps->numel * sizeof(float));
        if (!newbuf)
            return emb__error(EMB_ERR_NOMEM, "cannot allocate the momentum buffer (%" PRId64
                              " floats)", ps->numel);
    }
    st = ensure_state(opt, ps);
    if (st) {
        emb_free(newbuf);
        return st;
    }

    const emb__optim_kernel_table *K = emb__kernels()->optim;
    const float *g = grad->data;
    float *p = param_data(ps);
    const int64_t n = ps->numel;
    const int64_t nchunks = (n + DENSE_CHUNK - 1) / DENSE_CHUNK;
    const int nt = emb__threads_for(n, DENSE_CHUNK);
    (void)nt; /* used only by the OpenMP pragmas */
    int64_t step = ps->steps + 1;

    switch (o->kind) {
    case EMB_OPTIM_SGD: {
        emb__sgd_args a = sgd_args(o);
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
            ps->buf_kind = BUF_DENSE;
        }
        break;
    }
    case EMB_OPTIM_ADAGRAD: {
        emb__adagrad_args a = adagrad_args(o, step);
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
        emb__adam_args a = adam_args(o, step);
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

/* ---------------------------------------------------------------------------------------
 * Sparse steps
 * ------------------------------------------------------------------------------------- */

/* Float operations per thread below which a sparse step stays on fewer threads. A second
 * thread reads gradient rows the first one wrote (the backward splits by position, the step
 * by row), and on this project's 2-core VM moving those lines between the cores cost more
 * than the work: 1000 x 64 table, 4,096 indices, 2 threads, backward + SGD step took 0.13 ms
 * with 32K floats per thread and 0.053 ms with 256K (Adagrad 0.21 -> 0.11 ms). */
#define SPARSE_GRAIN ((int64_t)1 << 18)

/* Threads for `work` float operations spread over `units` independent units. */
static int sparse_threads(int64_t work, int64_t units) {
    int nt = emb__threads_for(work, SPARSE_GRAIN);
    if ((int64_t)nt > units) nt = units > 0 ? (int)(units < INT32_MAX ? units : INT32_MAX) : 1;
    return nt < 1 ? 1 : nt;
}

#define SGD_CACHED_FLOATS ((int64_t)4 << 20)
/* Entries ahead whose row the SGD update prefetches (for writing), and the first bytes of
 * the row it asks for. ms, fused SGD, 1 thread: 50k x 16 with 1M entries 5.7 -> 4.5,
 * 1M x 64 with 262,144 entries 10.8 -> 9.2; a table in L2 (1000 x 64) unchanged. */
#define SGD_PF 16
static inline void sgd_prefetch(const float *row, int64_t dim) {
    for (int64_t o = 0; o < dim * (int64_t)sizeof(float) && o < 512; o += 64)
        __builtin_prefetch((const char *)row + o, 1);
}

/* dense.add_(sparse, alpha=alpha): entry by entry in entry order, row = fmaf(v, alpha, row).
 * Threads own row ranges and each scans all entries, so every row receives its entries in
 * entry order whatever the thread count. */
static void apply_entries(const emb__optim_kernel_table *K, float *p, int64_t rows,
                          const spview *e, float alpha) {
    const int64_t dim = e->dim, nnz = e->nnz;
    /* A table of up to 16 MiB stays in the last-level cache, and the update is a stream over
     * the gradient that one thread reads about as fast as two, which each pull every line
     * (50k x 16, 1M entries, 2 threads: 5.5-5.9 ms on one thread against 6.8-7.4 on two). */
    const int nt = rows * dim <= SGD_CACHED_FLOATS ? 1 : sparse_threads(nnz * dim, rows);
#ifdef _OPENMP
#pragma omp parallel for num_threads(nt) schedule(static, 1)
#endif
    for (int t = 0; t < nt; t++) {
        const int64_t lo = rows * t / nt, hi = rows * (t + 1) / nt;
        if (nt == 1) {
            for (int64_t k = 0; k < nnz; k++) {
                if (k + SGD_PF < nnz) sgd_prefetch(p + e->rows[k + SGD_PF] * dim, dim);
                K->axpy(p + e->rows[k] * dim, sv_row(e, k), alpha, dim);
            }
            continue;
        }
        /* A block of entries at a time: first the entries of this thread's rows, collected
         * without a branch per entry (whether a random row is this thread's is a coin flip the
         * branch predictor loses), then their updates in entry order. */
        enum { BLOCK = 256 };
        int32_t mine[BLOCK];
        for (int64_t b = 0; b < nnz; b += BLOCK) {
            const int m = nnz - b < BLOCK ? (int)(nnz - b) : BLOCK;
            int c = 0;
            for (int j = 0; j < m; j++) {
                mine[c] = j;
                c += (uint64_t)(e->rows[b + j] - lo) < (uint64_t)(hi - lo);
            }
            for (int j = 0; j < c; j++) {
                if (j + SGD_PF < c) sgd_prefetch(p + e->rows[b + mine[j + SGD_PF]] * dim, dim);
                const int64_t k = b + mine[j];
                K->axpy(p + e->rows[k] * dim, sv_row(e, k), alpha, dim);
            }
        }
    }
}

/* Dense elementwise helpers over n elements, in parallel chunks. */
static void dense_scale(const emb__optim_kernel_table *K, float *x, float s, int64_t n) {
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

static void dense_axpy(const emb__optim_kernel_table *K, float *y, const float *x, float alpha,
                       int64_t n) {
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

/* ---- PyTorch's sum of two uncoalesced sparse tensors, r = t + alpha * s ----------------
 * add_out_sparse_cpu walks both index lists like a merge even when they are not sorted:
 * while either list has entries, compare the heads; the smaller row is emitted first, and
 * equal rows are emitted as one entry holding both. An entry's value is
 * fmaf(s, alpha, 0.0f + t) (either term absent when that side has no entry). When one list
 * is empty the result is a plain copy of t, or s * alpha. */
typedef struct merge_it {
    const int64_t *t, *s;
    int64_t tn, sn, ti, si;
} merge_it;

static inline bool merge_next(merge_it *it, int64_t *ti, int64_t *si) {
    if (it->ti >= it->tn && it->si >= it->sn) return false;
    int cmp;
    if (it->ti >= it->tn) cmp = -1;
    else if (it->si >= it->sn) cmp = 1;
    else {
        int64_t a = it->t[it->ti], b = it->s[it->si];
        cmp = a < b ? 1 : (a > b ? -1 : 0);
    }
    *ti = cmp >= 0 ? it->ti++ : -1;
    *si = cmp <= 0 ? it->si++ : -1;
    return true;
}

static int64_t merge_count(const int64_t *t, int64_t tn, const int64_t *s, int64_t sn) {
    if (tn == 0) return sn;
    if (sn == 0) return tn;
    merge_it it = {t, s, tn, sn, 0, 0};
    int64_t n = 0, a, b;
    while (merge_next(&it, &a, &b)) n++;
    return n;
}

/* The value of one merged entry (see above). t values are multiplied by t_sign (+-1: a
 * negated gradient), s values by s_alpha. */
static inline void merge_value(const emb__optim_kernel_table *K, float *r, int64_t dim,
                               int64_t tn, const float *t, float t_sign, int64_t sn,
                               const float *s, float s_alpha) {
    if (sn == 0) K->coalesce_first(r, t, t_sign, dim); /* copy of t */
    else if (tn == 0) K->scale_to(r, s, s_alpha, dim); /* s * alpha */
    else K->merge_entry(r, t, t_sign, s, s_alpha, dim);
}

/* ---- coalesce() and a row update per unique row ------------------------------------- */

typedef struct row_update {
    emb_optim_kind kind;
    emb__adagrad_args ag;
    emb__sparse_adam_args sa;
    float *p, *s1, *s2; /* parameter and state, [rows, dim] */
} row_update;

/* coalesced_update prefetches the rows of the entry this many places ahead, their first
 * COALESCE_PF_BYTES bytes. */
#define COALESCE_PF       16
#define COALESCE_PF_BYTES 256

static inline void prefetch_row(const float *r, int64_t dim, int write) {
    const char *b = (const char *)r;
    int64_t n = dim * (int64_t)sizeof(float);
    if (n > COALESCE_PF_BYTES) n = COALESCE_PF_BYTES;
    for (int64_t o = 0; o < n; o += 64) {
        if (write) __builtin_prefetch(b + o, 1);
        else __builtin_prefetch(b + o, 0);
    }
}

/* Sums each row's values in sorted order (pairs: the (row, entry) pairs of
 * emb__argsort_pairs_i64_mt; NULL: entry order, for coalesced input) as coalesce() does,
 * negated first when sign < 0, and applies the row update. Rows are independent: threads take
 * contiguous ranges of the sorted entries aligned to row boundaries. scratch: nt * dim
 * floats. */
static void coalesced_update(const emb__optim_kernel_table *K, const spview *g,
                             const int64_t *pairs, float sign, const row_update *u,
                             float *scratch, int nt) {
    const int64_t nnz = g->nnz, dim = g->dim;
#define KEY(i) (pairs ? pairs[2 * (i)] : g->rows[i])
#define VAL(i) sv_row(g, pairs ? pairs[2 * (i) + 1] : (i))
#ifdef _OPENMP
#pragma omp parallel for num_threads(nt) schedule(static, 1) if (nt > 1)
#endif
    for (int t = 0; t < nt; t++) {
        float *acc = scratch + (int64_t)t * dim;
        int64_t b = nnz * t / nt;
        const int64_t e = nnz * (t + 1) / nt;
        while (b > 0 && b < e && KEY(b) == KEY(b - 1)) b++;
        int64_t i = b;
        while (i < e) {
            const int64_t r = KEY(i);
            if (i + COALESCE_PF < nnz) {
                /* the parameter and state rows of a row further on */
                const int64_t rf = KEY(i + COALESCE_PF) * dim;
                prefetch_row(u->p + rf, dim, 1);
                prefetch_row(u->s1 + rf, dim, 1);
                if (u->s2) prefetch_row(u->s2 + rf, dim, 1);
            }
            if (pairs && i + COALESCE_PF < nnz) prefetch_row(VAL(i + COALESCE_PF), dim, 0);
            K->coalesce_first(acc, VAL(i), sign, dim);
            int64_t j = i + 1;
            for (; j < nnz && KEY(j) == r; j++) {
                if (pairs && j + COALESCE_PF < nnz) prefetch_row(VAL(j + COALESCE_PF), dim, 0);
                K->coalesce_add(acc, VAL(j), sign, dim);
            }
            const int64_t off = r * dim;
            if (u->kind == EMB_OPTIM_ADAGRAD)
                K->adagrad_row(u->p + off, u->s1 + off, acc, dim, &u->ag);
            else
                K->sparse_adam_row(u->p + off, u->s1 + off, u->s2 + off, acc, dim, &u->sa);
            i = j;
        }
    }
#undef KEY
#undef VAL
}

/* ---- checks shared by step_sparse and step_fused ----------------------------------- */

static emb_status check_sparse_kind(const emb_optimizer *opt, const param_state *ps,
                                    int param_id) {
    const emb_optim_options *o = &opt->o;
    switch (o->kind) {
    case EMB_OPTIM_ADAM:
        return emb__error(EMB_ERR_UNSUPPORTED, "Adam does not support sparse gradients, please "
                          "consider SparseAdam instead");
    case EMB_OPTIM_ADAMW:
        return emb__error(EMB_ERR_UNSUPPORTED, "AdamW does not support sparse gradients");
    default: break;
    }
    if (ps->ndim != 2) {
        char b[300];
        return emb__error(EMB_ERR_SHAPE,
                          "sparse gradients need a 2-D parameter; parameter %d has shape %s",
                          param_id, emb__shape_fmt(b, sizeof b, ps->ndim, ps->shape));
    }
    return EMB_OK;
}

static emb_status check_sparse_options(const emb_optimizer *opt, const param_state *ps,
                                       int param_id) {
    const emb_optim_options *o = &opt->o;
    if (o->kind == EMB_OPTIM_ADAGRAD && o->weight_decay != 0.0)
        return emb__error(EMB_ERR_UNSUPPORTED,
                          "weight_decay option is not compatible with sparse gradients");
    if (o->kind == EMB_OPTIM_SGD && o->weight_decay != 0.0)
        return emb__error(EMB_ERR_UNSUPPORTED,
                          "SGD with weight_decay does not support sparse gradients: the decay "
                          "term would add the dense parameter to the sparse gradient (PyTorch: "
                          "\"add(sparse, dense) is not supported. Use add(dense, sparse) "
                          "instead.\")");
    if (o->kind == EMB_OPTIM_SGD && o->momentum != 0.0 && o->nesterov &&
        ps->buf_kind == BUF_DENSE)
        return emb__error(EMB_ERR_UNSUPPORTED,
                          "SGD with nesterov: parameter %d has a dense momentum buffer from "
                          "dense steps, which cannot be added to a sparse gradient (PyTorch: "
                          "\"add(sparse, dense) is not supported\")",
                          param_id);
    return EMB_OK;
}

/* ---- the sparse step proper, after validation ---------------------------------------- */

static emb_status alloc_i64(int64_t n, int64_t **out, const char *what) {
    int64_t bytes;
    if (!emb__mul_i64(n > 0 ? n : 1, (int64_t)sizeof(int64_t), &bytes) ||
        (uint64_t)bytes > SIZE_MAX)
        return emb__error(EMB_ERR_OVERFLOW, "%s: %" PRId64 " entries overflow", what, n);
    *out = emb_malloc((size_t)bytes);
    if (!*out)
        return emb__error(EMB_ERR_NOMEM, "%s: cannot allocate %" PRId64 " bytes", what, bytes);
    return EMB_OK;
}

static emb_status alloc_f32(int64_t n, int64_t m, float **out, const char *what) {
    int64_t cnt, bytes;
    if (!emb__mul_i64(n, m, &cnt) || !emb__mul_i64(cnt > 0 ? cnt : 1, (int64_t)sizeof(float),
                                                    &bytes) ||
        (uint64_t)bytes > SIZE_MAX)
        return emb__error(EMB_ERR_OVERFLOW, "%s: %" PRId64 " x %" PRId64 " floats overflow",
                          what, n, m);
    *out = emb_malloc((size_t)bytes);
    if (!*out)
        return emb__error(EMB_ERR_NOMEM, "%s: cannot allocate %" PRId64 " bytes", what, bytes);
    return EMB_OK;
}

/* Makes opt->scratch hold at least `bytes` bytes (its contents are not kept). */
static emb_status opt_scratch(emb_optimizer *opt, size_t bytes) {
    if (bytes <= opt->scratch_bytes && opt->scratch) return EMB_OK;
    void *p = emb_malloc(bytes > 0 ? bytes : 1);
    if (!p)
        return emb__error(EMB_ERR_NOMEM, "cannot allocate %zu bytes of scratch for a sparse step",
                          bytes);
    emb_free(opt->scratch);
    opt->scratch = p;
    opt->scratch_bytes = bytes;
    return EMB_OK;
}

/* SGD with momentum and a sparse gradient d_p = sign * g. PyTorch's single-tensor SGD:
 *   first step: buf = clone(d_p) (a sparse tensor)
 *   later:      buf.mul_(momentum).add_(d_p, alpha=1 - dampening)   (a merge)
 *   nesterov:   d = d_p.add(buf, alpha=momentum)                    (another merge)
 *   else        d = buf
 *   param.add_(d, alpha=-lr)                                         (entries in order)
 * With a dense buffer (earlier dense steps), the buffer update and the parameter update are
 * dense; nesterov is rejected before (PyTorch cannot add a dense tensor to a sparse one). */
static emb_status sgd_momentum_sparse(const emb__optim_kernel_table *K, const emb_optimizer *opt,
                                      param_state *ps, const spview *g) {
    const emb_optim_options *o = &opt->o;
    const emb__sgd_args a = sgd_args(o);
    const float sign = o->maximize ? -1.0f : 1.0f;
    const int64_t rows = ps->shape[0], dim = ps->shape[1];
    float *p = param_data(ps);

    if (ps->buf_kind == BUF_DENSE) {
        dense_scale(K, ps->s1, a.momentum, ps->numel);
        apply_entries(K, ps->s1, rows, g, sign * a.one_minus_dampening);
        dense_axpy(K, p, ps->s1, a.neg_lr, ps->numel);
        return EMB_OK;
    }

    /* The new sparse buffer. */
    int64_t *nrows = NULL;
    float *nvals = NULL;
    int64_t nn;
    const int64_t bn = ps->buf_kind == BUF_SPARSE ? ps->sp_nnz : 0;
    const bool first = ps->buf_kind == BUF_NONE;
    if (first) nn = g->nnz;
    else nn = merge_count(ps->sp_rows, bn, g->rows, g->nnz);
    const bool in_place = !first && g->nnz == 0; /* buf.add_(empty) keeps buf */
    const int64_t new_nnz = in_place ? bn : nn;
    const int nt = o->nesterov ? sparse_threads((g->nnz + new_nnz) * dim, rows) : 1;
    float *scratch = NULL;
    emb_status st = EMB_OK;
    if (o->nesterov) st = alloc_f32(nt, dim, &scratch, "SGD nesterov scratch");
    if (!st && !in_place) st = alloc_i64(nn, &nrows, "SGD momentum buffer");
    if (!st && !in_place) st = alloc_f32(nn, dim, &nvals, "SGD momentum buffer");
    if (st) {
        emb_free(scratch);
        emb_free(nrows);
        emb_free(nvals);
        return st;
    }
    /* Nothing can fail from here on. */
    if (first) {
        for (int64_t k = 0; k < nn; k++) {
            nrows[k] = g->rows[k];
            K->coalesce_first(nvals + k * dim, sv_row(g, k), sign, dim);
        }
    } else {
        if (bn > 0) K->scale(ps->sp_vals, a.momentum, bn * dim); /* buf.mul_(momentum) */
        if (!in_place) {
            const float alpha = sign * a.one_minus_dampening;
            merge_it it = {ps->sp_rows, g->rows, bn, g->nnz, 0, 0};
            int64_t ti, si, k = 0;
            while (merge_next(&it, &ti, &si)) {
                nrows[k] = ti >= 0 ? ps->sp_rows[ti] : g->rows[si];
                merge_value(K, nvals + k * dim, dim, bn, ti >= 0 ? ps->sp_vals + ti * dim : NULL,
                            1.0f, g->nnz, si >= 0 ? sv_row(g, si) : NULL, alpha);
                k++;
            }
        }
    }
    if (!in_place) {
        emb_free(ps->sp_rows);
        emb_free(ps->sp_vals);
        ps->sp_rows = nrows;
        ps->sp_vals = nvals;
        ps->sp_nnz = nn;
        ps->buf_kind = BUF_SPARSE;
    }

    const spview buf = {ps->sp_nnz, dim, ps->sp_rows, ps->sp_vals, NULL, false};
    if (!o->nesterov) {
        apply_entries(K, p, rows, &buf, a.neg_lr);
        return EMB_OK;
    }
    /* d = d_p + momentum * buf, streamed entry by entry into the parameter: threads own row
     * ranges and each walks the whole merge. */
#ifdef _OPENMP
#pragma omp parallel for num_threads(nt) schedule(static, 1)
#endif
    for (int t = 0; t < nt; t++) {
        const int64_t lo = rows * t / nt, hi = rows * (t + 1) / nt;
        float *v = scratch + (int64_t)t * dim;
        merge_it it = {g->rows, buf.rows, g->nnz, buf.nnz, 0, 0};
        int64_t ti, si;
        while (merge_next(&it, &ti, &si)) {
            int64_t r = ti >= 0 ? g->rows[ti] : buf.rows[si];
            if (r < lo || r >= hi) continue;
            merge_value(K, v, dim, g->nnz, ti >= 0 ? sv_row(g, ti) : NULL, sign, buf.nnz,
                        si >= 0 ? buf.values + si * dim : NULL, a.momentum);
            K->axpy(p + r * dim, v, a.neg_lr, dim);
        }
    }
    emb_free(scratch);
    return EMB_OK;
}

/* One sparse step of a validated gradient view (rows in range, dims matching). */
static emb_status sparse_step(emb_optimizer *opt, param_state *ps, const spview *g) {
    const emb_optim_options *o = &opt->o;
    const emb__optim_kernel_table *K = emb__kernels()->optim;
    const int64_t rows = ps->shape[0], dim = ps->shape[1];
    if (ps->steps == INT64_MAX) return steps_overflow((int)(ps - opt->ps));
    const int64_t step = ps->steps + 1;
    emb_status st = EMB_OK;

    if (o->kind == EMB_OPTIM_SGD) {
        if (o->momentum == 0.0) {
            /* param.add_(d_p, alpha=-lr) with d_p = sign * g: fmaf(-v, a, p) == fmaf(v, -a, p). */
            const float neg_lr = (float)(-o->lr);
            apply_entries(K, param_data(ps), rows, g, o->maximize ? -neg_lr : neg_lr);
        } else {
            st = sgd_momentum_sparse(K, opt, ps, g);
            if (st) return st;
        }
        ps->steps = step;
        return EMB_OK;
    }

    /* Adagrad, SparseAdam: coalesce, then one update per unique row. The sort's pairs
     * (2 n int64) and the threads' accumulators (nt x dim floats) live in the optimizer's
     * scratch buffer. */
    const int64_t n = g->nnz;
    const bool sort = !g->coalesced && n > 1;
    const int nt = sparse_threads(n * dim, n);
    int64_t pair_bytes = 0, acc_bytes;
    if ((sort && !emb__mul_i64(n, 2 * (int64_t)sizeof(int64_t), &pair_bytes)) ||
        !emb__mul_i64((int64_t)nt * (int64_t)sizeof(float), dim > 0 ? dim : 1, &acc_bytes) ||
        pair_bytes > INT64_MAX - acc_bytes || (uint64_t)(pair_bytes + acc_bytes) > SIZE_MAX)
        return emb__error(EMB_ERR_OVERFLOW, "coalesce: %" PRId64 " entries overflow", n);
    st = opt_scratch(opt, (size_t)(pair_bytes + acc_bytes));
    if (!st) st = ensure_state(opt, ps);
    if (st) return st;
    int64_t *pairs = sort ? opt->scratch : NULL;
    float *acc = (float *)((char *)opt->scratch + pair_bytes);
    if (sort)
        emb__argsort_pairs_i64_mt(g->rows, n, pairs, emb__threads_for(n, EMB__ARGSORT_GRAIN));
    row_update u;
    memset(&u, 0, sizeof u);
    u.kind = o->kind;
    u.p = param_data(ps);
    u.s1 = ps->s1;
    u.s2 = ps->s2;
    if (o->kind == EMB_OPTIM_ADAGRAD) u.ag = adagrad_args(o, step);
    else u.sa = sparse_adam_args(o, step);
    coalesced_update(K, g, pairs, o->maximize ? -1.0f : 1.0f, &u, acc, nt);
    ps->steps = step;
    return EMB_OK;
}

emb_status emb_optimizer_step_sparse(emb_optimizer *opt, int param_id,
                                     const emb_sparse_grad *grad) {
    param_state *ps = NULL;
    emb_status st = get_param(opt, param_id, &ps);
    if (st) return st;
    if (!grad) return emb__null("grad");
    st = check_sparse_kind(opt, ps, param_id);
    if (st) return st;
    st = emb__sparse_grad_check(grad, "grad");
    if (st) return st;
    const int64_t rows = ps->shape[0], dim = ps->shape[1];
    if (grad->num_rows != rows || grad->dim != dim) {
        char b[300];
        return emb__error(EMB_ERR_SHAPE,
                          "grad is a sparse gradient of size [%" PRId64 ", %" PRId64
                          "], expected %s (the shape of parameter %d)",
                          grad->num_rows, grad->dim,
                          emb__shape_fmt(b, sizeof b, ps->ndim, ps->shape), param_id);
    }
    const int64_t n = grad->nnz;
    for (int64_t k = 0; k < n; k++) {
        int64_t r = grad->indices[k];
        if (r < 0 || r >= rows)
            return emb__error(EMB_ERR_INDEX,
                              "grad entry %" PRId64 " has row %" PRId64
                              ", out of range for a parameter with %" PRId64
                              " rows (valid: [0, %" PRId64 "))",
                              k, r, rows, rows);
    }
    st = check_sparse_options(opt, ps, param_id);
    if (st) return st;
    /* A gradient flagged coalesced is used as is only when its rows really are strictly
     * ascending (then coalesce() is the identity); otherwise it is coalesced here. */
    bool ascending = grad->coalesced;
    for (int64_t k = 1; ascending && k < n; k++)
        ascending = grad->indices[k - 1] < grad->indices[k];
    const spview g = {n, dim, grad->indices, grad->values, NULL, ascending};
    return sparse_step(opt, ps, &g);
}

/* The messages of emb_embedding_backward_sparse's refusals (src/nn/embedding_backward.c):
 * the fused step gives exactly these, which the unit tests compare against the unfused
 * path. */
static emb_status fused_backward_checks(const emb_embedding *e, const emb_tensor *indices,
                                        const emb_tensor *grad_output) {
    if (!e) return emb__null("embedding");
    if (!indices) return emb__null("indices");
    if (!grad_output) return emb__null("grad_output");
    if (!e->requires_grad)
        return emb__error(EMB_ERR_STATE, "the embedding's weight does not require grad "
                                         "(created with freeze=true)");
    if (e->scale_grad_by_freq)
        return emb__error(EMB_ERR_UNSUPPORTED,
                          "embedding_backward: scale_grad_by_freq not supported with sparse "
                          "gradients");
    emb_status st = emb__check_indices(indices, "indices", "embedding_backward");
    if (st) return st;
    int64_t gshape[EMB_MAX_DIMS];
    for (int i = 0; i < indices->ndim; i++) gshape[i] = indices->shape[i];
    gshape[indices->ndim] = e->embedding_dim;
    st = emb__check_f32_shape(grad_output, "grad_output", indices->ndim + 1, gshape);
    if (st) return st;
    int64_t bad = emb__find_bad_index(indices, e->num_embeddings);
    if (bad >= 0) return emb__index_error(indices, bad, e->num_embeddings, "an embedding");
    return EMB_OK;
}

emb_status emb_optimizer_step_fused(emb_optimizer *opt, int param_id, const emb_embedding *e,
                                    const emb_tensor *indices, const emb_tensor *grad_output) {
    /* 1. What emb_embedding_backward_sparse checks, in its order. */
    emb_status st = fused_backward_checks(e, indices, grad_output);
    if (st) return st;
    /* 2. What emb_optimizer_step_sparse checks, in its order, for the gradient of shape
     * [num_embeddings, dim] that backward_sparse would have built. */
    param_state *ps = NULL;
    st = get_param(opt, param_id, &ps);
    if (st) return st;
    st = check_sparse_kind(opt, ps, param_id);
    if (st) return st;
    const int64_t rows = e->num_embeddings, dim = e->embedding_dim;
    if (ps->shape[0] != rows || ps->shape[1] != dim) {
        char b[300];
        return emb__error(EMB_ERR_SHAPE,
                          "grad is a sparse gradient of size [%" PRId64 ", %" PRId64
                          "], expected %s (the shape of parameter %d)",
                          rows, dim, emb__shape_fmt(b, sizeof b, ps->ndim, ps->shape),
                          param_id);
    }
    /* 3. Beyond the unfused path: the parameter must be this table's weight. */
    if (ps->data != e->weight)
        return emb__error(EMB_ERR_INVALID,
                          "parameter %d is not the embedding's weight (register the view "
                          "emb_embedding_weight gives with emb_optimizer_add_param)",
                          param_id);
    st = check_sparse_options(opt, ps, param_id);
    if (st) return st;
    if (e->read_only)
        return emb__error(EMB_ERR_READ_ONLY,
                          "the embedding's weight is read-only (emb_storage.read_only): an "
                          "optimizer step cannot write it");

    /* The sparse gradient backward_sparse would build, viewed without copying values:
     * surviving positions in input order. */
    const int64_t n = emb_tensor_numel(indices);
    const int64_t padding_idx = e->padding_idx;
    int64_t kept = n;
    if (padding_idx != EMB_PADDING_NONE)
        for (int64_t i = 0; i < n; i++) kept -= emb__index_at(indices, i) == padding_idx;
    int64_t *keys = NULL, *pos = NULL;
    spview g = {kept, dim, NULL, grad_output->data, NULL, false};
    if (kept == 0) {
        g.rows = NULL;
        g.values = NULL;
    } else if (indices->dtype == EMB_INT64 && kept == n) {
        g.rows = indices->data;
    } else {
        st = alloc_i64(kept, &keys, "emb_optimizer_step_fused");
        if (st) return st;
        if (kept < n) {
            st = alloc_i64(kept, &pos, "emb_optimizer_step_fused");
            if (st) {
                emb_free(keys);
                return st;
            }
        }
        int64_t k = 0;
        for (int64_t i = 0; i < n; i++) {
            int64_t r = emb__index_at(indices, i);
            if (r == padding_idx) continue;
            keys[k] = r;
            if (pos) pos[k] = i;
            k++;
        }
        g.rows = keys;
        g.pos = pos;
    }
    g.coalesced = kept <= 1;
    st = sparse_step(opt, ps, &g);
    emb_free(keys);
    emb_free(pos);
    return st;
}

emb_status emb_optimizer_step_fused_bag(emb_optimizer *opt, int param_id, const emb_bag *bag,
                                        const emb_tensor *input, const emb_tensor *offsets,
                                        const emb_tensor *per_sample_weights,
                                        const emb_tensor *grad_output) {
    /* emb_bag_backward_sparse's refusals first (they do not depend on the optimizer), then
     * emb_optimizer_step_sparse's, then the fused step's own: the order of the unfused
     * path. The entries are described without copying per-position values. */
    emb__bag_entries en;
    emb_status st = emb__bag_sparse_entries(bag, input, offsets, per_sample_weights,
                                            grad_output, &en);
    if (st) return st;
    param_state *ps = NULL;
    st = get_param(opt, param_id, &ps);
    if (!st) st = check_sparse_kind(opt, ps, param_id);
    const emb_embedding *e = bag->emb;
    if (!st && (ps->shape[0] != e->num_embeddings || ps->shape[1] != e->embedding_dim)) {
        char b[300];
        st = emb__error(EMB_ERR_SHAPE,
                        "grad is a sparse gradient of size [%" PRId64 ", %" PRId64
                        "], expected %s (the shape of parameter %d)",
                        e->num_embeddings, e->embedding_dim,
                        emb__shape_fmt(b, sizeof b, ps->ndim, ps->shape), param_id);
    }
    if (!st) st = check_sparse_options(opt, ps, param_id);
    if (!st && (const float *)ps->data != e->weight)
        st = emb__error(EMB_ERR_INVALID,
                        "parameter %d is not the bag's weight (register the view "
                        "emb_bag_weight gives)",
                        param_id);
    if (!st && e->read_only)
        st = emb__error(EMB_ERR_READ_ONLY,
                        "the bag's table is read-only: an optimizer step would write it");
    if (!st) {
        const spview g = {en.nnz, en.dim, en.rows, en.values, en.pos, en.nnz <= 1};
        st = sparse_step(opt, ps, &g);
    }
    emb__bag_entries_free(&en);
    return st;
}

/* ---------------------------------------------------------------------------------------
 * Hogwild: row updates from several threads (see optim.h for what is safe)
 * ------------------------------------------------------------------------------------- */

emb_status emb_optimizer_advance_step(emb_optimizer *opt, int param_id) {
    param_state *ps = NULL;
    emb_status st = get_param(opt, param_id, &ps);
    if (st) return st;
    if (ps->steps == INT64_MAX) return steps_overflow(param_id);
    ps->steps++;
    return EMB_OK;
}

emb_status emb_optimizer_update_rows(const emb_optimizer *opt, int param_id,
                                     const emb_tensor *rows, const emb_tensor *values) {
    if (!opt) return emb__null("opt");
    if (param_id < 0 || param_id >= opt->nparams)
        return emb__error(EMB_ERR_INDEX,
                          "param_id %d is out of range for an optimizer with %d parameters "
                          "(valid: [0, %d))",
                          param_id, opt->nparams, opt->nparams);
    const param_state *ps = &opt->ps[param_id];
    emb_status st = emb__check_indices(rows, "rows", "emb_optimizer_update_rows");
    if (st) return st;
    if (rows->ndim != 1) {
        char b[300];
        return emb__error(EMB_ERR_SHAPE, "rows must be 1-D, got shape %s",
                          emb__shape_fmt(b, sizeof b, rows->ndim, rows->shape));
    }
    if (!values) return emb__null("values");
    st = check_sparse_kind(opt, ps, param_id);
    if (st) return st;
    const int64_t nrows = ps->shape[0], dim = ps->shape[1], n = rows->shape[0];
    const int64_t vshape[2] = {n, dim};
    st = emb__check_f32_shape(values, "values", 2, vshape);
    if (st) return st;
    int64_t bad = emb__find_bad_index(rows, nrows);
    if (bad >= 0) return emb__index_error(rows, bad, nrows, "a parameter");
    st = check_sparse_options(opt, ps, param_id);
    if (st) return st;
    const emb_optim_options *o = &opt->o;
    if (o->kind == EMB_OPTIM_SGD && o->momentum != 0.0)
        return emb__error(EMB_ERR_UNSUPPORTED,
                          "SGD with momentum cannot update rows concurrently: its momentum "
                          "buffer is one tensor for the whole parameter that every step "
                          "rewrites (PyTorch's sparse buffer merges all rows)");
    if (ps->steps < 1)
        return emb__error(EMB_ERR_STATE,
                          "parameter %d has made no step: call emb_optimizer_advance_step "
                          "before its row updates", param_id);
    if (o->kind != EMB_OPTIM_SGD && !ps->initialized)
        return emb__error(EMB_ERR_STATE,
                          "parameter %d has no state: call emb_optimizer_init_state before "
                          "row updates (they never allocate state)", param_id);
    if (n == 0 || dim == 0) return EMB_OK; /* nothing to update (values may be NULL) */

    /* The entries as a sparse gradient of this step, rows as int64. */
    const emb__optim_kernel_table *K = emb__kernels()->optim;
    int64_t *keys = NULL;
    if (rows->dtype != EMB_INT64) {
        st = alloc_i64(n, &keys, "emb_optimizer_update_rows");
        if (st) return st;
        for (int64_t i = 0; i < n; i++) keys[i] = emb__index_at(rows, i);
    }
    const spview g = {n, dim, keys ? keys : rows->data, values->data, NULL, false};
    float *p = param_data(ps);
    if (o->kind == EMB_OPTIM_SGD) {
        const float neg_lr = (float)(-o->lr), alpha = o->maximize ? -neg_lr : neg_lr;
        for (int64_t k = 0; k < n; k++) K->axpy(p + g.rows[k] * dim, sv_row(&g, k), alpha, dim);
        emb_free(keys);
        return EMB_OK;
    }
    /* Adagrad, SparseAdam: coalesce on this thread, then one update per unique row. */
    bool ascending = true;
    for (int64_t k = 1; ascending && k < n; k++) ascending = g.rows[k - 1] < g.rows[k];
    int64_t *pairs = NULL;
    float *acc = NULL;
    if (!ascending) {
        int64_t n2;
        st = emb__mul_i64(n, 2, &n2) ? alloc_i64(n2, &pairs, "emb_optimizer_update_rows")
                                     : emb__error(EMB_ERR_OVERFLOW, "%" PRId64 " rows overflow", n);
    }
    if (!st) st = alloc_f32(1, dim, &acc, "emb_optimizer_update_rows");
    if (st) {
        emb_free(keys);
        emb_free(pairs);
        return st;
    }
    /* on the caller's thread: concurrent callers are the threads */
    if (pairs) emb__argsort_pairs_i64_mt(g.rows, n, pairs, 1);
    row_update u;
    memset(&u, 0, sizeof u);
    u.kind = o->kind;
    u.p = p;
    u.s1 = ps->s1;
    u.s2 = ps->s2;
    if (o->kind == EMB_OPTIM_ADAGRAD) u.ag = adagrad_args(o, ps->steps);
    else u.sa = sparse_adam_args(o, ps->steps);
    coalesced_update(K, &g, pairs, o->maximize ? -1.0f : 1.0f, &u, acc, 1);
    emb_free(keys);
    emb_free(pairs);
    emb_free(acc);
    return EMB_OK;
}

/* ---------------------------------------------------------------------------------------
 * State save / load: the binary layout of docs/optimizer-state.md (version 1)
 * ------------------------------------------------------------------------------------- */

#define STATE_MAGIC "EMBOPTST"
#define STATE_VERSION 1u
#define STATE_HEADER 96 /* magic 8, version 4, kind 4, 9 doubles 72, flags 4, nparams 4 */
#define PARAM_HEADER 32 /* ndim 4, flags 4, steps 8, buf_kind 4, reserved 4, sp_nnz 8 */

/* Number of dense state buffers of numel floats an initialized parameter holds. */
static int state_buffers(const emb_optim_options *o) {
    switch (o->kind) {
    case EMB_OPTIM_ADAGRAD: return 1;
    case EMB_OPTIM_ADAM:
    case EMB_OPTIM_ADAMW: return o->amsgrad ? 3 : 2;
    case EMB_OPTIM_SPARSE_ADAM: return 2;
    default: return 0;
    }
}

static uint64_t fnv1a64(const unsigned char *p, size_t n) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < n; i++) {
        h ^= p[i];
        h *= 0x100000001b3ull;
    }
    return h;
}

static void put_u32(unsigned char **p, uint32_t v) {
    for (int i = 0; i < 4; i++) (*p)[i] = (unsigned char)(v >> (8 * i));
    *p += 4;
}
static void put_u64(unsigned char **p, uint64_t v) {
    for (int i = 0; i < 8; i++) (*p)[i] = (unsigned char)(v >> (8 * i));
    *p += 8;
}
static void put_f64(unsigned char **p, double x) {
    uint64_t v;
    memcpy(&v, &x, 8);
    put_u64(p, v);
}
static void put_f32s(unsigned char **p, const float *x, int64_t n) {
    for (int64_t i = 0; i < n; i++) {
        uint32_t v;
        memcpy(&v, &x[i], 4);
        put_u32(p, v);
    }
}
static uint32_t get_u32(const unsigned char *p) {
    uint32_t v = 0;
    for (int i = 0; i < 4; i++) v |= (uint32_t)p[i] << (8 * i);
    return v;
}
static uint64_t get_u64(const unsigned char *p) {
    uint64_t v = 0;
    for (int i = 0; i < 8; i++) v |= (uint64_t)p[i] << (8 * i);
    return v;
}
static double get_f64(const unsigned char *p) {
    uint64_t v = get_u64(p);
    double x;
    memcpy(&x, &v, 8);
    return x;
}
static void get_f32s(float *x, const unsigned char *p, int64_t n) {
    for (int64_t i = 0; i < n; i++) {
        uint32_t v = get_u32(p + 4 * i);
        memcpy(&x[i], &v, 4);
    }
}

/* Bytes of one parameter's record (header, shape, data); false on overflow. */
static bool param_record_size(const param_state *ps, int nbuf, uint64_t *out) {
    uint64_t n = PARAM_HEADER + 8u * (uint64_t)ps->ndim;
    uint64_t numel = (uint64_t)ps->numel, add;
    if (ps->initialized) {
        if (__builtin_mul_overflow(numel, 4u * (uint64_t)nbuf, &add) ||
            __builtin_add_overflow(n, add, &n))
            return false;
    }
    if (ps->buf_kind == BUF_DENSE) {
        if (__builtin_mul_overflow(numel, 4u, &add) || __builtin_add_overflow(n, add, &n))
            return false;
    } else if (ps->buf_kind == BUF_SPARSE) {
        uint64_t per = 8u + 4u * (uint64_t)ps->shape[1];
        if (__builtin_mul_overflow((uint64_t)ps->sp_nnz, per, &add) ||
            __builtin_add_overflow(n, add, &n))
            return false;
    }
    *out = n;
    return true;
}

size_t emb_optimizer_state_size(const emb_optimizer *opt) {
    if (!opt) return 0;
    uint64_t n = STATE_HEADER + 8; /* + checksum */
    const int nbuf = state_buffers(&opt->o);
    for (int i = 0; i < opt->nparams; i++) {
        uint64_t r;
        if (!param_record_size(&opt->ps[i], nbuf, &r) || __builtin_add_overflow(n, r, &n))
            return 0;
    }
    return n > SIZE_MAX ? 0 : (size_t)n;
}

emb_status emb_optimizer_save_state(const emb_optimizer *opt, void *buf, size_t n) {
    if (!opt) return emb__null("opt");
    if (!buf) return emb__null("buf");
    const size_t need = emb_optimizer_state_size(opt);
    if (need == 0) return emb__error(EMB_ERR_OVERFLOW, "the optimizer state is too large");
    if (n < need)
        return emb__error(EMB_ERR_INVALID,
                          "buf holds %zu bytes; the optimizer state needs %zu "
                          "(emb_optimizer_state_size)",
                          n, need);
    const emb_optim_options *o = &opt->o;
    const int nbuf = state_buffers(o);
    unsigned char *p = buf;
    memcpy(p, STATE_MAGIC, 8);
    p += 8;
    put_u32(&p, STATE_VERSION);
    put_u32(&p, (uint32_t)o->kind);
    const double f[9] = {o->lr,  o->momentum, o->dampening, o->weight_decay, o->lr_decay,
                         o->initial_accumulator_value, o->eps, o->beta1, o->beta2};
    for (int i = 0; i < 9; i++) put_f64(&p, f[i]);
    put_u32(&p, (uint32_t)(o->nesterov | o->amsgrad << 1 | o->maximize << 2));
    put_u32(&p, (uint32_t)opt->nparams);
    for (int i = 0; i < opt->nparams; i++) {
        const param_state *ps = &opt->ps[i];
        put_u32(&p, (uint32_t)ps->ndim);
        put_u32(&p, ps->initialized ? 1u : 0u);
        put_u64(&p, (uint64_t)ps->steps);
        put_u32(&p, (uint32_t)ps->buf_kind);
        put_u32(&p, 0);
        put_u64(&p, (uint64_t)(ps->buf_kind == BUF_SPARSE ? ps->sp_nnz : 0));
        for (int d = 0; d < ps->ndim; d++) put_u64(&p, (uint64_t)ps->shape[d]);
        if (ps->initialized) {
            const float *b[3] = {ps->s1, ps->s2, ps->s3};
            for (int k = 0; k < nbuf; k++) put_f32s(&p, b[k], ps->numel);
        }
        if (ps->buf_kind == BUF_DENSE) put_f32s(&p, ps->s1, ps->numel);
        if (ps->buf_kind == BUF_SPARSE) {
            for (int64_t k = 0; k < ps->sp_nnz; k++) put_u64(&p, (uint64_t)ps->sp_rows[k]);
            put_f32s(&p, ps->sp_vals, ps->sp_nnz * ps->shape[1]);
        }
    }
    put_u64(&p, fnv1a64(buf, need - 8));
    return EMB_OK;
}

static emb_status bad_state(const char *fmt, ...) EMB__PRINTF(1, 2);
static emb_status bad_state(const char *fmt, ...) {
    char msg[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return emb__error(EMB_ERR_FORMAT, "optimizer state: %s", msg);
}

static const char *kind_name(uint32_t k) {
    static const char *names[] = {"SGD", "Adagrad", "Adam", "AdamW", "SparseAdam"};
    return k < 5 ? names[k] : "unknown";
}

emb_status emb_optimizer_load_state(emb_optimizer *opt, const void *buf, size_t n) {
    if (!opt) return emb__null("opt");
    if (!buf) return emb__null("buf");
    const unsigned char *b = buf;
    if (n < STATE_HEADER + 8)
        return bad_state("truncated: %zu bytes, a state has at least %d", n, STATE_HEADER + 8);
    if (memcmp(b, STATE_MAGIC, 8))
        return bad_state("not an emb optimizer state (magic \"%s\" missing)", STATE_MAGIC);
    const uint32_t version = get_u32(b + 8);
    if (version != STATE_VERSION)
        return bad_state("version %" PRIu32 " is not supported (this build reads version %u)",
                         version, STATE_VERSION);
    /* Walk the records to find the layout's size, then the checksum, before trusting any
     * value. */
    const uint32_t np = get_u32(b + 92);
    uint64_t off = STATE_HEADER;
    for (uint32_t i = 0; i < np; i++) {
        if (n - 8 < off || n - 8 - off < PARAM_HEADER)
            return bad_state("truncated: %zu bytes end inside parameter %" PRIu32 "", n, i);
        const unsigned char *h = b + off;
        const uint32_t ndim = get_u32(h), flags = get_u32(h + 4), bk = get_u32(h + 16);
        const uint64_t sp_nnz = get_u64(h + 24);
        if (ndim > EMB_MAX_DIMS || flags > 1 || bk > BUF_SPARSE || get_u32(h + 20) != 0 ||
            (bk != BUF_SPARSE && sp_nnz != 0) || sp_nnz > (uint64_t)INT64_MAX)
            return bad_state("corrupt record of parameter %" PRIu32, i);
        if (n - 8 - off - PARAM_HEADER < 8u * ndim)
            return bad_state("truncated: %zu bytes end inside parameter %" PRIu32 "", n, i);
        param_state tmp;
        memset(&tmp, 0, sizeof tmp);
        tmp.ndim = (int)ndim;
        uint64_t numel = 1;
        for (uint32_t d = 0; d < ndim; d++) {
            uint64_t s = get_u64(h + PARAM_HEADER + 8 * d);
            if (s > (uint64_t)INT64_MAX || __builtin_mul_overflow(numel, s, &numel) ||
                numel > (uint64_t)INT64_MAX)
                return bad_state("corrupt shape of parameter %" PRIu32, i);
            tmp.shape[d] = (int64_t)s;
        }
        if (bk == BUF_SPARSE && ndim != 2)
            return bad_state("corrupt record of parameter %" PRIu32, i);
        tmp.numel = (int64_t)numel;
        tmp.initialized = flags & 1;
        tmp.buf_kind = (int)bk;
        tmp.sp_nnz = (int64_t)sp_nnz;
        emb_optim_options lo;
        memset(&lo, 0, sizeof lo);
        lo.kind = (emb_optim_kind)get_u32(b + 12);
        lo.amsgrad = (get_u32(b + 88) >> 1) & 1;
        uint64_t r;
        if (!param_record_size(&tmp, state_buffers(&lo), &r) || n - 8 - off < r)
            return bad_state("truncated: %zu bytes end inside parameter %" PRIu32 "", n, i);
        off += r;
    }
    if (off + 8 != n)
        return bad_state("%zu bytes, but the layout ends after %" PRIu64 " (trailing or missing "
                         "bytes)", n, off + 8);
    if (get_u64(b + off) != fnv1a64(b, (size_t)off))
        return bad_state("checksum mismatch: the state is corrupt");

    /* Options: the saved ones replace the optimizer's (as load_state_dict restores
     * param_groups); same kind, valid values. */
    emb_optim_options lo;
    memset(&lo, 0, sizeof lo);
    const uint32_t kind = get_u32(b + 12);
    if (kind != (uint32_t)opt->o.kind)
        return bad_state("saved from a %s optimizer (kind %" PRIu32 "), this one is %s",
                         kind_name(kind), kind, kind_name((uint32_t)opt->o.kind));
    lo.kind = opt->o.kind;
    double *f[9] = {&lo.lr,  &lo.momentum, &lo.dampening, &lo.weight_decay, &lo.lr_decay,
                    &lo.initial_accumulator_value, &lo.eps, &lo.beta1, &lo.beta2};
    for (int i = 0; i < 9; i++) *f[i] = get_f64(b + 16 + 8 * i);
    const uint32_t of = get_u32(b + 88);
    if (of > 7) return bad_state("corrupt option flags 0x%" PRIx32, of);
    lo.nesterov = of & 1;
    lo.amsgrad = (of >> 1) & 1;
    lo.maximize = (of >> 2) & 1;
    if (check_options(&lo))
        return bad_state("invalid options (%s)", emb_errmsg());
    if (np != (uint32_t)opt->nparams)
        return bad_state("%" PRIu32 " parameters saved, this optimizer has %d", np,
                         opt->nparams);
    const int nbuf = state_buffers(&lo);
    const bool momentum = lo.kind == EMB_OPTIM_SGD && lo.momentum != 0.0;
    off = STATE_HEADER;
    for (int i = 0; i < opt->nparams; i++) {
        const param_state *ps = &opt->ps[i];
        const unsigned char *h = b + off;
        const int ndim = (int)get_u32(h);
        bool same = ndim == ps->ndim;
        int64_t shape[EMB_MAX_DIMS];
        for (int d = 0; d < ndim; d++) {
            shape[d] = (int64_t)get_u64(h + PARAM_HEADER + 8 * d);
            same = same && d < ps->ndim && shape[d] == ps->shape[d];
        }
        if (!same) {
            char g[300], w[300];
            return bad_state("parameter %d was saved with shape %s, it has shape %s", i,
                             emb__shape_fmt(g, sizeof g, ndim, shape),
                             emb__shape_fmt(w, sizeof w, ps->ndim, ps->shape));
        }
        const int64_t steps = (int64_t)get_u64(h + 8);
        const bool init = get_u32(h + 4) & 1;
        const int bk = (int)get_u32(h + 16);
        const int64_t sp_nnz = (int64_t)get_u64(h + 24);
        if (steps < 0) return bad_state("parameter %d has a negative step count", i);
        if (init && nbuf == 0)
            return bad_state("parameter %d: SGD has no dense state to restore", i);
        if (bk != BUF_NONE && !momentum)
            return bad_state("parameter %d has a momentum buffer, but the options have no "
                             "SGD momentum", i);
        if (bk == BUF_SPARSE) {
            const unsigned char *rows = h + PARAM_HEADER + 8 * ndim;
            for (int64_t k = 0; k < sp_nnz; k++) {
                uint64_t r = get_u64(rows + 8 * k);
                if (r >= (uint64_t)ps->shape[0])
                    return bad_state("parameter %d: momentum buffer entry %" PRId64
                                     " has row %" PRIu64 ", out of range [0, %" PRId64 ")",
                                     i, k, r, ps->shape[0]);
            }
        }
        param_state tmp = *ps;
        tmp.initialized = init;
        tmp.buf_kind = bk;
        tmp.sp_nnz = bk == BUF_SPARSE ? sp_nnz : 0;
        uint64_t r = 0;
        param_record_size(&tmp, nbuf, &r); /* checked in the first walk */
        off += r;
    }

    /* Allocate everything, then swap: nothing changes on failure. */
    param_state *nst = calloc((size_t)(opt->nparams ? opt->nparams : 1), sizeof *nst);
    if (!nst) return emb__error(EMB_ERR_NOMEM, "cannot allocate the optimizer state");
    emb_status st = EMB_OK;
    off = STATE_HEADER;
    for (int i = 0; i < opt->nparams && !st; i++) {
        param_state *q = &nst[i];
        *q = opt->ps[i];
        q->s1 = q->s2 = q->s3 = NULL;
        q->sp_rows = NULL;
        q->sp_vals = NULL;
        const unsigned char *h = b + off;
        q->steps = (int64_t)get_u64(h + 8);
        q->initialized = get_u32(h + 4) & 1;
        q->buf_kind = (int)get_u32(h + 16);
        q->sp_nnz = q->buf_kind == BUF_SPARSE ? (int64_t)get_u64(h + 24) : 0;
        const unsigned char *d = h + PARAM_HEADER + 8 * (uint32_t)q->ndim;
        if (q->initialized) {
            float **bp[3] = {&q->s1, &q->s2, &q->s3};
            for (int k = 0; k < nbuf && !st; k++) {
                st = alloc_f32(q->numel, 1, bp[k], "optimizer state");
                if (!st) get_f32s(*bp[k], d, q->numel);
                d += 4 * (size_t)q->numel;
            }
        }
        if (!st && q->buf_kind == BUF_DENSE) {
            st = alloc_f32(q->numel, 1, &q->s1, "momentum buffer");
            if (!st) get_f32s(q->s1, d, q->numel);
        }
        if (!st && q->buf_kind == BUF_SPARSE) {
            const int64_t dim = q->shape[1];
            st = alloc_i64(q->sp_nnz, &q->sp_rows, "momentum buffer");
            if (!st) st = alloc_f32(q->sp_nnz, dim, &q->sp_vals, "momentum buffer");
            if (!st) {
                for (int64_t k = 0; k < q->sp_nnz; k++)
                    q->sp_rows[k] = (int64_t)get_u64(d + 8 * k);
                get_f32s(q->sp_vals, d + 8 * (size_t)q->sp_nnz, q->sp_nnz * dim);
            }
        }
        uint64_t r = 0;
        param_record_size(q, nbuf, &r);
        off += r;
    }
    if (st) {
        for (int i = 0; i < opt->nparams; i++) free_state(&nst[i]);
        free(nst);
        return st;
    }
    for (int i = 0; i < opt->nparams; i++) {
        free_state(&opt->ps[i]);
        opt->ps[i] = nst[i];
    }
    free(nst);
    opt->o = lo;
    return EMB_OK;
}
