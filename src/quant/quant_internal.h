/* src/quant/quant_internal.h: what the files of src/quant share (qtable.c, qfile.c,
 * qtrain.c); private to the module. Their row kernels are src/kernels/qkernels.h, chosen by
 * emb__qkernels() (src/kernels/dispatch.c). */
#ifndef EMB_QUANT_INTERNAL_H
#define EMB_QUANT_INTERNAL_H

#include <emb/quant.h>

#include "kernels/dispatch.h"
#include "kernels/qkernels.h"

#include <stdint.h>

/* emb_quantize_rows, naming rows in messages from row0 on (a batch of a larger table). */
emb_status emb__quantize_rows_from(emb_qtype qtype, const float *src, int64_t rows, int64_t dim,
                                   void *dst, size_t dst_bytes, int64_t row0);

/* The table's rows for writing, or NULL when its storage is read-only (qtable.c). */
uint8_t *emb__qtable_rows_mut(emb_qtable *q);
/* Marks a table whose rows emb allocated and read in (emb_qtable_load): emb_qtable_prefetch
 * has nothing to do for it. */
void emb__qtable_set_in_memory(emb_qtable *q);

#endif /* EMB_QUANT_INTERNAL_H */
