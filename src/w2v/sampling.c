/* The negative-sampling distribution of the trainer (src/w2v/trainer.c draws from it). */
#include "w2v_internal.h"

#include <inttypes.h>
#include <math.h>
#include <stdlib.h>

/* Walker's alias table for P(w) proportional to count^0.75. */
emb_status emb__w2v_build_alias(emb_w2v *w) {
    int64_t V = w->V;
    double *p = malloc((size_t)V * sizeof(double));
    int64_t *small = malloc((size_t)V * sizeof(int64_t)),
            *large = malloc((size_t)V * sizeof(int64_t));
    if (!p || !small || !large) {
        free(p), free(small), free(large);
        return emb__error(EMB_ERR_NOMEM,
                          "word2vec: cannot allocate the negative-sampling table "
                          "of %" PRId64 " words",
                          V);
    }
    double total = 0;
    for (int64_t i = 0; i < V; i++) total += pow((double)emb_vocab_count(w->vocab, i), 0.75);
    int64_t ns = 0, nl = 0;
    for (int64_t i = 0; i < V; i++) {
        p[i] = pow((double)emb_vocab_count(w->vocab, i), 0.75) / total * (double)V;
        if (p[i] < 1.0)
            small[ns++] = i;
        else
            large[nl++] = i;
        w->alias[i].alias = (int32_t)i;
    }
    while (ns > 0 && nl > 0) {
        int64_t s = small[--ns], l = large[nl - 1];
        w->alias[s].thr = (uint32_t)fmin(p[s] * 4294967296.0, 4294967295.0);
        w->alias[s].alias = w->alias[s].thr == UINT32_MAX ? (int32_t)s : (int32_t)l;
        p[l] = (p[l] + p[s]) - 1.0;
        if (p[l] < 1.0) {
            nl--;
            small[ns++] = l;
        }
    }
    while (nl > 0) w->alias[large[--nl]].thr = UINT32_MAX;
    while (ns > 0) w->alias[small[--ns]].thr = UINT32_MAX; /* rounding leftovers */
    free(p), free(small), free(large);
    return EMB_OK;
}
