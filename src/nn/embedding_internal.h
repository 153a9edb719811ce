/* src/nn/embedding_internal.h: the emb_embedding struct, shared by the nn sources. */
#ifndef EMB_EMBEDDING_INTERNAL_H
#define EMB_EMBEDDING_INTERNAL_H

#include "internal.h"
#include <emb/embedding.h>

struct emb_embedding {
    int64_t num_embeddings;
    int64_t embedding_dim;
    int64_t padding_idx; /* normalised, >= 0, or EMB_PADDING_NONE */
    double max_norm;     /* INFINITY: none */
    double norm_type;
    bool scale_grad_by_freq;
    bool sparse;
    bool requires_grad;
    float *weight; /* [num_embeddings * embedding_dim]; 64-byte aligned when owned */
    bool owned;    /* weight allocated by emb (emb_free on free) */
    bool read_only; /* never written: lookups only (emb_storage.read_only) */
    void (*release)(void *data, void *release_ctx); /* handed-over memory, or NULL */
    void *release_ctx;
};

#endif /* EMB_EMBEDDING_INTERNAL_H */
