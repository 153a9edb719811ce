/* libFuzzer harness: the word2vec trainer's corpus reader (emb_w2v_create_from_file) and a
 * short training run on what it accepts. The first input byte picks min_count (1-4),
 * lowercasing, punctuation stripping, max_vocab, the model and lenient mode; the rest is the
 * corpus. Checks: an error leaves *out untouched and sets a message; an accepted corpus gives a
 * vocabulary sorted by count, of valid UTF-8 words without whitespace, whose counts add up
 * to the corpus tokens; a tiny training run finishes with finite vectors; a checkpoint of it
 * resumes to the same state. The same file read by three threads (ranges of one byte and
 * up) gives the same error, or the same vocabulary and token ids. Compressed data asking
 * for a window over FZ_WINDOW_MAX is skipped (fuzz_read_common.h). */
#include "fuzz_read_common.h"

#include "w2v/w2v_internal.h"
#include "fuzz_corpus_text.h"

/* Compressed inputs whose text is longer are skipped (fuzz_corpus_text.h): the texts stay
 * long enough to cross the reader's growing buffers (64 KiB, doubling to 1 MiB). */
#define FZ_CORPUS_TEXT_MAX ((size_t)1 << 20)

/* The read by three threads against the single one's result (rc, and w when rc is 0). */
static void check_threads(const emb_w2v_options *o1, const char *path, emb_status rc,
                          const emb_w2v *w) {
    char msg[512];
    snprintf(msg, sizeof msg, "%s", rc ? emb_errmsg() : "");
    emb_w2v_options o = *o1;
    o.threads = 3;
    size_t saved = emb__w2v_range_min;
    emb__w2v_range_min = 1;
    emb_w2v *p = NULL;
    emb_status rp = emb_w2v_create_from_file(&o, path, &p);
    emb__w2v_range_min = saved;
    if (rp != rc) FINDING("3 threads: status %d, one thread %d", (int)rp, (int)rc);
    if (rc) {
        if (strcmp(msg, emb_errmsg()) != 0)
            FINDING("3 threads: \"%s\", one thread \"%s\"", emb_errmsg(), msg);
        emb__error(rc, "%s", msg); /* the single read's message again, for the checks below */
        return;
    }
    const emb_vocab *a = emb_w2v_vocab(w), *b = emb_w2v_vocab(p);
    if (emb_vocab_num_words(a) != emb_vocab_num_words(b)) FINDING("3 threads: another vocabulary");
    for (int64_t i = 0; i < emb_vocab_num_words(a); i++) {
        size_t la, lb;
        const char *sa = emb_vocab_word(a, i, &la), *sb = emb_vocab_word(b, i, &lb);
        if (la != lb || memcmp(sa, sb, la) != 0 || emb_vocab_count(a, i) != emb_vocab_count(b, i))
            FINDING("3 threads: word %lld differs", (long long)i);
    }
    if (p->n_ids != w->n_ids || p->fingerprint != w->fingerprint ||
        p->skipped_invalid != w->skipped_invalid || p->skipped_long != w->skipped_long)
        FINDING("3 threads: other token ids or counts");
    emb_w2v_free(p);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1 || fz_window_over(data + 1, size - 1, FZ_WINDOW_MAX)) return 0;
    emb_w2v_options o = emb_w2v_options_default((data[0] & 64) ? EMB_W2V_CBOW : EMB_W2V_SKIPGRAM);
    o.min_count = 1 + (data[0] & 3);
    o.lowercase = data[0] & 4;
    o.strip_punct = data[0] & 8;
    o.max_vocab = (data[0] & 16) ? 3 : 0;
    o.shared_negatives = data[0] & 32;
    o.lenient = data[0] & 128;
    o.dim = 4;
    o.window = 2;
    o.negative = 2;
    o.epochs = 1;
    o.threads = 1;
    o.max_sentence = 7;
    const char *path = fz_input_path(data + 1, size - 1);
    if (fz_compressed(data + 1, size - 1) && fz_text_longer_than(path, FZ_CORPUS_TEXT_MAX))
        return 0;
    emb_w2v *w = (emb_w2v *)0x1;
    emb_clear_error();
    emb_status rc = emb_w2v_create_from_file(&o, path, &w);
    check_threads(&o, path, rc, w);
    if (rc) {
        fz_check_error(rc, "emb_w2v_create_from_file");
        if (w != (emb_w2v *)0x1) FINDING("emb_w2v_create_from_file changed *out on failure");
        return 0;
    }
    const emb_vocab *v = emb_w2v_vocab(w);
    int64_t n = emb_vocab_num_words(v), total = 0;
    if (n < 1) FINDING("an accepted corpus with an empty vocabulary");
    if (o.max_vocab && n > o.max_vocab) FINDING("max_vocab not applied");
    for (int64_t i = 0; i < n; i++) {
        size_t len;
        const char *s = emb_vocab_word(v, i, &len);
        int64_t c = emb_vocab_count(v, i);
        if (!s || len == 0 || !emb__utf8_valid(s, len))
            FINDING("word %lld is empty or not UTF-8", (long long)i);
        for (size_t k = 0; k < len; k++)
            if (s[k] == ' ' || s[k] == '\n' || s[k] == '\t' || s[k] == '\r')
                FINDING("word %lld holds whitespace", (long long)i);
        if (c < o.min_count)
            FINDING("word %lld seen %lld < min_count times", (long long)i, (long long)c);
        if (i > 0 && c > emb_vocab_count(v, i - 1)) FINDING("vocabulary not sorted by count");
        total += c;
    }
    if (total != emb_w2v_corpus_tokens(w))
        FINDING("counts add up to %lld, corpus has %lld tokens", (long long)total,
                (long long)emb_w2v_corpus_tokens(w));
    if (emb_w2v_train(w, NULL, NULL) != EMB_OK) FINDING("training failed: %s", emb_errmsg());
    emb_tensor t;
    if (emb_w2v_vectors(w, &t) != EMB_OK) FINDING("no vectors");
    const float *x = t.data;
    for (int64_t i = 0; i < emb_tensor_numel(&t); i++)
        if (!isfinite(x[i])) FINDING("a vector is not finite");
    const char *ck = fz_scratch("corpus.ckpt");
    if (emb_w2v_save_checkpoint(w, ck) != EMB_OK) FINDING("checkpoint failed: %s", emb_errmsg());
    emb_w2v *r = NULL;
    if (emb_w2v_resume(&o, path, ck, &r) != EMB_OK) FINDING("resume failed: %s", emb_errmsg());
    emb_tensor t2;
    emb_w2v_vectors(r, &t2);
    if (memcmp(t.data, t2.data, emb_tensor_nbytes(&t)) != 0) FINDING("resumed vectors differ");
    if (emb_w2v_words_done(r) != emb_w2v_words_done(w)) FINDING("resumed progress differs");
    emb_w2v_free(r);
    emb_w2v_free(w);
    return 0;
}
