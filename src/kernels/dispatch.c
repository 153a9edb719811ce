/* src/kernels/dispatch.c: the choice between kernel variants; see dispatch.h. */
#include "dispatch.h"
#include "internal.h"

const emb__kernel_table emb__kernels_ref = {
    "ref",
    emb__embedding_backward_rows_ref,
    emb__row_norm2_f32_ref,
    emb__row_norm_f32_ref,
    emb__renorm_rows_f32_ref,
    &emb__optim_kernels_ref,
    &emb__bag_kernels_ref,
};

#if EMB__KERNELS_AVX2
static const emb__kernel_table kernels_avx2 = {
    "avx2",
    emb__embedding_backward_rows_avx2,
    emb__row_norm2_f32_avx2,
    emb__row_norm_f32_avx2,
    emb__renorm_rows_f32_avx2,
    &emb__optim_kernels_avx2,
    &emb__bag_kernels_avx2,
};
#endif

/* The best table this CPU runs, detected on first use (an atomic int, so concurrent first
 * calls are race-free; they all store the same value). */
static const emb__kernel_table *best_table(void) {
#if EMB__KERNELS_AVX2
    static int have_avx2 = -1; /* -1: not yet detected */
    int have = __atomic_load_n(&have_avx2, __ATOMIC_RELAXED);
    if (have < 0) {
        have = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
        __atomic_store_n(&have_avx2, have, __ATOMIC_RELAXED);
    }
    if (have) return &kernels_avx2;
#endif
    return &emb__kernels_ref;
}

const emb__kernel_table *emb__kernels(void) {
    return emb__force_ref() ? &emb__kernels_ref : best_table();
}

int emb__kernel_variants(const emb__kernel_table *const **out) {
    static const emb__kernel_table *const all[] = {
        &emb__kernels_ref,
#if EMB__KERNELS_AVX2
        &kernels_avx2,
#endif
    };
    *out = all;
    return best_table() == &emb__kernels_ref ? 1 : (int)(sizeof all / sizeof all[0]);
}
