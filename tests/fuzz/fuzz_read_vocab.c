/* libFuzzer harness: vocabulary files in the word2vec tool's "word count" format
 * (emb_vocab_load, the reader of emb train --read-vocab). Oracles, besides the sanitizers: a
 * refused file leaves *out alone with a message; an accepted one has distinct, non-empty,
 * UTF-8 words with counts >= 1, writes back with emb_vocab_save and reads back the same,
 * and trains: emb_w2v_create_with_vocab over a tiny corpus either refuses with a message or
 * gives a run whose vocabulary is a subset of the file's.
 *
 * Seeds: tests/fuzz/corpus/fuzz_read_vocab (hand-written files: valid, CRLF, blanks,
 * repeated words, huge and negative counts, invalid UTF-8). */
#include "fuzz_read_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const char CORPUS[] = "red green blue red cat dog\ncat dog horse the red\nthe the blue\n";

static const char *corpus_path(void) {
    return fz_corpus(CORPUS, sizeof CORPUS - 1);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size > (1 << 16)) return 0;
    const char *path = fz_input_path(data, size);
    emb_vocab *v = (emb_vocab *)0x1;
    emb_clear_error();
    emb_status rc = emb_vocab_load(path, &v);
    if (rc) {
        fz_check_error(rc, "emb_vocab_load");
        if (v != (emb_vocab *)0x1) FINDING("emb_vocab_load changed *out on failure");
        return 0;
    }
    const int64_t n = emb_vocab_num_words(v);
    if (n < 1) FINDING("an accepted file without words");
    for (int64_t i = 0; i < n; i++) {
        size_t len;
        const char *s = emb_vocab_word(v, i, &len);
        if (!s || len == 0 || !emb__utf8_valid(s, len))
            FINDING("word %lld is empty or not UTF-8", (long long)i);
        if (emb_vocab_find(v, s, len) != i) FINDING("word %lld does not find itself", (long long)i);
        if (emb_vocab_count(v, i) < 1)
            FINDING("word %lld has count %lld", (long long)i, (long long)emb_vocab_count(v, i));
    }
    /* write back and read again (words with inner blanks cannot be written) */
    const char *out = fz_scratch("again.vocab");
    if (emb_vocab_save(v, out) == EMB_OK) {
        emb_vocab *w;
        if (emb_vocab_load(out, &w))
            FINDING("cannot read back what emb_vocab_save wrote: %s", emb_errmsg());
        if (emb_vocab_num_words(w) != n) FINDING("the round trip changed the number of words");
        for (int64_t i = 0; i < n; i++) {
            size_t a, b;
            const char *sa = emb_vocab_word(v, i, &a), *sb = emb_vocab_word(w, i, &b);
            if (a != b || memcmp(sa, sb, a) || emb_vocab_count(v, i) != emb_vocab_count(w, i))
                FINDING("the round trip changed word %lld", (long long)i);
        }
        emb_vocab_free(w);
    } else {
        fz_check_error(EMB_ERR_INVALID, "emb_vocab_save");
    }
    emb_w2v_options o = emb_w2v_options_default(EMB_W2V_SKIPGRAM);
    o.dim = 4, o.window = 2, o.negative = 2, o.min_count = 1, o.epochs = 1, o.threads = 1;
    emb_w2v *run = (emb_w2v *)0x1;
    emb_clear_error();
    rc = emb_w2v_create_with_vocab(&o, v, corpus_path(), &run);
    if (rc) {
        fz_check_error(rc, "emb_w2v_create_with_vocab");
        if (run != (emb_w2v *)0x1) FINDING("emb_w2v_create_with_vocab changed *out on failure");
    } else {
        const emb_vocab *rv = emb_w2v_vocab(run);
        for (int64_t i = 0; i < emb_vocab_num_words(rv); i++) {
            size_t len;
            const char *s = emb_vocab_word(rv, i, &len);
            if (emb_vocab_find(v, s, len) < 0) FINDING("the run has a word the file does not");
        }
        rc = emb_w2v_train(run, NULL, NULL);
        if (rc && rc != EMB_ERR_NUMERIC) FINDING("training failed: %s", emb_errmsg());
        emb_w2v_free(run);
    }
    emb_vocab_free(v);
    return 0;
}
