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
 * So are inputs with a zstd frame (any of them: frames follow each other) or an xz stream
 * (its first block) whose header asks for a window (dictionary) over FZ_PHRASES_WINDOW_MAX: the
 * decoder allocates the window the header names, up to zstd's 128 MiB and xz's 1.5 GiB, and under
 * AddressSanitizer each allocation and release of it touches its shadow; a 14-byte frame asking for
 * 64 MiB took 0.1 s per decompression, three per input, and such inputs were half of the harness's
 * time (about 300 inputs a second). */
#include "fuzz_read_common.h"

#include "w2v/w2v_internal.h"

#define FZ_PHRASES_TEXT_MAX   ((size_t)1 << 18)
#define FZ_PHRASES_WINDOW_MAX ((uint64_t)1 << 20)

/* The window one zstd frame's header asks for (RFC 8878 3.1.1.1; its content size when the
 * frame is one segment), the header's size in *hdr; 0 when the header is cut short. */
static uint64_t zstd_frame_window(const uint8_t *p, size_t n, size_t *hdr) {
    if (n < 5) return 0;
    const unsigned fhd = p[4], fcs_flag = fhd >> 6, single = (fhd >> 5) & 1;
    static const unsigned did_bytes[4] = {0, 1, 2, 4}, fcs_bytes[4] = {0, 2, 4, 8};
    size_t at = 5;
    uint64_t window = 0;
    if (!single) {
        if (n < 6) return 0;
        const unsigned exp = p[5] >> 3, mantissa = p[5] & 7;
        const uint64_t base = (uint64_t)1 << (10 + exp);
        window = base + base / 8 * mantissa;
        at = 6;
    }
    at += did_bytes[fhd & 3];
    const unsigned fb = fcs_flag == 0 && single ? 1 : fcs_bytes[fcs_flag];
    if (n < at + fb) return 0;
    uint64_t fcs = 0;
    for (unsigned k = 0; k < fb; k++) fcs |= (uint64_t)p[at + k] << (8 * k);
    *hdr = at + fb;
    return single ? (fb == 2 ? fcs + 256 : fcs) : window;
}

/* The largest window the zstd frames of p ask for (skippable frames passed over, the walk
 * stopping where a frame is cut short or unknown): the decoder allocates each frame's. */
static uint64_t zstd_window(const uint8_t *p, size_t n) {
    uint64_t most = 0;
    size_t at = 0;
    while (n - at >= 8) {
        const uint8_t *f = p + at;
        if ((f[0] & 0xF0) == 0x50 && memcmp(f + 1, "\x2a\x4d\x18", 3) == 0) { /* skippable */
            const uint64_t len =
                f[4] | (uint64_t)f[5] << 8 | (uint64_t)f[6] << 16 | (uint64_t)f[7] << 24;
            if (len > n - at - 8) break;
            at += 8 + (size_t)len;
            continue;
        }
        if (memcmp(f, "\x28\xb5\x2f\xfd", 4) != 0) break;
        size_t hdr = 0;
        const uint64_t w = zstd_frame_window(f, n - at, &hdr);
        if (hdr == 0) break;
        if (w > most) most = w;
        at += hdr;
        for (bool last = false; !last;) { /* the blocks: 3-byte headers */
            if (n - at < 3) return most;
            const uint32_t bh = p[at] | (uint32_t)p[at + 1] << 8 | (uint32_t)p[at + 2] << 16;
            const unsigned type = bh >> 1 & 3;
            if (type == 3) return most;                  /* reserved: the decoder stops there */
            const size_t size = type == 1 ? 1 : bh >> 3; /* RLE: one byte, repeated */
            last = bh & 1;
            if (size > n - at - 3) return most;
            at += 3 + size;
        }
        if (f[4] >> 2 & 1) at += 4; /* the content checksum */
        if (at > n) break;
    }
    return most;
}

/* The dictionary the first LZMA2 filter of an xz stream's first block asks for (the .xz
 * format 1.2.0, 3.1 and 5.3.1), 0 when it is not found. */
static uint64_t xz_window(const uint8_t *p, size_t n) {
    size_t at = 12; /* the stream header */
    if (n < at + 2 || memcmp(p, "\xfd\x37zXZ", 6) != 0) return 0;
    const unsigned flags = p[at + 1];
    at += 2;
    for (int field = 0; field < 2; field++) { /* compressed and uncompressed sizes */
        if (!(flags & (0x40 << field))) continue;
        while (at < n && (p[at] & 0x80)) at++;
        at++;
    }
    if (at + 3 > n || p[at] != 0x21 || p[at + 1] != 1) return 0; /* LZMA2, 1 property byte */
    const unsigned b = p[at + 2];
    if (b > 40) return 0;
    return b == 40 ? 0xFFFFFFFFu : (uint64_t)(2 | (b & 1)) << (b / 2 + 11);
}

/* Whether the input at path gives more than cap bytes of text (read through the corpus
 * reader, as the learner reads it; an input it refuses is not skipped). */
static bool text_longer_than(const char *path, size_t cap) {
    emb__corpus_src *s = NULL;
    const char *const paths[1] = {path};
    bool have = false, longer = false;
    if (emb__corpus_open_paths(&s, paths, 1) == EMB_OK &&
        emb__corpus_next_file(s, &have) == EMB_OK && have) {
        static char buf[1 << 16];
        size_t total = 0, got = 1;
        while (got > 0 && total <= cap && emb__corpus_read(s, buf, sizeof buf, &got) == EMB_OK)
            total += got;
        longer = total > cap;
    }
    emb__corpus_close(s);
    emb_clear_error();
    return longer;
}

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
    static const char *const magic[] = {"\x1f\x8b", "BZh", "\xfd\x37zXZ", "\x28\xb5\x2f\xfd"};
    bool plain = true;
    for (int k = 0; k < 4; k++)
        plain = plain && !(tn >= strlen(magic[k]) && memcmp(text, magic[k], strlen(magic[k])) == 0);
    const uint8_t *c = data + 1;
    if (!plain &&
        (zstd_window(c, tn) > FZ_PHRASES_WINDOW_MAX || xz_window(c, tn) > FZ_PHRASES_WINDOW_MAX))
        return 0;
    if (!plain && text_longer_than(path, FZ_PHRASES_TEXT_MAX)) return 0;
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
