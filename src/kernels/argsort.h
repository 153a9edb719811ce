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

#endif /* EMB_ARGSORT_H */
