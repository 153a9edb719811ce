/* src/kernels/dispatch.c: the choice between kernel variants; see dispatch.h. */
#include "dispatch.h"
#include "internal.h"
#include "softmax.h"

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

#if EMB__KERNELS_AVX2
#define EMB__TWIN_TABLE(SUFFIX)                                                             \
    static const emb__kernel_table kernels_##SUFFIX = {                                     \
        #SUFFIX,                                                                            \
        emb__embedding_backward_rows_##SUFFIX,                                              \
        emb__row_norm2_f32_##SUFFIX,                                                        \
        emb__row_norm_f32_##SUFFIX,                                                         \
        emb__renorm_rows_f32_##SUFFIX,                                                      \
        emb__lookup_rows_i64_##SUFFIX,                                                      \
        emb__lookup_rows_i32_##SUFFIX,                                                      \
        &emb__optim_kernels_##SUFFIX,                                                       \
        &emb__bag_kernels_##SUFFIX,                                                         \
        emb__score_tile_##SUFFIX,                                                           \
    };
EMB__TWIN_TABLE(avx2)
EMB__TWIN_TABLE(avx512)
#undef EMB__TWIN_TABLE
#endif

const emb__kernel_table *emb__kernels(void) {
#if EMB__KERNELS_AVX2
    if (emb__use_avx512()) return &kernels_avx512;
    if (emb__use_avx2()) return &kernels_avx2;
#endif
    return &emb__kernels_ref;
}

int emb__kernel_variants(const emb__kernel_table *const **out) {
    /* ordered by capability: each CPU runs a prefix */
    static const emb__kernel_table *const all[] = {
        &emb__kernels_ref,
#if EMB__KERNELS_AVX2
        &kernels_avx2,
        &kernels_avx512,
#endif
    };
    *out = all;
    return emb__cpu_has_avx512() ? 3 : emb__cpu_has_avx2() ? 2 : 1;
}

/* log_softmax: the AVX2 + SLEEF kernels reproduce torch's AVX2 build; the _ref ones its
 * DEFAULT-capability arithmetic (see softmax.h; `simd` says which ran). */
emb__log_softmax_kernels emb__log_softmax_pick(void) {
    emb__log_softmax_kernels k = {emb__log_softmax_fwd_ref, emb__log_softmax_bwd_ref,
                                  emb__log_softmax_dim_fwd_ref, emb__log_softmax_dim_bwd_ref,
                                  emb__vexp_ref, emb__vlog_ref, emb__sigmoid_ref, false};
#if defined(EMB_HAVE_SLEEF)
    if (emb__use_avx2()) {
        k.fwd = emb__log_softmax_fwd_avx2;
        k.bwd = emb__log_softmax_bwd_avx2;
        k.dim_fwd = emb__log_softmax_dim_fwd_avx2;
        k.dim_bwd = emb__log_softmax_dim_bwd_avx2;
        k.vexp = emb__vexp_avx2;
        k.vlog = emb__vlog_avx2;
        k.sigmoid = emb__sigmoid_avx2;
        k.simd = true;
    }
#endif
    return k;
}
