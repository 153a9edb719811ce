/* src/kernels/argsort.h: the permutation PyTorch 1.13's CPU torch.sort(stable=False) returns
 * (libstdc++ std::sort introsort on (key, position) pairs comparing keys only;
 * docs/semantics.md §6.5). Needed to reproduce coalesce() and the
 * EmbeddingBag backward summation order bit for bit. */
#ifndef EMB_ARGSORT_H
#define EMB_ARGSORT_H

#include <stdint.h>

/* perm[0..n) receives the positions of keys[0..n) in the order torch.sort (unstable,
 * ascending) leaves them. keys is not modified. Needs no allocation beyond `scratch`,
 * which must hold n (key, position) pairs: 2*n int64 values. */
void emb__argsort_unstable_i64(const int64_t *keys, int64_t n, int64_t *perm, int64_t *scratch);

/* Keys per thread below which a sort stays on one thread (callers pass
 * emb__threads_for(n, EMB__ARGSORT_GRAIN) as `threads`). */
#define EMB__ARGSORT_GRAIN ((int64_t)1 << 15)

/* The same permutation, sorted on up to `threads` threads (independent ranges of the
 * introsort become tasks, core/parallel.h: emb__tasks; 1 thread, or a build without OpenMP,
 * sorts alone). The result does not depend on the thread count. */
void emb__argsort_unstable_i64_mt(const int64_t *keys, int64_t n, int64_t *perm, int64_t *scratch,
                                  int threads);

/* The sort itself: pairs[2*i] receives the i-th key in sorted order and pairs[2*i+1] its
 * position in keys (perm[i] above). pairs holds 2*n int64 values. */
void emb__argsort_pairs_i64_mt(const int64_t *keys, int64_t n, int64_t *pairs, int threads);

#endif /* EMB_ARGSORT_H */
