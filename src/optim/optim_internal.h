/* src/optim/optim_internal.h: what the optim sources share (private to src/optim; no other
 * module needs the optimizers' insides). The module is split by concern:
 *
 *   optim_options.c   options, their checks and messages, hyper-parameters as the kernels
 *                     see them
 *   optimizer.c       create / free, parameters, lazy state
 *   optim_dense.c     the dense step
 *   optim_sparse.c    sparse steps (coalesce, row updates, SGD's sparse momentum buffer)
 *   optim_fused.c     the fused backward + step of an embedding table or bag
 *   optim_hogwild.c   row updates from several threads
 *   optim_state.c     save / load of the state (docs/optimizer-state.md)
 *
 * Every public call validates its arguments once, then calls the kernels of
 * src/kernels/optim_kernels.h on element or row ranges; nothing the caller owns changes
 * before all checks and allocations have succeeded. */
#ifndef EMB_OPTIM_INTERNAL_H
#define EMB_OPTIM_INTERNAL_H

#include "internal.h"
#include "kernels/optim_kernels.h"

#include <emb/optim.h>

/* ---- state ---------------------------------------------------------------------------- */

/* SGD's momentum buffer: none yet, dense (numel floats in s1), or sparse (sp_*). The values
 * are those of docs/optimizer-state.md. */
enum { EMB__BUF_NONE = 0, EMB__BUF_DENSE = 1, EMB__BUF_SPARSE = 2 };

typedef struct emb__param_state {
    float *data; /* the caller's parameter */
    int ndim;
    int64_t shape[EMB_MAX_DIMS];
    int64_t numel;
    int64_t steps;
    bool initialized; /* dense state below allocated (Adagrad, Adam, AdamW, SparseAdam) */
    /* Dense state, numel floats each: SGD momentum buffer (s1, when buf_kind is
     * EMB__BUF_DENSE); Adagrad sum (s1); Adam/AdamW/SparseAdam exp_avg (s1), exp_avg_sq
     * (s2), max_exp_avg_sq (s3, amsgrad only). */
    float *s1, *s2, *s3;
    /* SGD momentum buffer kind, and the sparse buffer (PyTorch keeps the clone of a sparse
     * gradient as a sparse tensor and grows it by merging): sp_nnz rows and values. */
    int buf_kind;
    int64_t sp_nnz;
    int64_t *sp_rows;
    float *sp_vals;
} emb__param_state;

struct emb_optimizer {
    emb_optimizer_options o;
    int nparams, cap;
    emb__param_state *ps;
    /* The sparse step's sort and accumulator buffer, kept between steps (it grows to the
     * largest step's need): allocating it afresh each step cost its page faults every time. */
    void *scratch;
    size_t scratch_bytes;
};

/* ---- options (optim_options.c) ----------------------------------------------------------- */

/* emb_optimizer_create's checks of the options: PyTorch's, in PyTorch's order and with its
 * messages, plus emb's own (every value a kind uses is finite). */
emb_status emb__optim_check_options(const emb_optimizer_options *o);

/* The hyper-parameters of a step as the kernels take them, rounded as PyTorch's tensor ops
 * round them; step is the new step count. */
emb__sgd_args emb__optim_sgd_args(const emb_optimizer_options *o);
emb__adagrad_args emb__optim_adagrad_args(const emb_optimizer_options *o, int64_t step);
emb__adam_args emb__optim_adam_args(const emb_optimizer_options *o, int64_t step);
emb__sparse_adam_args emb__optim_sparse_adam_args(const emb_optimizer_options *o, int64_t step);

/* ---- parameters and state (optimizer.c) ------------------------------------------------ */

/* opt is not NULL and param_id names one of its parameters (the messages every call by
 * parameter id gives). emb__optim_get_param also hands out the parameter. */
emb_status emb__optim_check_param_id(const emb_optimizer *opt, int param_id);
emb_status emb__optim_get_param(emb_optimizer *opt, int param_id, emb__param_state **out);

/* The parameter's data for pointer arithmetic: a parameter without elements may have a NULL
 * data pointer, and NULL + 0 is undefined in C, so such a parameter computes on a dummy
 * (nothing is ever read or written through it: every length is 0). */
float *emb__optim_param_data(const emb__param_state *ps);

/* The refusal of a step whose count cannot grow (only reachable through a loaded state). */
emb_status emb__optim_steps_overflow(int param_id);

/* Number of dense state buffers of numel floats an initialized parameter holds. */
int emb__optim_state_buffers(const emb_optimizer_options *o);

/* Allocates the dense state of Adagrad / Adam / AdamW / SparseAdam on the first step. On
 * failure nothing is kept. */
emb_status emb__optim_ensure_state(const emb_optimizer *opt, emb__param_state *ps);

/* Frees a parameter's state buffers (not the parameter). */
void emb__optim_free_state(emb__param_state *ps);

/* emb__malloc of n int64 / n x m floats (at least one byte), with messages naming `what`. */
emb_status emb__optim_alloc_i64(int64_t n, int64_t **out, const char *what);
emb_status emb__optim_alloc_f32(int64_t n, int64_t m, float **out, const char *what);

/* ---- dense helpers (optim_dense.c) ----------------------------------------------------- */

/* x *= s and y += alpha * x over n elements, in parallel chunks. */
void emb__optim_dense_scale(const emb__optim_kernel_table *K, float *x, float s, int64_t n);
void emb__optim_dense_axpy(const emb__optim_kernel_table *K, float *y, const float *x, float alpha,
                           int64_t n);

/* ---- sparse steps (optim_sparse.c) ----------------------------------------------------- */

/* A sparse row gradient as the update code sees it: entry k is row rows[k] with values at
 * values + (pos ? pos[k] : k) * dim. The sparse step views an emb_sparse_grad this way, the
 * fused step views (indices, grad_output) without copying the values. */
typedef struct emb__spview {
    int64_t nnz, dim;
    const int64_t *rows;
    const float *values;
    const int64_t *pos;
    bool coalesced; /* rows strictly ascending: coalesce() is the identity */
} emb__spview;

static inline const float *emb__sv_row(const emb__spview *s, int64_t k) {
    return s->values + (s->pos ? s->pos[k] : k) * s->dim;
}

/* The checks a sparse gradient of a parameter meets, in the order of
 * emb_optimizer_step_sparse: the optimizer takes sparse gradients and the parameter is 2-D
 * (check_sparse_kind); the gradient is [rows, dim], the parameter's shape
 * (check_grad_shape); the options allow the step (check_sparse_options). */
emb_status emb__optim_check_sparse_kind(const emb_optimizer *opt, const emb__param_state *ps,
                                        int param_id);
emb_status emb__optim_check_grad_shape(const emb__param_state *ps, int param_id, int64_t rows,
                                       int64_t dim);
emb_status emb__optim_check_sparse_options(const emb_optimizer *opt, const emb__param_state *ps,
                                           int param_id);

/* One sparse step of a validated gradient view (rows in range, dims matching). */
emb_status emb__optim_sparse_step(emb_optimizer *opt, emb__param_state *ps, const emb__spview *g);

/* Adagrad's or SparseAdam's update of one row. */
typedef struct emb__row_update {
    emb_optimizer_kind kind;
    emb__adagrad_args ag;
    emb__sparse_adam_args sa;
    float *p, *s1, *s2; /* parameter and state, [rows, dim] */
} emb__row_update;

/* Sums each row's values in sorted order (pairs: the (row, entry) pairs of
 * emb__argsort_pairs_i64_mt; NULL: entry order, for coalesced input) as coalesce() does,
 * negated first when sign < 0, and applies the row update. scratch: nt * dim floats. */
void emb__optim_coalesced_update(const emb__optim_kernel_table *K, const emb__spview *g,
                                 const int64_t *pairs, float sign, const emb__row_update *u,
                                 float *scratch, int nt);

#endif /* EMB_OPTIM_INTERNAL_H */
