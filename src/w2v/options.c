/* The trainer's options: defaults as the word2vec tool and gensim have them (except that
 * skip-gram shares its negatives within a window), and the checks every run's options pass
 * (include/emb/word2vec.h). */
#include "w2v_internal.h"

#include <inttypes.h>
#include <math.h>
#include <string.h>

emb_w2v_options emb_w2v_options_default(emb_w2v_model model) {
    emb_w2v_options o;
    memset(&o, 0, sizeof o);
    o.model = model;
    o.dim = 100;
    o.window = 5;
    o.negative = 5;
    o.sample = 1e-3;
    o.min_count = 5;
    o.max_vocab = 0;
    o.epochs = 5;
    o.alpha = model == EMB_W2V_CBOW ? 0.05 : 0.025;
    o.min_alpha = o.alpha * 1e-4;
    o.cbow_mean = true;
    o.threads = 0;
    o.lanes = 0;
    o.seed = 1;
    o.lowercase = false;
    o.strip_punct = false;
    o.max_sentence = 1000;
    /* one draw of negatives per window: as accurate as a draw per pair over seeds
     * (docs/word2vec.md, "Shared negatives as the default") and faster */
    o.shared_negatives = model == EMB_W2V_SKIPGRAM;
    o.compute_loss = false;
    o.minn = 3;
    o.maxn = 0;
    o.bucket = 2000000;
    o.phrases = 0;
    o.phrases_min_count = 5;
    o.phrases_threshold = 10.0;
    memcpy(o.phrases_delimiter, "_", 2);
    o.phrases_scoring = EMB_PHRASES_DEFAULT;
    return o;
}

emb_status emb_w2v_options_check(const emb_w2v_options *o) {
    if (!o) return emb__null("options");
    if (o->model != EMB_W2V_SKIPGRAM && o->model != EMB_W2V_CBOW)
        return emb__error(EMB_ERR_INVALID, "model must be skip-gram (0) or CBOW (1), got %d",
                          (int)o->model);
    if (o->dim < 1 || o->dim > (1 << 20))
        return emb__error(EMB_ERR_INVALID, "dim must be in [1, 1048576], got %" PRId64, o->dim);
    if (o->window < 1 || o->window > 1000)
        return emb__error(EMB_ERR_INVALID, "window must be in [1, 1000], got %d", o->window);
    if (o->negative < 1 || o->negative > 1000)
        return emb__error(EMB_ERR_INVALID,
                          "negative must be in [1, 1000], got %d (hierarchical softmax is not "
                          "provided: negative sampling needs at least 1 sample)",
                          o->negative);
    if (!(o->sample >= 0) || !isfinite(o->sample))
        return emb__error(EMB_ERR_INVALID, "sample must be a finite number >= 0, got %g",
                          o->sample);
    if (o->min_count < 1)
        return emb__error(EMB_ERR_INVALID, "min_count must be at least 1, got %" PRId64,
                          o->min_count);
    if (o->max_vocab < 0)
        return emb__error(EMB_ERR_INVALID, "max_vocab must be >= 0 (0: no limit), got %" PRId64,
                          o->max_vocab);
    if (o->epochs < 1)
        return emb__error(EMB_ERR_INVALID, "epochs must be at least 1, got %d", o->epochs);
    if (!(o->alpha > 0) || !(o->alpha <= 1))
        return emb__error(EMB_ERR_INVALID,
                          "alpha must be in (0, 1], got %g (the tools' defaults are 0.025 for "
                          "skip-gram and 0.05 for CBOW; larger rates make the vectors diverge)",
                          o->alpha);
    if (!(o->min_alpha >= 0) || !(o->min_alpha <= o->alpha))
        return emb__error(EMB_ERR_INVALID, "min_alpha must be in [0, alpha = %g], got %g", o->alpha,
                          o->min_alpha);
    if (o->threads < 0 || o->threads > 1024)
        return emb__error(EMB_ERR_INVALID, "threads must be in [0, 1024] (0: default), got %d",
                          o->threads);
    if (o->lanes < 0 || o->lanes > EMB__W2V_LANES_MAX)
        return emb__error(EMB_ERR_INVALID, "lanes must be in [0, %d] (0: default), got %d",
                          EMB__W2V_LANES_MAX, o->lanes);
    if (o->max_sentence < 1 || o->max_sentence > INT32_MAX)
        return emb__error(EMB_ERR_INVALID, "max_sentence must be in [1, %d], got %" PRId64,
                          INT32_MAX, o->max_sentence);
    emb_status st = emb__w2v_subword_check(o);
    return st ? st : emb__w2v_phrases_check(o);
}
