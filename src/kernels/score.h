/* src/kernels/score.h: the score kernel of the k-NN search (src/search/knn.c, docs/search.md).
 *
 *   c[i * ldc + j] = dot(q[i], r[j])   for i < nq, j < nr
 *   q: [nq, d] row-major, r: [nr, d] row-major, c: nq rows of ldc floats (j < nr written)
 *
 * Every dot product has one fixed summation order, the same in every variant:
 *
 *   acc = +0.0;  for p = 0, 1, ..., d - 1:  acc = fmaf(q[i][p], r[j][p], acc)
 *
 * one fused multiply-add per element, in increasing p (a single rounding per step). The
 * SIMD variants compute many dot products at once, one per vector lane (queries broadcast,
 * rows packed across the lanes), so each lane runs exactly that sequence: the result depends
 * neither on the vector width, the register blocking, how the rows are split into panels,
 * nor on the thread count. (A BLAS sgemm does not give that: OpenBLAS 0.3.21's Haswell/Zen
 * sgemm kernel sums some tiles of the product in one chain and others in two chains, for
 * even and odd p, added at the end, and which elements fall in which tile depends on how
 * the library splits the product between its threads; see docs/search.md.)
 *
 * Kernels never validate and never allocate: the caller passes scratch of
 * emb__score_scratch_floats(nq, d) floats (64-byte alignment not needed) and owns the
 * threading. */
#ifndef EMB_KERNELS_SCORE_H
#define EMB_KERNELS_SCORE_H

#include <stddef.h>
#include <stdint.h>

/* The largest register block any variant uses (queries x rows) and the depth of a packed
 * panel: they size the scratch. */
#define EMB__SCORE_MR_MAX 8
#define EMB__SCORE_NR_MAX 48
#define EMB__SCORE_KC     256

/* Floats of scratch the kernels need for nq queries of d elements: the queries packed in
 * groups of up to MR_MAX, one packed panel of up to NR_MAX rows and KC elements, and the
 * panel's results. */
static inline size_t emb__score_scratch_floats(int64_t nq, int64_t d) {
    const size_t q = ((size_t)nq + EMB__SCORE_MR_MAX - 1) / EMB__SCORE_MR_MAX * EMB__SCORE_MR_MAX;
    return q * (size_t)d + (size_t)EMB__SCORE_KC * EMB__SCORE_NR_MAX + q * EMB__SCORE_NR_MAX;
}

typedef void (*emb__score_tile_fn)(float *c, int64_t ldc, const float *q, int64_t nq,
                                   const float *r, int64_t nr, int64_t d, float *scratch);

/* The scalar reference (always built; ignores the scratch). */
void emb__score_tile_ref(float *c, int64_t ldc, const float *q, int64_t nq, const float *r,
                         int64_t nr, int64_t d, float *scratch);

#endif /* EMB_KERNELS_SCORE_H */
