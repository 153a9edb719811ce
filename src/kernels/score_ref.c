/* src/kernels/score_ref.c: the scalar score kernel (contract in score.h): each dot product
 * is the plain chain of fmaf over the dimension, four rows at a time for independent
 * chains. The SIMD twins (score_body.h) compute the same chains in vector lanes. */
#include "score.h"

#include <math.h>

void emb__score_tile_ref(float *c, int64_t ldc, const float *q, int64_t nq, const float *r,
                         int64_t nr, int64_t d, float *scratch) {
    (void)scratch;
    for (int64_t i = 0; i < nq; i++) {
        const float *x = q + i * d;
        float *out = c + i * ldc;
        int64_t j = 0;
        for (; j + 4 <= nr; j += 4) {
            const float *r0 = r + j * d, *r1 = r0 + d, *r2 = r1 + d, *r3 = r2 + d;
            float a0 = 0.0f, a1 = 0.0f, a2 = 0.0f, a3 = 0.0f;
            for (int64_t p = 0; p < d; p++) {
                const float v = x[p];
                a0 = fmaf(v, r0[p], a0);
                a1 = fmaf(v, r1[p], a1);
                a2 = fmaf(v, r2[p], a2);
                a3 = fmaf(v, r3[p], a3);
            }
            out[j] = a0, out[j + 1] = a1, out[j + 2] = a2, out[j + 3] = a3;
        }
        for (; j < nr; j++) {
            const float *rj = r + j * d;
            float a = 0.0f;
            for (int64_t p = 0; p < d; p++) a = fmaf(x[p], rj[p], a);
            out[j] = a;
        }
    }
}
