/* The word2vec tool's vocabulary files ("word count" lines): emb_vocab_save and
 * emb_vocab_load (include/emb/vocab.h). */
#include <emb/vocab.h>

#include "internal.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

emb_status emb_vocab_save(const emb_vocab *v, const char *path) {
    if (!v) return emb__null("vocab");
    if (!path) return emb__null("path");
    const int64_t n = emb_vocab_num_words(v);
    for (int64_t i = 0; i < n; i++) {
        size_t len;
        const char *w = emb_vocab_word(v, i, &len);
        for (size_t k = 0; k < len; k++)
            if (w[k] == ' ' || w[k] == '\t' || w[k] == '\n' || w[k] == '\r')
                return emb__error(EMB_ERR_INVALID,
                                  "%s: word %" PRId64 " holds a blank or a line break, which a "
                                  "\"word count\" line cannot hold",
                                  path, i);
    }
    emb__writer wr;
    emb_status st = emb__writer_open(&wr, path);
    if (st) return st;
    for (int64_t i = 0; i < n && !wr.status; i++) {
        size_t len;
        const char *w = emb_vocab_word(v, i, &len);
        char num[32];
        int k = snprintf(num, sizeof num, " %" PRId64 "\n", emb_vocab_count(v, i));
        emb__writer_put(&wr, w, len);
        emb__writer_put(&wr, num, (size_t)k);
    }
    if ((st = wr.status)) {
        emb__writer_abort(&wr);
        return st;
    }
    return emb__writer_commit(&wr);
}

emb_status emb_vocab_load(const char *path, emb_vocab **out) {
    if (!path) return emb__null("path");
    if (!out) return emb__null("out");
    emb__file f;
    emb_status st = emb__file_open(path, &f, EMB__FILE_READ);
    if (st) return st;
    emb_vocab *v = NULL;
    if ((st = emb_vocab_create(&v))) {
        emb__file_close(&f);
        return st;
    }
    /* an empty file has no data pointer: no arithmetic on it */
    const unsigned char *p = f.data, *end = f.size ? f.data + f.size : f.data;
    int64_t line = 0;
    while (p < end && st == EMB_OK) {
        const unsigned char *nl = memchr(p, '\n', (size_t)(end - p));
        const unsigned char *ls = p, *le = nl ? nl : end;
        p = nl ? nl + 1 : end;
        line++;
        const long long at = (long long)(ls - f.data);
        if (le > ls && le[-1] == '\r') le--;
        while (le > ls && (le[-1] == ' ' || le[-1] == '\t')) le--;
        if (le == ls) continue; /* a blank line */
        const unsigned char *sp = le;
        while (sp > ls && sp[-1] != ' ' && sp[-1] != '\t') sp--;
        const unsigned char *we = sp;
        while (we > ls && (we[-1] == ' ' || we[-1] == '\t')) we--;
        int64_t count;
        if (we == ls || sp == le) {
            st = emb__error(EMB_ERR_FORMAT,
                            "%s: line %" PRId64 " (byte offset %lld): expected \"word count\"",
                            path, line, at);
        } else if (!emb__parse_count((const char *)sp, (size_t)(le - sp), &count) || count < 1) {
            st = emb__error(EMB_ERR_FORMAT,
                            "%s: line %" PRId64
                            " (byte offset %lld): the count \"%.*s\" is not a number in [1, "
                            "2^63)",
                            path, line, at, (int)(le - sp > 30 ? 30 : le - sp), (const char *)sp);
        } else if ((size_t)(we - ls) > EMB_VOCAB_MAX_WORD) {
            st = emb__error(EMB_ERR_FORMAT,
                            "%s: line %" PRId64 " (byte offset %lld): a word of %zu bytes (the "
                            "limit is %d)",
                            path, line, at, (size_t)(we - ls), EMB_VOCAB_MAX_WORD);
        } else if (!emb__utf8_valid((const char *)ls, (size_t)(we - ls))) {
            st = emb__error(EMB_ERR_FORMAT,
                            "%s: line %" PRId64 " (byte offset %lld): the word is not valid UTF-8",
                            path, line, at);
        } else {
            bool added;
            st = emb_vocab_add(v, (const char *)ls, (size_t)(we - ls), count, NULL, &added);
            if (st == EMB_OK && !added)
                st = emb__error(EMB_ERR_FORMAT,
                                "%s: line %" PRId64 " (byte offset %lld): the word repeats an "
                                "earlier one",
                                path, line, at);
        }
    }
    emb__file_close(&f);
    if (st == EMB_OK && emb_vocab_num_words(v) == 0)
        st = emb__error(EMB_ERR_FORMAT, "%s: no \"word count\" line", path);
    if (st) {
        emb_vocab_free(v);
        return st;
    }
    *out = v;
    return EMB_OK;
}
