/* libFuzzer harness: phrase detection (include/emb/phrases.h) over arbitrary text. The
 * first byte picks min_count (1-4), a threshold from a table and (its top bit) the npmi
 * scorer; the rest is the corpus, read as every corpus is (a leading byte-order mark
 * dropped, compressed data decompressed). Oracles, besides the sanitizers: a refused corpus
 * leaves *out alone with a message; an accepted plain one is rewritten with as many lines as
 * it has, and the tokens written plus the phrases joined equal the tokens read.
 * Seeds: tests/fuzz/corpus/fuzz_phrases (small texts with repeated pairs, CRLF, no newline
 * at the end, blank lines, NUL and non-UTF-8 bytes).
 * Compressed inputs that expand to more than FZ_PHRASES_TEXT_MAX bytes of text are skipped
 * (the text is read to that length once to know): both passes are linear in the text, and a
 * corpus grown with such inputs (600 bytes of zstd that expand to 11 MB took 3.8 s here) ran
 * 40 inputs a second instead of thousands. Longer texts from compressed data are
 * fuzz_read_corpus's (which bounds them with RLIMIT_FSIZE).
 * So are inputs whose compressed data asks for a window over FZ_WINDOW_MAX
 * (fz_window_over, fuzz_read_common.h). */
#include "fuzz_read_common.h"

#include "w2v/w2v_internal.h"
#include "fuzz_corpus_text.h"

#define FZ_PHRASES_TEXT_MAX ((size_t)1 << 18)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int64_t count_tokens(const char *s, size_t n, int64_t *lines) {
    int64_t t = 0;
    bool in = false;
    *lines = 0;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        bool blank = c == ' ' || c == '\t' || c == '\r' || c == '\v' || c == '\f' || c == '\n';
        if (!blank && !in) t++;
        in = !blank;
        if (c == '\n') (*lines)++;
    }
    if (n > 0 && s[n - 1] != '\n') (*lines)++;
    return t;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1 || size > (1 << 14)) return 0;
    static const double thresholds[] = {-1e300, -1, 0, 0.5, 10, 1e300};
    emb_phrases_options o = emb_phrases_options_default();
    o.min_count = 1 + (data[0] & 3);
    o.threshold = thresholds[((data[0] >> 2) & 31) % 6];
    if (data[0] & 0x80) o.scoring = EMB_PHRASES_NPMI;
    const char *path = fz_input_path(data + 1, size - 1);
    /* the text as the reader gives it: without a leading byte-order mark; compressed data
     * (its magic bytes first) is not compared */
    const char *text = (const char *)data + 1;
    size_t tn = size - 1;
    const bool plain = !fz_compressed(data + 1, tn);
    if (!plain && fz_window_over(data + 1, tn, FZ_WINDOW_MAX)) return 0;
    if (!plain && fz_text_longer_than(path, FZ_PHRASES_TEXT_MAX)) return 0;
    emb_phrases *p = (emb_phrases *)0x1;
    emb_clear_error();
    emb_status rc = emb_phrases_learn(path, &o, &p);
    if (rc) {
        fz_check_error(rc, "emb_phrases_learn");
        if (p != (emb_phrases *)0x1) FINDING("emb_phrases_learn changed *out on failure");
        return 0;
    }
    char *buf = NULL;
    size_t len = 0;
    FILE *out = open_memstream(&buf, &len);
    if (!out) FINDING("open_memstream failed");
    int64_t joined = -1;
    rc = emb_phrases_apply(p, path, out, &joined);
    fclose(out);
    if (rc) FINDING("emb_phrases_apply failed on what learn read: %s", emb_errmsg());
    if (tn >= 3 && memcmp(text, "\xEF\xBB\xBF", 3) == 0) text += 3, tn -= 3;
    int64_t in_lines, out_lines;
    int64_t in_tokens = count_tokens(text, tn, &in_lines);
    int64_t out_tokens = count_tokens(buf, len, &out_lines);
    if (joined < 0) FINDING("%lld phrases joined", (long long)joined);
    if (plain && out_lines != in_lines)
        FINDING("%lld lines in, %lld out", (long long)in_lines, (long long)out_lines);
    if (plain && out_tokens + joined != in_tokens)
        FINDING("%lld tokens in, %lld out with %lld phrases", (long long)in_tokens,
                (long long)out_tokens, (long long)joined);
    free(buf);
    emb_phrases_free(p);
    return 0;
}
