/* src/core/cpu.c: the CPU probe and the kernel mode (see cpu.h). Both are read lazily by
 * whichever thread asks first, so both are atomics: concurrent first calls compute the same
 * value, and a mode set by emb_set_kernel_mode is never overwritten by a late read of the
 * environment. */
#include "cpu.h"

#include <stdlib.h>
#include <string.h>
#if EMB__X86
#include <cpuid.h>
#endif

#define PROBED (1u << 31) /* set once the features are known (so 0 means "not yet") */

static unsigned probe(void) {
    unsigned f = 0;
#if EMB__X86
    /* libgcc's CPU model checks that the OS saves the AVX and AVX-512 registers */
    if (__builtin_cpu_supports("avx2")) f |= EMB__CPU_AVX2;
    if (__builtin_cpu_supports("fma")) f |= EMB__CPU_FMA;
    if (__builtin_cpu_supports("avx512f")) f |= EMB__CPU_AVX512F;
    if (__builtin_cpu_supports("avx512vl")) f |= EMB__CPU_AVX512VL;
    /* F16C (CPUID leaf 1, ECX bit 29), asked of the CPU directly: clang 14's
     * __builtin_cpu_supports does not know the name. It uses the AVX registers, so it
     * counts only with AVX2 (whose check includes the OS's). */
    unsigned a = 0, b = 0, c = 0, d = 0;
    if ((f & EMB__CPU_AVX2) && __get_cpuid(1, &a, &b, &c, &d) && (c >> 29 & 1u)) f |= EMB__CPU_F16C;
#endif
    return f;
}

unsigned emb__cpu_features(void) {
    static unsigned features; /* PROBED | features, or 0 */
    unsigned f = __atomic_load_n(&features, __ATOMIC_RELAXED);
    if (!f) {
        f = probe() | PROBED;
        __atomic_store_n(&features, f, __ATOMIC_RELAXED);
    }
    return f & ~PROBED;
}

emb__tier emb__cpu_tier(void) {
    const unsigned f = emb__cpu_features();
    const unsigned avx2 = EMB__CPU_AVX2 | EMB__CPU_FMA;
    const unsigned avx512 = avx2 | EMB__CPU_AVX512F | EMB__CPU_AVX512VL;
    return (f & avx512) == avx512 ? EMB__TIER_AVX512
           : (f & avx2) == avx2   ? EMB__TIER_AVX2
                                  : EMB__TIER_REF;
}

/* ---- the kernel mode ------------------------------------------------------------------ */

static int kernel_mode = -1; /* -1: not yet read from the environment */

static int normalise(int mode) {
    return mode == EMB_KERNELS_REF || mode == EMB_KERNELS_AVX2 ? mode : EMB_KERNELS_AUTO;
}

void emb_set_kernel_mode(emb_kernel_mode mode) {
    __atomic_store_n(&kernel_mode, normalise((int)mode), __ATOMIC_RELAXED);
}

emb_kernel_mode emb_get_kernel_mode(void) {
    int m = __atomic_load_n(&kernel_mode, __ATOMIC_RELAXED);
    if (m < 0) {
        const char *env = getenv("EMB_KERNELS");
        int want = !env                       ? EMB_KERNELS_AUTO
                   : strcmp(env, "ref") == 0  ? EMB_KERNELS_REF
                   : strcmp(env, "avx2") == 0 ? EMB_KERNELS_AVX2
                                              : EMB_KERNELS_AUTO;
        /* only over "not yet read": a mode set meanwhile wins */
        int expected = -1;
        if (__atomic_compare_exchange_n(&kernel_mode, &expected, want, false, __ATOMIC_RELAXED,
                                        __ATOMIC_RELAXED))
            m = want;
        else
            m = expected;
    }
    return (emb_kernel_mode)m;
}

bool emb__force_ref(void) {
    return emb_get_kernel_mode() == EMB_KERNELS_REF;
}

emb__tier emb__kernel_tier(void) {
    const emb__tier cpu = emb__cpu_tier();
    switch (emb_get_kernel_mode()) {
    case EMB_KERNELS_REF:
        return EMB__TIER_REF;
    case EMB_KERNELS_AVX2:
        return cpu < EMB__TIER_AVX2 ? cpu : EMB__TIER_AVX2;
    default:
        return cpu;
    }
}

int emb__variant(unsigned have) {
    int t = (int)emb__kernel_tier();
    while (t > 0 && !(have >> t & 1u)) t--;
    return t;
}
