/* src/kernels/sgns.h: the inner loops of word2vec training with negative sampling
 * (skip-gram and CBOW), over raw float rows.
 *
 * Kernels never validate and never allocate. Every variant gives the same bits: dot
 * products accumulate in two sets of 8 lanes (in each block of 16 elements, elements
 * k..k+7 go to the first set, k+8..k+15 to the second, each lane an fmaf chain; a last block
 * of 8 goes to the first set), the sets are added lane by lane, the lanes are summed
 * pairwise ((l0+l1)+(l2+l3))+((l4+l5)+(l6+l7)), and the tail beyond the last multiple of 8
 * is added element by element with fmaf; every other operation is
 * element-wise (fmaf or plain multiply), so the AVX2 twin (sgns_avx2.c, a set a register)
 * and the AVX-512 twin (sgns_avx512.c, both sets in one register) equal the scalar reference
 * (sgns_ref.c) bit for bit. */
#ifndef EMB_KERNELS_SGNS_H
#define EMB_KERNELS_SGNS_H

#include "cpu.h"

#include <stdbool.h>
#include <stdint.h>

/* Sigmoid lookup as the word2vec tool does it: scores beyond +-EMB__SGNS_MAX_EXP saturate,
 * others read a table of EMB__SGNS_TABLE + 1 entries (the largest float below MAX_EXP
 * indexes the last one, as in the word2vec tool, whose table has one entry more than it
 * fills). A NaN score reads nothing. */
#define EMB__SGNS_TABLE   1000
#define EMB__SGNS_MAX_EXP 6

/* One training example with shared negatives (the mini-batched form of Ji et al. 2016):
 * inputs ctx[0..m) (rows of in, syn0), outputs tgt[0..n) (rows of out, syn1; tgt[0] is the true
 * word, label 1; the others are negatives, label 0; a negative equal to tgt[0] is skipped).
 *
 * Skip-gram (cbow false): with X the m input rows and Y the n output rows as they are on
 * entry, S = X Y^T, G[i][j] = (label_j - sigmoid(S[i][j])) * alpha, then
 * syn0[ctx_i] += G[i] Y and syn1[tgt_j] += G[:, j]^T X (each sum in index order).
 * With m == 1 (one pair, the word2vec tool's update) the rows are used in place: for each
 * target j in order, g = (label_j - sigmoid(x . y_j)) * alpha, e += g y_j, y_j += g x;
 * then x += e.
 * CBOW (cbow true): h = sum of the m input rows (times 1/m when cbow_mean), then for each
 * target j in order: g = (label_j - sigmoid(h . Y_j)) * alpha, e += g Y_j, syn1[tgt_j] +=
 * g h; finally syn0[ctx_i] += e for every input.
 *
 * scratch: at least (m + n + 2) * dim + m * n floats owned by the caller's thread.
 * Rows are read and written in place without locks: concurrent calls on other threads may
 * interleave (Hogwild), which changes results only by the interleaving.
 * Returns false when a score x . y was NaN or infinite (the vectors have diverged; a NaN
 * score updates nothing): the caller stops training. */
/* A table as a step sees it (the input table syn0 or the output table syn1): row id is in
 * hot (a thread's own copy of the nhot most frequent rows) when id < nhot, else in table.
 * nhot 0 (hot unused): every row in table. */
typedef struct emb__sgns_rows {
    float *table, *hot;
    int64_t nhot;
} emb__sgns_rows;

static inline float *emb__sgns_row(const emb__sgns_rows *t, int32_t id, int64_t dim) {
    return (id < t->nhot ? t->hot : t->table) + (int64_t)id * dim;
}

typedef bool (*emb__sgns_step_fn)(const emb__sgns_rows *in, const emb__sgns_rows *out, int64_t dim,
                                  const int32_t *ctx, int m, const int32_t *tgt, int n, float alpha,
                                  bool cbow, bool cbow_mean, const float *sigmoid, float *scratch);

bool emb__sgns_step_ref(const emb__sgns_rows *in, const emb__sgns_rows *out, int64_t dim,
                        const int32_t *ctx, int m, const int32_t *tgt, int n, float alpha,
                        bool cbow, bool cbow_mean, const float *sigmoid, float *scratch);
#if EMB__X86
bool emb__sgns_step_avx2(const emb__sgns_rows *in, const emb__sgns_rows *out, int64_t dim,
                         const int32_t *ctx, int m, const int32_t *tgt, int n, float alpha,
                         bool cbow, bool cbow_mean, const float *sigmoid, float *scratch);
bool emb__sgns_step_avx512(const emb__sgns_rows *in, const emb__sgns_rows *out, int64_t dim,
                           const int32_t *ctx, int m, const int32_t *tgt, int n, float alpha,
                           bool cbow, bool cbow_mean, const float *sigmoid, float *scratch);
#endif

/* Fills table[0..EMB__SGNS_TABLE] with sigmoid at evenly spaced points of
 * [-MAX_EXP, MAX_EXP] (the word2vec tool's expTable, and its last entry). */
void emb__sgns_sigmoid_table(float *table);

#endif /* EMB_KERNELS_SGNS_H */
