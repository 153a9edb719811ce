/* src/kernels/dispatch.h: the one place that chooses between kernel variants.
 *
 * Every kernel with a SIMD twin has a scalar reference in a *_ref.c file and the twins in
 * files beside it (backward_avx2.c / _avx512.c, bag_*, lookup_*, optim_*), compiled from the
 * same body (backward_body.h, bag_body.h, lookup_body.h, optim_body.h) for AVX2+FMA and for
 * AVX-512: the bodies are elementwise operations and fmaf in a fixed order (no reduction the
 * compiler could split by vector width; -ffp-contract=off), so all variants give the same
 * bits, and tests/unit/test_kernels.c, test_bag.c and test_optim.c check every variant this
 * CPU runs against the reference. The modules call the kernels through emb__kernels(), which
 * returns the reference table when the reference kernels are forced
 * (emb_set_kernel_mode(EMB_KERNELS_REF), or EMB_KERNELS=ref in the environment), the AVX2
 * table when AVX-512 is excluded (EMB_KERNELS_AVX2, EMB_KERNELS=avx2) or absent, else the
 * AVX-512 table: emb__use_avx512() and emb__use_avx2() (core); the latter is the predicate
 * the generator's block transform (src/core/rng_normal_*.c) uses too. The k-NN score kernel
 * (score.h) has AVX2 and AVX-512 twins written with intrinsics over one body
 * (score_body.h): each dot product is one fused multiply-add chain in a vector lane, so they
 * too give the reference's bits. The word2vec and log_softmax kernels have AVX2 twins only:
 * their lane counts define their sums. */
#ifndef EMB_KERNELS_DISPATCH_H
#define EMB_KERNELS_DISPATCH_H

#include "backward.h"
#include "bag_kernels.h"
#include "lookup.h"
#include "optim_kernels.h"
#include "score.h"

/* EMB__KERNELS_AVX2: this build has the AVX2+FMA twins (x86 with GCC or Clang).
 * EMB__TARGET_AVX2: the attribute their definitions carry. */
#if (defined(__x86_64__) || defined(__i386__)) && defined(__GNUC__)
#define EMB__KERNELS_AVX2 1
#define EMB__TARGET_AVX2 __attribute__((target("avx2,fma")))
/* AVX-512 F and VL (on top of AVX2+FMA): 16-float vectors, 32 vector registers. */
#define EMB__TARGET_AVX512 __attribute__((target("avx512f,avx512vl,avx2,fma")))
#else
#define EMB__KERNELS_AVX2 0
#define EMB__TARGET_AVX2
#define EMB__TARGET_AVX512
#endif

/* One complete set of kernel variants. */
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

/* The table to use now (see above). Thread-safe; cheap enough to call once per operation. */
const emb__kernel_table *emb__kernels(void);

/* The scalar reference table. */
extern const emb__kernel_table emb__kernels_ref;

/* Every table this build has and this CPU can run, the reference first (for tests that
 * check each variant against the reference). Returns how many; *out points at them. */
int emb__kernel_variants(const emb__kernel_table *const **out);

#if EMB__KERNELS_AVX2
/* The AVX2+FMA and AVX-512 twins (only ever called through emb__kernels()). */
#define EMB__DECLARE_TWINS(SUFFIX)                                                          \
    void emb__embedding_backward_rows_##SUFFIX(                                             \
        float *grad_weight, const float *grad_output, int64_t dim, const int64_t *offsets,  \
        const int64_t *order, int64_t row_begin, int64_t row_end, bool scale_by_freq,       \
        bool overwrite, float *acc);                                                        \
    float emb__row_norm2_f32_##SUFFIX(const float *x, int64_t n);                           \
    float emb__row_norm_f32_##SUFFIX(const float *x, int64_t n, double p);                  \
    void emb__renorm_rows_f32_##SUFFIX(float *weight, int64_t dim, const int64_t *rows,     \
                                       int64_t begin, int64_t end, double max_norm,         \
                                       double p);                                           \
    void emb__lookup_rows_i64_##SUFFIX(float *out, const float *weight, int64_t dim,        \
                                       const int64_t *idx, int64_t begin, int64_t end,      \
                                       int prefetch);                                       \
    void emb__lookup_rows_i32_##SUFFIX(float *out, const float *weight, int64_t dim,        \
                                       const int32_t *idx, int64_t begin, int64_t end,      \
                                       int prefetch);                                       \
    extern const emb__optim_kernel_table emb__optim_kernels_##SUFFIX;                       \
    extern const emb__bag_kernel_table emb__bag_kernels_##SUFFIX;                          \
    void emb__score_tile_##SUFFIX(float *c, int64_t ldc, const float *q, int64_t nq,        \
                                  const float *r, int64_t nr, int64_t d, float *scratch);
EMB__DECLARE_TWINS(avx2)
EMB__DECLARE_TWINS(avx512)
#undef EMB__DECLARE_TWINS
#endif

#endif /* EMB_KERNELS_DISPATCH_H */
