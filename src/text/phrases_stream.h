/* src/text/phrases_stream.h: phrases for the word2vec trainer — learning from a stream,
 * and the phrased text of a corpus as a stream read while the vocabulary is built. */
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

/* A stream of the text of src as emb_phrases_apply writes it (NULL when out of memory).
 * Closing it does not close src; p and src must outlive it. A failure reading src, or
 * memory running out, is a read error of the stream (ferror, errno). */
FILE *emb__phrases_reader(FILE *src, const emb_phrases *p);

/* A corpus read through `passes` rounds of phrases: pass k learns from the text the passes
 * before it give, reading the file once; then the returned stream applies every pass line by
 * line. emb__phrased_close closes the stream and frees the models. */
typedef struct emb__phrased {
    FILE *base;
    FILE *layer[EMB__PHRASES_MAX_PASSES];
    emb_phrases *p[EMB__PHRASES_MAX_PASSES];
    int layers, learned;
} emb__phrased;

/* Errors (nothing left open): EMB_ERR_IO (the file's name and the system's reason),
 * EMB_ERR_FORMAT, EMB_ERR_NOMEM, EMB_ERR_INVALID (as emb_phrases_learn). */
emb_status emb__phrased_open(const char *path, const emb_phrases_options *opts, int passes,
                             emb__phrased *ph, FILE **out);
void emb__phrased_close(emb__phrased *ph);

#endif /* EMB_PHRASES_STREAM_H */
