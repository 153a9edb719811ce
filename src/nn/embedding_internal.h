/* src/nn/embedding_internal.h: the emb_embedding struct, shared by the nn sources only (the
 * modules above nn use nn_face.h). */
#ifndef EMB_EMBEDDING_INTERNAL_H
#define EMB_EMBEDDING_INTERNAL_H

#include "nn_face.h"

struct emb_embedding {
    int64_t num_embeddings;
    int64_t embedding_dim;
    int64_t padding_idx; /* normalised, >= 0, or EMB_PADDING_NONE */
    double max_norm;     /* INFINITY: none */
    double norm_type;
    bool scale_grad_by_freq;
    bool sparse;
    bool requires_grad;
    float *weight;  /* [num_embeddings * embedding_dim]; 64-byte aligned when owned */
    bool owned;     /* weight allocated by emb (emb__free on free) */
    bool read_only; /* never written: lookups only (emb_storage.read_only) */
    void (*release)(void *data, void *release_ctx); /* handed-over memory, or NULL */
    void *release_ctx;
};

/* Which temporaries the dense backward and the max_norm renorm use. AUTO (the default)
 * picks by shape; TABLE forces the table-sized ones (counting sort over V rows, V-bit
 * bitmap), BATCH the batch-sized ones (radix sort of the batch) wherever they apply. Both
 * give the same bits; the unit tests and bench/bench_temporaries.c switch between them.
 * Not thread-safe: set it before the calls it should affect. */
enum { EMB__TEMP_AUTO = 0, EMB__TEMP_TABLE = 1, EMB__TEMP_BATCH = 2, EMB__TEMP_ACC = 3 };
/* EMB__TEMP_ACC forces the dense backward's table of row accumulators where it applies
 * (no scale_grad_by_freq; see backward_accumulate in src/nn/embedding_backward.c). */
void emb__set_temp_mode(int mode);
int emb__temp_mode(void);

#endif /* EMB_EMBEDDING_INTERNAL_H */
