/* src/text/phrases_stream.h: phrases over streams — learning from one, writing one's phrased
 * text, and the phrased text as a stream read while the vocabulary is built (the corpus
 * files are opened in src/w2v/phrased.c). */
#ifndef EMB_PHRASES_STREAM_H
#define EMB_PHRASES_STREAM_H

#include <emb/phrases.h>

#include <stdio.h>

/* The most passes of phrases over one corpus (each joins pairs of the previous one's
 * tokens: 2 passes give phrases of up to 4 words). */
#define EMB__PHRASES_MAX_PASSES 8

/* Checks the options as emb_phrases_learn does. Errors: EMB_ERR_INVALID. */
emb_status emb__phrases_check(const emb_phrases_options *opts);

/* emb_phrases_learn over a stream read to its end; name is used in messages. */
emb_status emb__phrases_learn_stream(FILE *f, const char *name, const emb_phrases_options *opts,
                                     emb_phrases **out);

/* emb_phrases_apply over a stream read to its end; name is used in messages. */
emb_status emb__phrases_apply_stream(const emb_phrases *p, FILE *in, const char *name, FILE *out,
                                     int64_t *n_phrases);

/* A stream of the text of src as emb_phrases_apply writes it (NULL when out of memory).
 * Closing it does not close src; p and src must outlive it. A failure reading src, or
 * memory running out, is a read error of the stream (ferror, errno). */
FILE *emb__phrases_reader(FILE *src, const emb_phrases *p);

#endif /* EMB_PHRASES_STREAM_H */
