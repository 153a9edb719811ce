/* src/kernels/score_avx2.c: the AVX2+FMA twin of the score kernel (score_body.h; the same
 * bits as emb__score_tile_ref): register blocks of 4 queries x 24 rows (12 accumulators of
 * 8 lanes). Only dispatch.c hands it out, and only on CPUs that support AVX2 and FMA. */
#include "dispatch.h"

#if EMB__X86
#include <immintrin.h>

#define SCORE_NAME         emb__score_tile_avx2
#define SCORE_ATTR         EMB__TARGET_AVX2
#define SCORE_V            __m256
#define SCORE_W            8
#define SCORE_ZERO()       _mm256_setzero_ps()
#define SCORE_LOAD(p)      _mm256_loadu_ps(p)
#define SCORE_BCAST(p)     _mm256_broadcast_ss(p)
#define SCORE_FMA(a, b, c) _mm256_fmadd_ps(a, b, c)
#define SCORE_STORE(p, v)  _mm256_storeu_ps(p, v)
#define SCORE_MR           4
#define SCORE_NV           3
#include "score_body.h"
#endif
