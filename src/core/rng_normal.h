/* src/core/rng_normal.h: the float32 block transform of normal_ (PyTorch's vectorised
 * Box-Muller: a Cephes-style float32 log and sincos with the FMA pattern of its AVX2 kernel),
 * as a scalar reference (rng_normal_ref.c) and its AVX2 twin (rng_normal_avx2.c), which
 * give the same bits. A kernel family like those of src/kernels, but the generator that uses
 * it is core, which may not include src/kernels: emb__normal16_pick (generator.c) chooses
 * the variant by the same rule as src/kernels/dispatch.c (emb__variant, core/cpu.h).
 * Private to those files and the tests.
 *
 * On `nb` consecutive blocks of 16 floats: d[0..8) hold u1 candidates, d[8..16) u2; both
 * are overwritten with mean + std * (the Box-Muller pair). */
#ifndef EMB_RNG_NORMAL_H
#define EMB_RNG_NORMAL_H

#include "cpu.h"

#include <stdint.h>

typedef void (*emb__normal16_fn)(float *d, int64_t nb, float mean, float std);

void emb__normal16_ref(float *d, int64_t nb, float mean, float std);
#if EMB__X86
void emb__normal16_avx2(float *d, int64_t nb, float mean, float std);
#endif

/* The variant to use now: the AVX2 twin at the AVX2 tier and above, else the reference. */
emb__normal16_fn emb__normal16_pick(void);

/* The Cephes constants both variants use. */
#define LOG_P0    7.0376836292E-2f
#define LOG_P1    -1.1514610310E-1f
#define LOG_P2    1.1676998740E-1f
#define LOG_P3    -1.2420140846E-1f
#define LOG_P4    1.4249322787E-1f
#define LOG_P5    -1.6668057665E-1f
#define LOG_P6    2.0000714765E-1f
#define LOG_P7    -2.4999993993E-1f
#define LOG_P8    3.3333331174E-1f
#define LOG_Q1    -2.12194440e-4f
#define LOG_Q2    0.693359375f
#define SQRT_HALF 0.707106781186547524f
#define SC_FOPI   1.27323954473516f
#define SC_DP1    -0.78515625f
#define SC_DP2    -2.4187564849853515625e-4f
#define SC_DP3    -3.77489497744594108e-8f
#define SIN_P0    -1.9515295891E-4f
#define SIN_P1    8.3321608736E-3f
#define SIN_P2    -1.6666654611E-1f
#define COS_P0    2.443315711809948E-5f
#define COS_P1    -1.388731625493765E-3f
#define COS_P2    4.166664568298827E-2f
#define TWO_PI_F  6.28318530717958647692f /* rounds to 0x40C90FDB */

#endif /* EMB_RNG_NORMAL_H */
