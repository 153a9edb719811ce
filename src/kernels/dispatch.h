/* src/kernels/dispatch.h: the one place that chooses between kernel variants.
 *
 * Every kernel with a SIMD twin has a scalar reference in a *_ref.c file and the twin in a
 * file beside it (backward_avx2.c, lookup_avx2.c, optim_avx2.c), compiled from the same body
 * (backward_body.h, lookup_body.h, optim_body.h), so all variants give the same bits. The
 * modules call the kernels through emb__kernels(), which returns the reference table when
 * the reference kernels are forced (emb_set_kernel_mode(EMB_KERNELS_REF), or EMB_KERNELS=ref
 * in the environment), else the best table this CPU supports: emb__use_avx2() (core), the
 * predicate the generator's block transform (src/core/rng_normal_*.c) uses too. */
#ifndef EMB_KERNELS_DISPATCH_H
#define EMB_KERNELS_DISPATCH_H

#include "backward.h"
#include "bag_kernels.h"
#include "lookup.h"
#include "optim_kernels.h"

/* EMB__KERNELS_AVX2: this build has the AVX2+FMA twins (x86 with GCC or Clang).
 * EMB__TARGET_AVX2: the attribute their definitions carry. */
#if (defined(__x86_64__) || defined(__i386__)) && defined(__GNUC__)
#define EMB__KERNELS_AVX2 1
#define EMB__TARGET_AVX2 __attribute__((target("avx2,fma")))
#else
#define EMB__KERNELS_AVX2 0
#define EMB__TARGET_AVX2
#endif

/* One complete set of kernel variants. */
typedef struct emb__kernel_table {
    const char *name; /* "ref", "avx2" */
    emb__backward_rows_fn backward_rows;
    emb__row_norm2_fn row_norm2;
    emb__row_norm_fn row_norm;
    emb__renorm_rows_fn renorm_rows;
    const emb__optim_kernel_table *optim;
    const emb__bag_kernel_table *bag;
} emb__kernel_table;

/* The table to use now (see above). Thread-safe; cheap enough to call once per operation. */
const emb__kernel_table *emb__kernels(void);

/* The scalar reference table. */
extern const emb__kernel_table emb__kernels_ref;

/* Every table this build has and this CPU can run, the reference first (for tests that
 * check each variant against the reference). Returns how many; *out points at them. */
int emb__kernel_variants(const emb__kernel_table *const **out);

#if EMB__KERNELS_AVX2
/* The AVX2+FMA twins (only ever called through emb__kernels()). */
void emb__embedding_backward_rows_avx2(float *grad_weight, const float *grad_output,
                                       int64_t dim, const int64_t *offsets,
                                       const int64_t *order, int64_t row_begin,
                                       int64_t row_end, bool scale_by_freq, float *acc);
float emb__row_norm2_f32_avx2(const float *x, int64_t n);
float emb__row_norm_f32_avx2(const float *x, int64_t n, double p);
void emb__renorm_rows_f32_avx2(float *weight, int64_t dim, const int64_t *rows, int64_t begin,
                               int64_t end, double max_norm, double p);
extern const emb__optim_kernel_table emb__optim_kernels_avx2;
extern const emb__bag_kernel_table emb__bag_kernels_avx2;
#endif

#endif /* EMB_KERNELS_DISPATCH_H */
