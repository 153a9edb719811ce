/* Shared by the file-reader fuzzers: the input as a file (a memfd, no disk), a scratch
 * folder on tmpfs for write-back round trips, and the checks every reader must pass. */
#ifndef EMB_FUZZ_READ_COMMON_H
#define EMB_FUZZ_READ_COMMON_H

#define _GNU_SOURCE
#include <emb/emb.h>

#include "internal.h" /* oracles: emb__utf8_valid, emb__tensor_same_shape */

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define FINDING(...)                                                                               \
    do {                                                                                           \
        fprintf(stderr, "*** emb fuzz finding: " __VA_ARGS__);                                     \
        fprintf(stderr, "\n");                                                                     \
        abort();                                                                                   \
    } while (0)

/* The folder for scratch files: /dev/shm (tmpfs) when writable, else /tmp. */
static inline const char *fz_tmp_root(void) {
    return access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";
}

/* The fuzz input as a readable path. The first call also points TMPDIR at tmpfs, where the
 * word2vec reader spools its token ids: a file created and removed per input costs a
 * journalled create and unlink on a disk file system, nothing on tmpfs (same code path). */
static inline const char *fz_input_path(const uint8_t *data, size_t size) {
    static int fd = -1;
    static char path[64];
    if (fd < 0) {
        setenv("TMPDIR", fz_tmp_root(), 1);
        fd = memfd_create("emb-fuzz-input", 0);
        if (fd < 0) FINDING("memfd_create failed");
        snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
    }
    if (ftruncate(fd, 0) != 0 || (size && pwrite(fd, data, size, 0) != (ssize_t)size))
        FINDING("cannot write the input to the memfd");
    return path;
}

/* A scratch file name in a private folder on /dev/shm (tmpfs) or /tmp. */
static inline const char *fz_scratch(const char *name) {
    static char dir[128];
    static char path[256];
    if (!dir[0]) {
        snprintf(dir, sizeof dir, "%s/emb-fuzz.XXXXXX", fz_tmp_root());
        if (!mkdtemp(dir)) FINDING("mkdtemp failed");
    }
    snprintf(path, sizeof path, "%s/%s", dir, name);
    return path;
}

/* The harness's text corpus (n bytes), written to the scratch folder the first time it is
 * asked for; one corpus per harness. */
static inline const char *fz_corpus(const char *text, size_t n) {
    static char *path;
    if (!path) {
        path = strdup(fz_scratch("corpus.txt"));
        FILE *f = fopen(path, "wb");
        if (!f || fwrite(text, 1, n, f) != n) FINDING("cannot write the corpus");
        fclose(f);
    }
    return path;
}

/* A failed call must leave a known status and a message. */
static inline void fz_check_error(emb_status st, const char *what) {
    if (st >= 0 || st < EMB_ERR_READ_ONLY - 20) FINDING("%s: bad status %d", what, st);
    if (!emb_errmsg()[0]) FINDING("%s: status %d without a message", what, st);
}

static inline void fz_check_vectors(const emb_vectors *v, const emb_vectors_read_options *o);

/* emb_vectors_read of path as `format`, at most `limit` rows, with the oracles of both
 * outcomes: a proper error, or a consistent table (fz_check_vectors). Returns true when the
 * table was read into *v (release it). */
static inline bool fz_read_vectors(const char *path, emb_format format, int64_t limit,
                                   emb_vectors *v) {
    emb_vectors_read_options o = emb_vectors_read_options_default();
    o.format = format;
    o.limit = limit;
    emb_clear_error();
    emb_status rc = emb_vectors_read(path, &o, v);
    if (rc) {
        fz_check_error(rc, "emb_vectors_read");
        return false;
    }
    fz_check_vectors(v, &o);
    return true;
}

/* A table read successfully must be consistent. */
static inline void fz_check_vectors(const emb_vectors *v, const emb_vectors_read_options *o) {
    if (v->weight.ndim != 2 || v->weight.dtype != EMB_FLOAT32) FINDING("table is not 2-D float32");
    int64_t rows = v->weight.shape[0], dim = v->weight.shape[1];
    if (rows < 0 || dim < 0) FINDING("negative shape");
    if (o->limit > 0 && rows > o->limit)
        FINDING("limit %lld not applied: %lld rows", (long long)o->limit, (long long)rows);
    if (v->vocab && emb_vocab_num_words(v->vocab) != rows)
        FINDING("%lld words for %lld rows", (long long)emb_vocab_num_words(v->vocab),
                (long long)rows);
    const float *w = v->weight.data;
    volatile float sink = 0;
    for (int64_t i = 0; i < rows * dim; i++) sink += w[i]; /* every value is readable */
    for (int64_t i = 0; v->vocab && i < rows; i++) {
        size_t n;
        const char *s = emb_vocab_word(v->vocab, i, &n);
        if (!s || n == 0) FINDING("word %lld missing", (long long)i);
        if (emb_vocab_find(v->vocab, s, n) != i)
            FINDING("word %lld does not find itself", (long long)i);
        if (o->check_utf8 && !emb__utf8_valid(s, n))
            FINDING("word %lld is not UTF-8 although checked", (long long)i);
    }
    (void)sink;
}

/* Bitwise equality of two tables and their words (NaN payloads included). */
static inline void fz_check_same(const emb_vectors *a, const emb_vectors *b, bool words,
                                 const char *what) {
    if (a->weight.shape[0] != b->weight.shape[0] || a->weight.shape[1] != b->weight.shape[1])
        FINDING("%s: shape changed in the round trip", what);
    size_t nb = (size_t)(a->weight.shape[0] * a->weight.shape[1]) * 4;
    if (nb && memcmp(a->weight.data, b->weight.data, nb)) {
        const float *x = a->weight.data, *y = b->weight.data;
        for (size_t i = 0; i < nb / 4; i++)
            if (memcmp(&x[i], &y[i], 4) && !(isnan(x[i]) && isnan(y[i])))
                FINDING("%s: value %zu changed in the round trip: %.9g -> %.9g", what, i,
                        (double)x[i], (double)y[i]);
    }
    if (!words) return;
    if (!a->vocab != !b->vocab) FINDING("%s: words lost in the round trip", what);
    for (int64_t i = 0; a->vocab && i < emb_vocab_num_words(a->vocab); i++) {
        size_t n1, n2;
        const char *s1 = emb_vocab_word(a->vocab, i, &n1), *s2 = emb_vocab_word(b->vocab, i, &n2);
        if (n1 != n2 || memcmp(s1, s2, n1))
            FINDING("%s: word %lld changed in the round trip", what, (long long)i);
    }
}

/* ---- compressed inputs that ask for large windows ----
 *
 * zstd's decoder allocates the window a frame's header names (up to 128 MiB) and xz's the
 * dictionary of a block's LZMA2 filter (up to 1.5 GiB). Under AddressSanitizer each
 * allocation and release of it maps memory and touches its shadow: a 14-byte frame asking
 * for 64 MiB took 0.1 s per decompression, and such inputs, a few percent of a grown corpus,
 * were most of a harness's time (fuzz_phrases 280 inputs a second, fuzz_read_corpus 350).
 * The harnesses that decompress an input several times skip those whose data asks for more
 * than FZ_WINDOW_MAX; the windows themselves are the decoders' business. */
#define FZ_WINDOW_MAX ((uint64_t)1 << 20)

/* The window one zstd frame's header asks for (RFC 8878 3.1.1.1; its content size when the
 * frame is one segment), the header's size in *hdr; 0 when the header is cut short. */
static inline uint64_t zstd_frame_window(const uint8_t *p, size_t n, size_t *hdr) {
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
static inline uint64_t zstd_window(const uint8_t *p, size_t n) {
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
static inline uint64_t xz_window(const uint8_t *p, size_t n) {
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

/* Whether the input's zstd frames or xz stream ask for a window over max. */
static inline bool fz_window_over(const uint8_t *p, size_t n, uint64_t max) {
    return zstd_window(p, n) > max || xz_window(p, n) > max;
}

#endif /* EMB_FUZZ_READ_COMMON_H */
