/* src/kernels/score_avx512.c: the AVX-512 twin of the score kernel (score_body.h; the same
 * bits as emb__score_tile_ref): register blocks of 8 queries x 32 rows (16 accumulators of
 * 16 lanes, of the 32 vector registers). Only dispatch.c hands it out, and only on CPUs that
 * support AVX-512 F and VL. */
#include "dispatch.h"

#if EMB__X86
#include <immintrin.h>

#define SCORE_NAME         emb__score_tile_avx512
#define SCORE_ATTR         EMB__TARGET_AVX512
#define SCORE_V            __m512
#define SCORE_W            16
#define SCORE_ZERO()       _mm512_setzero_ps()
#define SCORE_LOAD(p)      _mm512_loadu_ps(p)
#define SCORE_BCAST(p)     _mm512_set1_ps(*(p))
#define SCORE_FMA(a, b, c) _mm512_fmadd_ps(a, b, c)
#define SCORE_STORE(p, v)  _mm512_storeu_ps(p, v)
#define SCORE_MR           8
#define SCORE_NV           2
#include "score_body.h"
#endif
