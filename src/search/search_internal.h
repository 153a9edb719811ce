/* src/search/search_internal.h: what the 2-D maps' files share (project.c: PCA and these
 * helpers; tsne.c: t-SNE). */
#ifndef EMB_SEARCH_INTERNAL_H
#define EMB_SEARCH_INTERNAL_H

#include "internal.h"

#include <emb/search.h>

/* Every loop of the maps treats its points (or rows) independently: body(ctx, i, ith) for i
 * in [0, n), on share ith. Loops of equal work per point split [0, n) evenly (chunk 0);
 * loops of unequal work (a triangle's rows, neighbour searches, tree walks) claim chunks of
 * `chunk` points as shares become free. */
typedef void (*point_fn)(void *ctx, int64_t i, int ith);
void emb__for_points(int nth, int64_t n, int64_t chunk, point_fn body, void *ctx);

/* x must be a finite float32 [n, d] tensor with n, d >= 1 ("<op>: ..." messages). */
emb_status emb__check_points(const emb_tensor *x, const char *op);

/* Centred float64 copy of x [n, d] into xc, its mean subtracted column by column. */
void emb__centre(const float *x, int64_t n, int64_t d, double *xc);

/* The first k principal coordinates of x [n, d] into out [n, k] (float64), and the
 * variance along each axis when `variance` is not NULL. */
emb_status emb__pca_double(const float *x, int64_t n, int64_t d, int64_t k, double *out,
                           double *variance);

#endif /* EMB_SEARCH_INTERNAL_H */
