/* src/kernels/dispatch.c: the choice between kernel variants; see dispatch.h. Each picker
 * lists its family's variants by tier and asks emb__variant (core/cpu.h) which one runs. */
#include "dispatch.h"
#include "internal.h"

#define TIER(t) (1u << (t))

const emb__kernel_table emb__kernels_ref = {
    "ref",
    emb__embedding_backward_rows_ref,
    emb__row_norm2_f32_ref,
    emb__row_norm_f32_ref,
    emb__renorm_rows_f32_ref,
    emb__lookup_rows_i64,
    emb__lookup_rows_i32,
    &emb__optim_kernels_ref,
    &emb__bag_kernels_ref,
    emb__score_tile_ref,
};

#if EMB__X86
#define EMB__TWIN_TABLE(SUFFIX)                                                                    \
    static const emb__kernel_table kernels_##SUFFIX = {                                            \
        #SUFFIX,                                                                                   \
        emb__embedding_backward_rows_##SUFFIX,                                                     \
        emb__row_norm2_f32_##SUFFIX,                                                               \
        emb__row_norm_f32_##SUFFIX,                                                                \
        emb__renorm_rows_f32_##SUFFIX,                                                             \
        emb__lookup_rows_i64_##SUFFIX,                                                             \
        emb__lookup_rows_i32_##SUFFIX,                                                             \
        &emb__optim_kernels_##SUFFIX,                                                              \
        &emb__bag_kernels_##SUFFIX,                                                                \
        emb__score_tile_##SUFFIX,                                                                  \
    };
EMB__TWIN_TABLE(avx2)
EMB__TWIN_TABLE(avx512)
#undef EMB__TWIN_TABLE
#endif

/* Indexed by tier; ordered by capability, so each CPU runs a prefix. */
static const emb__kernel_table *const tables[] = {
    &emb__kernels_ref,
#if EMB__X86
    &kernels_avx2,
    &kernels_avx512,
#endif
};
#define NTABLES ((int)(sizeof tables / sizeof tables[0]))

const emb__kernel_table *emb__kernels(void) {
    return tables[emb__variant(TIER(NTABLES) - 1u)];
}

int emb__kernel_variants(const emb__kernel_table *const **out) {
    *out = tables;
    const int n = (int)emb__cpu_tier() + 1;
    return n < NTABLES ? n : NTABLES;
}

const emb__qkernel_table *emb__qkernels(void) {
#if EMB__X86
    static const emb__qkernel_table *const q[] = {&emb__qkernels_ref, &emb__qkernels_avx2};
    const bool f16c = (emb__cpu_features() & EMB__CPU_F16C) != 0;
    return q[emb__variant(TIER(EMB__TIER_REF) | (f16c ? TIER(EMB__TIER_AVX2) : 0u))];
#else
    return &emb__qkernels_ref;
#endif
}

emb__sgns_step_fn emb__sgns_step(void) {
#if EMB__X86
    static const emb__sgns_step_fn s[] = {emb__sgns_step_ref, emb__sgns_step_avx2,
                                          emb__sgns_step_avx512};
    return s[emb__variant(TIER(EMB__TIER_REF) | TIER(EMB__TIER_AVX2) | TIER(EMB__TIER_AVX512))];
#else
    return emb__sgns_step_ref;
#endif
}

/* log_softmax: the AVX2 + SLEEF kernels reproduce torch's AVX2 build; the _ref ones its
 * DEFAULT-capability arithmetic (see softmax.h; `simd` says which ran). */
emb__log_softmax_kernels emb__log_softmax_pick(void) {
    static const emb__log_softmax_kernels k[] = {
        {emb__log_softmax_fwd_ref, emb__log_softmax_bwd_ref, emb__log_softmax_dim_fwd_ref,
         emb__log_softmax_dim_bwd_ref, emb__vexp_ref, emb__vlog_ref, emb__sigmoid_ref, false},
#if defined(EMB_HAVE_SLEEF)
        {emb__log_softmax_fwd_avx2, emb__log_softmax_bwd_avx2, emb__log_softmax_dim_fwd_avx2,
         emb__log_softmax_dim_bwd_avx2, emb__vexp_avx2, emb__vlog_avx2, emb__sigmoid_avx2, true},
#endif
    };
    return k[emb__variant(TIER((int)(sizeof k / sizeof k[0])) - 1u)];
}
