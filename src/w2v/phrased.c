/* Training on the phrased text of a corpus (include/emb/word2vec.h, emb_w2v_options.phrases;
 * the phrases: src/text/phrases.c). */
#include "w2v_internal.h"
#include "text/phrases_stream.h"

#include <stdio.h>
#include <string.h>

static emb_phrases_options phrases_options(const emb_w2v_options *o) {
    emb_phrases_options p = emb_phrases_options_default();
    p.min_count = o->phrases_min_count;
    p.threshold = o->phrases_threshold;
    p.delimiter = o->phrases_delimiter;
    return p;
}

emb_status emb__w2v_phrases_check(const emb_w2v_options *o) {
    if (o->phrases < 0 || o->phrases > EMB__PHRASES_MAX_PASSES)
        return emb__error(EMB_ERR_INVALID, "phrases must be in [0, %d] (passes; 0: off), got %d",
                          EMB__PHRASES_MAX_PASSES, o->phrases);
    if (o->phrases == 0) return EMB_OK;
    if (!memchr(o->phrases_delimiter, 0, sizeof o->phrases_delimiter))
        return emb__error(EMB_ERR_INVALID, "phrases_delimiter must end with a 0 byte");
    const emb_phrases_options p = phrases_options(o);
    emb_status st = emb__phrases_check(&p);
    if (st) {
        char why[256];
        snprintf(why, sizeof why, "%s", emb_errmsg());
        return emb__error(st, "phrases: %s", why);
    }
    return EMB_OK;
}

emb_status emb__w2v_create_phrased(const emb_w2v_options *opts, const char *path, emb_w2v **out) {
    const emb_phrases_options p = phrases_options(opts);
    emb__phrased ph;
    FILE *f;
    emb_status st = emb__phrased_open(path, &p, opts->phrases, &ph, &f);
    if (st) return st;
    st = emb__w2v_create_stream(opts, f, path, out);
    emb__phrased_close(&ph);
    return st;
}

emb_status emb__w2v_no_phrases(const emb_w2v_options *o, const char *what) {
    if (o->phrases > 0)
        return emb__error(EMB_ERR_INVALID,
                          "phrases (options.phrases = %d) are not provided with %s: "
                          "emb_w2v_create_from_file applies them",
                          o->phrases, what);
    return EMB_OK;
}
