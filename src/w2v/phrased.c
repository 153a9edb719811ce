/* Training on the phrased text of a corpus (include/emb/word2vec.h, emb_w2v_options.phrases;
 * the phrases: src/text/phrases.c). */
#include "w2v_internal.h"
#include "text/phrases_stream.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

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

/* Phrases read plain text: a directory, stdin or compressed data is refused by name. */
static emb_status plain_file(const char *path) {
    if (strcmp(path, "-") == 0)
        return emb__error(EMB_ERR_INVALID, "phrases read the corpus more than once: give it as "
                                           "a file, not stdin");
    struct stat sb;
    if (stat(path, &sb) != 0)
        return emb__error(EMB_ERR_IO, "cannot open %s: %s", path, strerror(errno));
    if (!S_ISREG(sb.st_mode))
        return emb__error(EMB_ERR_IO, "%s: is %s; phrases read one plain text file", path,
                          S_ISDIR(sb.st_mode) ? "a directory" : "not a regular file");
    unsigned char m[6] = {0};
    FILE *f = fopen(path, "rb");
    if (!f) return emb__error(EMB_ERR_IO, "cannot open %s: %s", path, strerror(errno));
    const size_t got = fread(m, 1, sizeof m, f);
    fclose(f);
    const bool packed = (got >= 2 && m[0] == 0x1f && m[1] == 0x8b) ||
                        (got >= 3 && !memcmp(m, "BZh", 3)) ||
                        (got >= 6 && !memcmp(m,
                                             "\xfd"
                                             "7zXZ\0",
                                             6)) ||
                        (got >= 4 && !memcmp(m, "\x28\xb5\x2f\xfd", 4));
    if (packed)
        return emb__error(EMB_ERR_UNSUPPORTED,
                          "%s is compressed: phrases read plain text (decompress it first)", path);
    return EMB_OK;
}

emb_status emb__w2v_create_phrased(const emb_w2v_options *opts, const char *path, emb_w2v **out) {
    emb_status st0 = plain_file(path);
    if (st0) return st0;
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
