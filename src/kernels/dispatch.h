/* src/kernels/dispatch.h: the one place that chooses between kernel variants.
 *
 * Every kernel family has a scalar reference (a *_ref.c file) and may have SIMD twins in
 * files beside it. Each family is chosen here, at the time of each call, by one rule:
 * emb__variant (core/cpu.h) takes the tier the CPU runs (one probe, read once), caps it by
 * the kernel mode (emb_set_kernel_mode, or EMB_KERNELS=ref|avx2 in the environment:
 * ref forces the references, avx2 stops at the AVX2 twins, auto takes the best), and returns
 * the highest tier at or below it that the family has. The families, their tiers and why:
 *
 *   family (picker)                 ref avx2 avx512  why these tiers, how twins keep the bits
 *   ------------------------------  --- ---- ------  ---------------------------------------
 *   lookup, backward rows, norms,    x   x     x     one body per kernel (*_body.h) compiled
 *   renorm, bag, optimizer rows,                     for each tier: elementwise fmaf in a fixed
 *   k-NN score tile (emb__kernels)                   order, no sum the vector width could
 *                                                    reorder (-ffp-contract=off); the score
 *                                                    tile is one fmaf chain per dot product
 *   reduced-precision rows           x   x     -     one body (qkernels_body.h), elementwise;
 *   (emb__qkernels)                                  the AVX2 tier also needs F16C, else the
 *                                                    reference runs; no AVX-512 twin written
 *   word2vec SGNS step               x   x     x     its dot products sum 2 x 8 lanes in a
 *   (emb__sgns_step)                                 fixed tree (sgns.h) that the reference
 *                                                    replays: two registers of 8 in AVX2, the
 *                                                    two halves of one register in AVX-512
 *   log_softmax, exp, log, sigmoid   x   x     -     not the same bits: each tier is one of
 *   (emb__log_softmax_pick)                          torch's CPU kernels, DEFAULT and AVX2 with
 *                                                    SLEEF (the one torch runs on AVX2 and
 *                                                    AVX-512 machines, docs/semantics.md §1),
 *                                                    the latter when the build has SLEEF
 *   the generator's normal_ block    x   x     -     torch's AVX2 kernel, 8 lanes, replayed by
 *   transform (emb__normal16_pick,                   the reference; it lives in core with the
 *   core/generator.c)                                generator (core may not include kernels)
 *                                                    and is chosen by the same emb__variant
 *
 * tests/unit/test_kernels.c, test_bag.c and test_optim.c check every variant this CPU runs
 * against the reference (test_word2vec.c the SGNS step, test_first_use.c the choice made by
 * many threads at once); `make test` runs the machine-dependent suites under each tier
 * (scripts/test_machines.py). Every picker is thread-safe and cheap: call it once per
 * operation. */
#ifndef EMB_KERNELS_DISPATCH_H
#define EMB_KERNELS_DISPATCH_H

#include "cpu.h"

#include "backward.h"
#include "bag_kernels.h"
#include "lookup.h"
#include "optim_kernels.h"
#include "qkernels.h"
#include "score.h"
#include "sgns.h"
#include "softmax.h"

/* One complete set of the variants of the first family above. */
typedef struct emb__kernel_table {
    const char *name; /* "ref", "avx2", "avx512" */
    emb__backward_rows_fn backward_rows;
    emb__row_norm2_fn row_norm2;
    emb__row_norm_fn row_norm;
    emb__renorm_rows_fn renorm_rows;
    emb__lookup_rows_i64_fn lookup_rows_i64;
    emb__lookup_rows_i32_fn lookup_rows_i32;
    const emb__optim_kernel_table *optim;
    const emb__bag_kernel_table *bag;
    emb__score_tile_fn score_tile;
} emb__kernel_table;

/* The pickers (see above). */
const emb__kernel_table *emb__kernels(void);
const emb__qkernel_table *emb__qkernels(void);
emb__sgns_step_fn emb__sgns_step(void);
emb__log_softmax_kernels emb__log_softmax_pick(void);

/* The scalar reference table. */
extern const emb__kernel_table emb__kernels_ref;

/* Every table this build has and this CPU can run, the reference first (for tests that
 * check each variant against the reference). Returns how many; *out points at them. */
int emb__kernel_variants(const emb__kernel_table *const **out);

#if EMB__X86 /* the build has the x86 twins (core/cpu.h) */
/* The AVX2+FMA and AVX-512 twins (only ever called through emb__kernels()). */
#define EMB__DECLARE_TWINS(SUFFIX)                                                                 \
    void emb__embedding_backward_rows_##SUFFIX(                                                    \
        float *grad_weight, const float *grad_output, int64_t dim, const int64_t *offsets,         \
        const int64_t *order, int64_t row_begin, int64_t row_end, bool scale_by_freq,              \
        bool overwrite, float *acc);                                                               \
    float emb__row_norm2_f32_##SUFFIX(const float *x, int64_t n);                                  \
    float emb__row_norm_f32_##SUFFIX(const float *x, int64_t n, double p);                         \
    void emb__renorm_rows_f32_##SUFFIX(float *weight, int64_t dim, const int64_t *rows,            \
                                       int64_t begin, int64_t end, double max_norm, double p);     \
    void emb__lookup_rows_i64_##SUFFIX(float *out, const float *weight, int64_t dim,               \
                                       const int64_t *idx, int64_t begin, int64_t end,             \
                                       int prefetch);                                              \
    void emb__lookup_rows_i32_##SUFFIX(float *out, const float *weight, int64_t dim,               \
                                       const int32_t *idx, int64_t begin, int64_t end,             \
                                       int prefetch);                                              \
    extern const emb__optim_kernel_table emb__optim_kernels_##SUFFIX;                              \
    extern const emb__bag_kernel_table emb__bag_kernels_##SUFFIX;                                  \
    void emb__score_tile_##SUFFIX(float *c, int64_t ldc, const float *q, int64_t nq,               \
                                  const float *r, int64_t nr, int64_t d, float *scratch);
EMB__DECLARE_TWINS(avx2)
EMB__DECLARE_TWINS(avx512)
#undef EMB__DECLARE_TWINS
#endif

#endif /* EMB_KERNELS_DISPATCH_H */
