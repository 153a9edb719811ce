/* src/optim/optim_options.c: the options of the optimizers (include/emb/optim.h): defaults,
 * PyTorch's checks and messages, the learning rate, and the hyper-parameters of a step as the
 * kernels take them. */
#include "optim_internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

emb_optimizer_options emb_optimizer_options_default(emb_optimizer_kind kind) {
    emb_optimizer_options o;
    memset(&o, 0, sizeof o);
    o.kind = kind;
    o.lr = 1e-3;
    o.beta1 = 0.9;
    o.beta2 = 0.999;
    o.eps = 1e-8;
    switch (kind) {
    case EMB_OPTIMIZER_SGD:
        o.eps = 0;
        break;
    case EMB_OPTIMIZER_ADAGRAD:
        o.lr = 1e-2;
        o.eps = 1e-10;
        break;
    case EMB_OPTIMIZER_ADAM:
        break;
    case EMB_OPTIMIZER_ADAMW:
        o.weight_decay = 1e-2;
        break;
    case EMB_OPTIMIZER_SPARSE_ADAM:
        break;
    }
    return o;
}

/* Python's repr() of a float ("1.0", "-0.001", "1e-05", "nan", "inf"), as PyTorch's
 * messages print it: the shortest digits that round-trip, positional notation for decimal
 * exponents in [-4, 16), scientific otherwise. */
static const char *pyfloat(double x, char *buf, size_t size) {
    if (isnan(x)) {
        snprintf(buf, size, "nan");
        return buf;
    }
    if (isinf(x)) {
        snprintf(buf, size, x < 0 ? "-inf" : "inf");
        return buf;
    }
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
static bool nonneg_finite(double x) {
    return x >= 0.0 && isfinite(x);
}

/* The learning rate check of an optimizer kind (create and emb_optimizer_set_lr). */
static emb_status check_lr(emb_optimizer_kind kind, double lr) {
    bool ok = kind == EMB_OPTIMIZER_SPARSE_ADAM ? lr > 0.0 && isfinite(lr) : nonneg_finite(lr);
    return ok ? EMB_OK : invalid_value("learning rate", lr);
}

/* PyTorch's checks and messages in PyTorch's order; emb also rejects every non-finite
 * value a kind uses (docs/differences.md), with the same message form. */
emb_status emb__optim_check_options(const emb_optimizer_options *o) {
    switch (o->kind) {
    case EMB_OPTIMIZER_SGD:
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
    case EMB_OPTIMIZER_ADAGRAD:
        if (check_lr(o->kind, o->lr)) return EMB_ERR_INVALID;
        if (!nonneg_finite(o->lr_decay)) return invalid_value("lr_decay value", o->lr_decay);
        if (!nonneg_finite(o->weight_decay))
            return invalid_value("weight_decay value", o->weight_decay);
        if (!nonneg_finite(o->initial_accumulator_value))
            return invalid_value("initial_accumulator_value value", o->initial_accumulator_value);
        if (!nonneg_finite(o->eps)) return invalid_value("epsilon value", o->eps);
        return EMB_OK;
    case EMB_OPTIMIZER_ADAM:
    case EMB_OPTIMIZER_ADAMW:
        if (check_lr(o->kind, o->lr)) return EMB_ERR_INVALID;
        if (!nonneg_finite(o->eps)) return invalid_value("epsilon value", o->eps);
        if (!(o->beta1 >= 0.0 && o->beta1 < 1.0))
            return invalid_value("beta parameter at index 0", o->beta1);
        if (!(o->beta2 >= 0.0 && o->beta2 < 1.0))
            return invalid_value("beta parameter at index 1", o->beta2);
        if (!nonneg_finite(o->weight_decay))
            return invalid_value("weight_decay value", o->weight_decay);
        return EMB_OK;
    case EMB_OPTIMIZER_SPARSE_ADAM:
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

emb_status emb_optimizer_set_lr(emb_optimizer *opt, double lr) {
    if (!opt) return emb__null("opt");
    emb_status st = check_lr(opt->o.kind, lr);
    if (st) return st;
    opt->o.lr = lr;
    return EMB_OK;
}

double emb_optimizer_lr(const emb_optimizer *opt) {
    return opt ? opt->o.lr : NAN;
}

/* ---------------------------------------------------------------------------------------
 * Hyper-parameters as the kernels see them (step = the new step count)
 * ------------------------------------------------------------------------------------- */

emb__sgd_args emb__optim_sgd_args(const emb_optimizer_options *o) {
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

emb__adagrad_args emb__optim_adagrad_args(const emb_optimizer_options *o, int64_t step) {
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

emb__adam_args emb__optim_adam_args(const emb_optimizer_options *o, int64_t step) {
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
    a.decoupled = o->kind == EMB_OPTIMIZER_ADAMW;
    a.has_weight_decay = !a.decoupled && o->weight_decay != 0.0;
    a.amsgrad = o->amsgrad;
    a.maximize = o->maximize;
    return a;
}

emb__sparse_adam_args emb__optim_sparse_adam_args(const emb_optimizer_options *o, int64_t step) {
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
