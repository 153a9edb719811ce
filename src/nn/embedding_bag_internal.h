/* src/nn/embedding_bag_internal.h: the emb_bag struct and the checks shared by the bag's
 * forward (embedding_bag.c) and backward (embedding_bag_backward.c). Private to nn: the
 * bag configuration, batches and entries that other modules use are in nn_face.h. */
#ifndef EMB_EMBEDDING_BAG_INTERNAL_H
#define EMB_EMBEDDING_BAG_INTERNAL_H

#include "embedding_internal.h"
#include "kernels/bag_kernels.h"
#include "kernels/dispatch.h"

#include <emb/bag.h>

struct emb_bag {
    emb_embedding *emb; /* the table, owned */
    emb_bag_mode mode;
    bool include_last_offset;
};

/* Mode, and the mode's restrictions (max with scale_grad_by_freq or sparse). */
emb_status emb__bag_check_mode(emb_bag_mode mode, bool scale_grad_by_freq, bool sparse);

/* The configuration of a bag handle. */
void emb__bag_cfg_of(const emb_bag *bag, emb__bag_cfg *c);

/* The bag holding position p (p < end). */
int64_t emb__bag_of(const emb__bag_batch *bb, int64_t p);

/* t is int64 with the given 2-D shape. */
emb_status emb__bag_check_i64_shape(const emb_tensor *t, const char *what, const int64_t shape[2]);

#endif /* EMB_EMBEDDING_BAG_INTERNAL_H */
