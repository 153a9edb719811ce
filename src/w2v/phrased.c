/* Phrases over corpus files (include/emb/phrases.h: the functions that take paths), and
 * training on the phrased text of a corpus (include/emb/word2vec.h, emb_w2v_options.phrases).
 * The files are read by the corpus reader that training uses (corpus_stream.c): directories,
 * compressed data and stdin alike; the phrases themselves are src/text/phrases.c. */
#include "w2v_internal.h"
#include "text/phrases_stream.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

static emb_phrases_options phrases_options(const emb_w2v_options *o) {
    emb_phrases_options p = emb_phrases_options_default();
    p.min_count = o->phrases_min_count;
    p.threshold = o->phrases_threshold;
    p.delimiter = o->phrases_delimiter;
    p.scoring = (emb_phrases_scoring)o->phrases_scoring;
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

/* ---- a corpus through passes of phrases ---- */

/* The text of a corpus through the readers of the first `layers` models. */
typedef struct {
    emb__corpus_src *src;
    char name[256];
    FILE *text;
    FILE *layer[EMB__PHRASES_MAX_PASSES];
    emb_phrases *p[EMB__PHRASES_MAX_PASSES];
    int layers, learned;
} phrased;

static void close_layers(phrased *ph) {
    for (int j = ph->layers - 1; j >= 0; j--) fclose(ph->layer[j]);
    if (ph->text) fclose(ph->text);
    ph->text = NULL;
    ph->layers = 0;
}

static void phrased_close(phrased *ph) {
    close_layers(ph);
    for (int j = 0; j < ph->learned; j++) emb_phrases_free(ph->p[j]);
    ph->learned = 0;
    emb__corpus_close(ph->src);
    ph->src = NULL;
}

/* Opens the corpus (stdin copied when it is to be read more than once). */
static emb_status phrased_init(phrased *ph, const char *const *paths, size_t n, bool again) {
    memset(ph, 0, sizeof *ph);
    if (!paths) return emb__null("paths");
    emb_status st = emb__corpus_open_paths(&ph->src, paths, n);
    if (st) return st;
    emb__corpus_label(paths, n, ph->name, sizeof ph->name);
    if (again && (st = emb__corpus_spool_stdin(ph->src))) phrased_close(ph);
    return st;
}

/* The corpus's text from its start, through the first k models. */
static emb_status open_layers(phrased *ph, int k, bool first, FILE **out) {
    emb_status st = first ? EMB_OK : emb__corpus_rewind(ph->src);
    if (st) return st;
    if (!(ph->text = emb__corpus_text(ph->src))) return emb__error(EMB_ERR_NOMEM, "out of memory");
    FILE *f = ph->text;
    for (int j = 0; j < k; j++) {
        if (!(ph->layer[j] = emb__phrases_reader(f, ph->p[j])))
            return emb__error(EMB_ERR_NOMEM, "out of memory");
        f = ph->layer[j];
        ph->layers = j + 1;
    }
    *out = f;
    return EMB_OK;
}

/* A reading error of the text is the corpus reader's own (the file and the offset). */
static emb_status reader_status(const phrased *ph, emb_status st) {
    if (st == EMB_OK) return st;
    emb_status src = emb__corpus_failed(ph->src);
    return src ? src : st;
}

/* Learns `passes` models, pass k from the text of the passes before it. */
static emb_status learn_passes(phrased *ph, const emb_phrases_options *opts, int passes) {
    emb_status st = EMB_OK;
    for (int k = 0; k < passes && st == EMB_OK; k++) {
        FILE *f = NULL;
        if ((st = open_layers(ph, k, k == 0, &f)) == EMB_OK)
            st = reader_status(ph, emb__phrases_learn_stream(f, ph->name, opts, &ph->p[k]));
        if (st == EMB_OK) ph->learned = k + 1;
        close_layers(ph);
    }
    return st;
}

emb_status emb__w2v_create_phrased(const emb_w2v_options *opts, const char *const *paths, size_t n,
                                   emb_w2v **out) {
    phrased ph;
    emb_status st = phrased_init(&ph, paths, n, true);
    if (st) return st;
    const emb_phrases_options p = phrases_options(opts);
    FILE *f = NULL;
    if ((st = learn_passes(&ph, &p, opts->phrases)) == EMB_OK &&
        (st = open_layers(&ph, opts->phrases, false, &f)) == EMB_OK)
        st = reader_status(&ph, emb__w2v_create_stream(opts, f, ph.name, out));
    if (st == EMB_OK) { /* the files read, not the phrased stream */
        emb__corpus_files_free(&(*out)->files);
        emb__corpus_take_files(ph.src, &(*out)->files);
    }
    phrased_close(&ph);
    return st;
}

emb_status emb__w2v_no_phrases(const emb_w2v_options *o, const char *what) {
    if (o->phrases > 0)
        return emb__error(EMB_ERR_INVALID,
                          "phrases (options.phrases = %d) are not provided with %s: "
                          "emb_w2v_create_from_files applies them",
                          o->phrases, what);
    return EMB_OK;
}

/* ---- include/emb/phrases.h over files ---- */

emb_status emb_phrases_learn_files(const char *const *paths, size_t n,
                                   const emb_phrases_options *opts, emb_phrases **out) {
    if (!opts) return emb__null("options");
    if (!out) return emb__null("out");
    emb_status st = emb__phrases_check(opts);
    if (st) return st;
    phrased ph;
    if ((st = phrased_init(&ph, paths, n, false))) return st;
    if ((st = learn_passes(&ph, opts, 1)) == EMB_OK) {
        *out = ph.p[0];
        ph.learned = 0;
    }
    phrased_close(&ph);
    return st;
}

emb_status emb_phrases_learn(const char *path, const emb_phrases_options *opts, emb_phrases **out) {
    if (!path) return emb__null("path");
    return emb_phrases_learn_files(&path, 1, opts, out);
}

/* Writes the text of the open corpus through p. */
static emb_status apply_open(phrased *ph, const emb_phrases *p, bool first, FILE *out,
                             int64_t *n_phrases) {
    FILE *f = NULL;
    emb_status st = open_layers(ph, 0, first, &f);
    if (st == EMB_OK)
        st = reader_status(ph, emb__phrases_apply_stream(p, f, ph->name, out, n_phrases));
    close_layers(ph);
    return st;
}

emb_status emb_phrases_apply_files(const emb_phrases *p, const char *const *paths, size_t n,
                                   FILE *out, int64_t *n_phrases) {
    if (!p) return emb__null("phrases");
    if (!out) return emb__null("out");
    phrased ph;
    emb_status st = phrased_init(&ph, paths, n, false);
    if (st) return st;
    st = apply_open(&ph, p, true, out, n_phrases);
    phrased_close(&ph);
    return st;
}

emb_status emb_phrases_apply(const emb_phrases *p, const char *path, FILE *out,
                             int64_t *n_phrases) {
    if (!path) return emb__null("path");
    return emb_phrases_apply_files(p, &path, 1, out, n_phrases);
}

emb_status emb_phrases_rewrite_files(const char *const *paths, size_t n,
                                     const emb_phrases_options *opts, FILE *out,
                                     int64_t *n_phrases) {
    if (!opts) return emb__null("options");
    if (!out) return emb__null("out");
    emb_status st = emb__phrases_check(opts);
    if (st) return st;
    phrased ph;
    if ((st = phrased_init(&ph, paths, n, true))) return st;
    if ((st = learn_passes(&ph, opts, 1)) == EMB_OK)
        st = apply_open(&ph, ph.p[0], false, out, n_phrases);
    phrased_close(&ph);
    return st;
}
