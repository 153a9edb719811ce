/* src/quant/quant_face.h: what quant shows the modules above it (formats): the reader of a
 * quantized table for emb_vectors_read. quant's other headers are its own. */
#ifndef EMB_QUANT_FACE_H
#define EMB_QUANT_FACE_H

#include "internal.h"

#include <emb/io.h>

/* emb_vectors_read of an open safetensors file holding an int8/int4 table: the first
 * `limit` rows (0: all) dequantized, the words, file_dtype uint8. */
emb_status emb__qtable_read_vectors(const emb_safetensors *st, const char *path, int64_t limit,
                                    emb_vectors *out);

#endif /* EMB_QUANT_FACE_H */
