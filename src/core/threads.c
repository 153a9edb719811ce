/* Thread count and kernel selection (the mode, and the one CPU check every choice between
 * kernel variants uses). */
#include "internal.h"

#include <stdlib.h>
#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif

static int emb__num_threads = 0; /* 0: OpenMP default */
static int emb__kernel_mode = -1; /* -1: not yet read from the environment */

void emb_set_num_threads(int n) { emb__num_threads = n > 0 ? n : 0; }

int emb_get_num_threads(void) {
    if (emb__num_threads > 0) return emb__num_threads;
#ifdef _OPENMP
    return omp_get_max_threads();
#else
    return 1;
#endif
}

int emb__threads_for(int64_t work, int64_t grain) {
    int t = emb_get_num_threads();
    if (grain < 1) grain = 1;
    int64_t max_useful = work / grain;
    if (max_useful < 1) return 1;
    if ((int64_t)t > max_useful) t = (int)max_useful;
    return t < 1 ? 1 : t;
}

void emb_set_kernel_mode(emb_kernel_mode mode) {
    emb__kernel_mode = mode == EMB_KERNELS_REF || mode == EMB_KERNELS_AVX2 ? mode
                                                                           : EMB_KERNELS_AUTO;
}

emb_kernel_mode emb_get_kernel_mode(void) {
    if (emb__kernel_mode < 0) {
        const char *env = getenv("EMB_KERNELS");
        emb__kernel_mode = !env                       ? EMB_KERNELS_AUTO
                           : strcmp(env, "ref") == 0  ? EMB_KERNELS_REF
                           : strcmp(env, "avx2") == 0 ? EMB_KERNELS_AVX2
                                                      : EMB_KERNELS_AUTO;
    }
    return (emb_kernel_mode)emb__kernel_mode;
}

bool emb__force_ref(void) { return emb_get_kernel_mode() == EMB_KERNELS_REF; }

bool emb__cpu_has_avx2(void) {
#if (defined(__x86_64__) || defined(__i386__)) && defined(__GNUC__)
    /* Detected on first use; an atomic int, so concurrent first calls are race-free (they
     * all store the same value). */
    static int have_avx2 = -1;
    int have = __atomic_load_n(&have_avx2, __ATOMIC_RELAXED);
    if (have < 0) {
        have = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
        __atomic_store_n(&have_avx2, have, __ATOMIC_RELAXED);
    }
    return have != 0;
#else
    return false;
#endif
}

bool emb__use_avx2(void) { return !emb__force_ref() && emb__cpu_has_avx2(); }

bool emb__cpu_has_avx512(void) {
#if (defined(__x86_64__) || defined(__i386__)) && defined(__GNUC__)
    static int have_avx512 = -1;
    int have = __atomic_load_n(&have_avx512, __ATOMIC_RELAXED);
    if (have < 0) {
        /* libgcc's cpu model also checks that the OS saves the AVX-512 registers */
        have = emb__cpu_has_avx2() && __builtin_cpu_supports("avx512f") &&
               __builtin_cpu_supports("avx512vl");
        __atomic_store_n(&have_avx512, have, __ATOMIC_RELAXED);
    }
    return have != 0;
#else
    return false;
#endif
}

bool emb__use_avx512(void) {
    return emb_get_kernel_mode() == EMB_KERNELS_AUTO && emb__cpu_has_avx512();
}

void emb__zero_floats(float *p, int64_t n) {
    const int nt = emb__threads_for(n, (int64_t)1 << 20);
    (void)nt; /* used only by the OpenMP pragma */
#ifdef _OPENMP
#pragma omp parallel for num_threads(nt) schedule(static, 1) if (nt > 1)
#endif
    for (int t = 0; t < nt; t++) {
        const int64_t lo = n * t / nt, hi = n * (t + 1) / nt;
        memset(p + lo, 0, (size_t)(hi - lo) * sizeof(float));
    }
}
