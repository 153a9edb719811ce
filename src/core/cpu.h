/* src/core/cpu.h: the one CPU probe, and the one rule that turns it and the kernel mode
 * (emb_set_kernel_mode, EMB_KERNELS) into the tier of kernel variants that runs.
 *
 * Every choice between a scalar reference and its SIMD twins asks emb__variant (through
 * src/kernels/dispatch.c, or for the generator's block transform, which lives in core,
 * through core/generator.c); nothing else reads the CPU's features or the mode for that
 * purpose (tests/cli/test_layers.py checks that only src/core/cpu.c asks the CPU). */
#ifndef EMB_CPU_H
#define EMB_CPU_H

#include <emb/core.h>

#include <stdbool.h>

/* EMB__X86: this build has the x86 SIMD twins (x86 with GCC or Clang); EMB__TARGET_*: the
 * attributes of their definitions. */
#if (defined(__x86_64__) || defined(__i386__)) && defined(__GNUC__)
#define EMB__X86         1
#define EMB__TARGET_AVX2 __attribute__((target("avx2,fma")))
/* AVX-512 F and VL (on top of AVX2+FMA): 16-float vectors, 32 vector registers. */
#define EMB__TARGET_AVX512 __attribute__((target("avx512f,avx512vl,avx2,fma")))
#else
#define EMB__X86 0
#define EMB__TARGET_AVX2
#define EMB__TARGET_AVX512
#endif

/* The features emb's kernels use, read from the CPU once (race-free); 0 off x86. AVX
 * features count only when the operating system saves their registers. */
enum {
    EMB__CPU_AVX2 = 1u << 0,
    EMB__CPU_FMA = 1u << 1,
    EMB__CPU_F16C = 1u << 2,
    EMB__CPU_AVX512F = 1u << 3,
    EMB__CPU_AVX512VL = 1u << 4,
};
unsigned emb__cpu_features(void);

/* Tiers of kernel variants, each needing the one before it. */
typedef enum emb__tier {
    EMB__TIER_REF = 0,    /* the scalar reference */
    EMB__TIER_AVX2 = 1,   /* AVX2 and FMA */
    EMB__TIER_AVX512 = 2, /* AVX-512 F and VL besides */
} emb__tier;
#define EMB__TIERS 3

/* The highest tier this CPU runs. */
emb__tier emb__cpu_tier(void);

/* The tier that runs now: the CPU's, capped by the mode (EMB_KERNELS_REF: the reference;
 * EMB_KERNELS_AVX2: at most AVX2; EMB_KERNELS_AUTO: no cap). */
emb__tier emb__kernel_tier(void);

/* Which variant of a kernel family runs now: the highest tier t <= emb__kernel_tier() whose
 * bit (1u << t) is set in `have` (the tiers the family has on this build and CPU; bit 0,
 * the reference, must be set). The one rule every family is chosen by. */
int emb__variant(unsigned have);

/* True when the reference kernels are forced (emb_set_kernel_mode(EMB_KERNELS_REF), or
 * EMB_KERNELS=ref in the environment): then emb also leaves BLAS aside. */
bool emb__force_ref(void);

#endif /* EMB_CPU_H */
