/* The bytes of a word2vec corpus: a list of files, directories (their files, recursively, in
 * byte order of the path names) and "-" (standard input), each file plain text or gzip,
 * bzip2, xz or zstd data, recognised by its first bytes whatever its name
 * (docs/word2vec.md, "Corpora"). Decompression goes through one 64 KiB input buffer into the
 * caller's buffer, so memory stays bounded whatever a file expands to. */
#define _GNU_SOURCE /* fopencookie */
#include "w2v_internal.h"

#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#ifdef EMB_HAVE_ZLIB
#include <zlib.h>
#endif
#ifdef EMB_HAVE_BZIP2
#include <bzlib.h>
#endif
#ifdef EMB_HAVE_LZMA
#include <lzma.h>
#endif
#ifdef EMB_HAVE_ZSTD
#include <zstd.h>
#endif

#define EMB__RAW_BUF (1 << 16)
/* xz: the most memory a decoder may take (xz -9 needs 65 MiB) */
#define EMB__XZ_MEMLIMIT ((uint64_t)1 << 28)

enum { K_PLAIN, K_GZIP, K_BZIP2, K_XZ, K_ZSTD };
static const char *const kind_name[] = {"plain", "gzip", "bzip2", "xz", "zstd"};
static const char *const kind_lib[] = {"", "zlib", "libbz2", "liblzma", "libzstd"};

struct emb__corpus_src {
    char **paths; /* the files to read, in order; "-" is standard input */
    size_t n, cap, next;
    FILE *given; /* emb__corpus_open_stream: the one stream, not closed */
    const char *given_name;
    FILE *spool;             /* emb__corpus_spool_stdin: the copy of stdin that "-" reads */
    emb__corpus_files files; /* the files read since the last rewind */
    size_t files_cap;
    unsigned char pend[8]; /* the current file's text bytes not yet in its fingerprint */
    unsigned npend;
    emb_status failed; /* emb__corpus_text: what went wrong, and its message */
    char failed_msg[512];
    FILE *f;
    bool own_f;
    const char *name;
    int kind;
    unsigned char *raw;
    size_t raw_len, raw_pos;
    bool raw_eof;
    uint64_t raw_off; /* compressed bytes before raw[0] */
    bool boundary;    /* between two members / streams / frames: the end may come here */
    bool done;
    bool live; /* the decoder below is initialised */
#ifdef EMB_HAVE_ZLIB
    z_stream z;
#endif
#ifdef EMB_HAVE_BZIP2
    bz_stream bz;
#endif
#ifdef EMB_HAVE_LZMA
    lzma_stream xz;
#endif
#ifdef EMB_HAVE_ZSTD
    ZSTD_DStream *zs;
#endif
};

static emb_status push_path(emb__corpus_src *s, const char *p) {
    if (s->n == s->cap) {
        size_t cap = s->cap ? 2 * s->cap : 8;
        char **q = realloc(s->paths, cap * sizeof *q);
        if (!q) return emb__error(EMB_ERR_NOMEM, "out of memory listing the corpus files");
        s->paths = q, s->cap = cap;
    }
    size_t len = strlen(p);
    char *c = malloc(len + 1);
    if (!c) return emb__error(EMB_ERR_NOMEM, "out of memory listing the corpus files");
    memcpy(c, p, len + 1);
    s->paths[s->n++] = c;
    return EMB_OK;
}

static int by_bytes(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* The regular files under dir (hidden names and what is not a regular file skipped; a
 * symbolic link counts when it leads to a regular file). */
static emb_status walk(emb__corpus_src *s, const char *dir, int depth) {
    if (depth > 256) return emb__error(EMB_ERR_IO, "%s: directories nested too deeply", dir);
    DIR *d = opendir(dir);
    if (!d) return emb__error(EMB_ERR_IO, "cannot read directory %s: %s", dir, strerror(errno));
    emb_status st = EMB_OK;
    size_t dl = strlen(dir);
    struct dirent *e;
    while (st == EMB_OK && (e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.') continue;
        size_t nl = strlen(e->d_name);
        char *p = malloc(dl + nl + 2);
        if (!p) {
            st = emb__error(EMB_ERR_NOMEM, "out of memory listing %s", dir);
            break;
        }
        memcpy(p, dir, dl);
        size_t at = dl;
        if (at == 0 || p[at - 1] != '/') p[at++] = '/';
        memcpy(p + at, e->d_name, nl + 1);
        struct stat sb;
        if (lstat(p, &sb) != 0)
            st = emb__error(EMB_ERR_IO, "cannot read %s: %s", p, strerror(errno));
        else if (S_ISDIR(sb.st_mode))
            st = walk(s, p, depth + 1);
        else if (S_ISREG(sb.st_mode) ||
                 (S_ISLNK(sb.st_mode) && stat(p, &sb) == 0 && S_ISREG(sb.st_mode)))
            st = push_path(s, p);
        free(p);
    }
    closedir(d);
    return st;
}

static emb_status add_top(emb__corpus_src *s, const char *p, bool *stdin_seen) {
    if (strcmp(p, "-") == 0) {
        if (*stdin_seen)
            return emb__error(EMB_ERR_INVALID, "standard input (-) is given twice as a corpus");
        *stdin_seen = true;
        return push_path(s, p);
    }
    struct stat sb;
    if (stat(p, &sb) != 0) return emb__error(EMB_ERR_IO, "cannot open %s: %s", p, strerror(errno));
    if (!S_ISDIR(sb.st_mode)) return push_path(s, p);
    size_t first = s->n;
    emb_status st = walk(s, p, 0);
    if (st) return st;
    if (s->n == first)
        return emb__error(EMB_ERR_IO,
                          "%s: a directory without files to read (hidden files and what is not "
                          "a regular file are skipped)",
                          p);
    qsort(s->paths + first, s->n - first, sizeof *s->paths, by_bytes);
    return EMB_OK;
}

static emb_status src_new(emb__corpus_src **out) {
    emb__corpus_src *s = calloc(1, sizeof *s);
    if (s) s->raw = malloc(EMB__RAW_BUF);
    if (!s || !s->raw) {
        free(s);
        return emb__error(EMB_ERR_NOMEM, "out of memory opening the corpus");
    }
    *out = s;
    return EMB_OK;
}

emb_status emb__corpus_open_paths(emb__corpus_src **out, const char *const *paths, size_t n) {
    if (!paths && n > 0) return emb__null("paths");
    if (n == 0) return emb__error(EMB_ERR_INVALID, "no corpus file given");
    for (size_t i = 0; i < n; i++)
        if (!paths[i]) return emb__null("paths[i]");
    emb__corpus_src *s = NULL;
    emb_status st = src_new(&s);
    if (st) return st;
    bool stdin_seen = false;
    for (size_t i = 0; st == EMB_OK && i < n; i++) st = add_top(s, paths[i], &stdin_seen);
    if (st) {
        emb__corpus_close(s);
        return st;
    }
    *out = s;
    return EMB_OK;
}

emb_status emb__corpus_open_stream(emb__corpus_src **out, FILE *f, const char *name) {
    emb__corpus_src *s = NULL;
    emb_status st = src_new(&s);
    if (st) return st;
    s->given = f, s->given_name = name;
    *out = s;
    return EMB_OK;
}

static void end_decoder(emb__corpus_src *s) {
    if (!s->live) return;
    s->live = false;
#ifdef EMB_HAVE_ZLIB
    if (s->kind == K_GZIP) inflateEnd(&s->z);
#endif
#ifdef EMB_HAVE_BZIP2
    if (s->kind == K_BZIP2) BZ2_bzDecompressEnd(&s->bz);
#endif
#ifdef EMB_HAVE_LZMA
    if (s->kind == K_XZ) lzma_end(&s->xz);
#endif
#ifdef EMB_HAVE_ZSTD
    if (s->kind == K_ZSTD) ZSTD_freeDStream(s->zs), s->zs = NULL;
#endif
}

static void close_file(emb__corpus_src *s) {
    end_decoder(s);
    if (s->f && s->own_f) fclose(s->f);
    s->f = NULL;
}

void emb__corpus_close(emb__corpus_src *s) {
    if (!s) return;
    close_file(s);
    emb__corpus_files_free(&s->files);
    if (s->spool) fclose(s->spool);
    for (size_t i = 0; i < s->n; i++) free(s->paths[i]);
    free(s->paths);
    free(s->raw);
    free(s);
}

const char *emb__corpus_name(const emb__corpus_src *s) {
    return s->name ? s->name : "corpus";
}

static emb_status fill_raw(emb__corpus_src *s) {
    s->raw_off += s->raw_len;
    s->raw_pos = 0;
    s->raw_len = fread(s->raw, 1, EMB__RAW_BUF, s->f);
    if (s->raw_len < EMB__RAW_BUF) {
        if (ferror(s->f))
            return emb__error(EMB_ERR_IO, "%s: read error: %s", s->name, strerror(errno));
        s->raw_eof = true;
    }
    return EMB_OK;
}

static emb_status start_decoder(emb__corpus_src *s) {
    bool ok = false;
    switch (s->kind) {
#ifdef EMB_HAVE_ZLIB
    case K_GZIP:
        memset(&s->z, 0, sizeof s->z);
        ok = inflateInit2(&s->z, 15 + 16) == Z_OK;
        break;
#endif
#ifdef EMB_HAVE_BZIP2
    case K_BZIP2:
        memset(&s->bz, 0, sizeof s->bz);
        ok = BZ2_bzDecompressInit(&s->bz, 0, 0) == BZ_OK;
        break;
#endif
#ifdef EMB_HAVE_LZMA
    case K_XZ: {
        lzma_stream init = LZMA_STREAM_INIT;
        s->xz = init;
        ok = lzma_stream_decoder(&s->xz, EMB__XZ_MEMLIMIT, LZMA_CONCATENATED) == LZMA_OK;
        break;
    }
#endif
#ifdef EMB_HAVE_ZSTD
    case K_ZSTD:
        s->zs = ZSTD_createDStream();
        ok = s->zs && !ZSTD_isError(ZSTD_initDStream(s->zs));
        if (!ok && s->zs) ZSTD_freeDStream(s->zs), s->zs = NULL;
        break;
#endif
    default:
        return emb__error(EMB_ERR_UNSUPPORTED,
                          "%s: %s-compressed, but this emb was built without %s (decompress it "
                          "first, or build emb with %s)",
                          s->name, kind_name[s->kind], kind_lib[s->kind], kind_lib[s->kind]);
    }
    if (!ok)
        return emb__error(EMB_ERR_NOMEM, "%s: cannot start the %s decoder", s->name,
                          kind_name[s->kind]);
    s->live = true;
    return EMB_OK;
}

static int sniff(const unsigned char *b, size_t n) {
    if (n >= 2 && b[0] == 0x1f && b[1] == 0x8b) return K_GZIP;
    if (n >= 4 && memcmp(b, "BZh", 3) == 0 && b[3] >= '1' && b[3] <= '9') return K_BZIP2;
    if (n >= 6 && memcmp(b,
                         "\xFD"
                         "7zXZ\0",
                         6) == 0)
        return K_XZ;
    if (n >= 4 && memcmp(b, "\x28\xB5\x2F\xFD", 4) == 0) return K_ZSTD;
    return K_PLAIN;
}

/* ---- what was read, file by file ---- */

#define FP_PRIME 0x100000001b3ull

/* The open file's fingerprint completed: its last bytes, then its length. */
static void finish_record(emb__corpus_src *s) {
    if (s->files.n == 0) return;
    emb__corpus_file *f = &s->files.v[s->files.n - 1];
    for (unsigned k = 0; k < s->npend; k++) f->hash = (f->hash ^ s->pend[k]) * FP_PRIME;
    f->hash = (f->hash ^ f->bytes) * FP_PRIME;
    s->npend = 0;
}

/* The text's bytes into the open file's fingerprint, 8 at a time (the same value however
 * the text is cut into reads). */
static void add_text(emb__corpus_src *s, const char *b, size_t n) {
    if (s->files.n == 0) return;
    emb__corpus_file *f = &s->files.v[s->files.n - 1];
    f->bytes += n;
    uint64_t h = f->hash;
    while (n > 0 && s->npend > 0 && s->npend < 8) s->pend[s->npend++] = (unsigned char)*b++, n--;
    if (s->npend == 8) h = (h ^ emb__get_u64le(s->pend)) * FP_PRIME, s->npend = 0;
    for (; n >= 8; b += 8, n -= 8) h = (h ^ emb__get_u64le((const unsigned char *)b)) * FP_PRIME;
    while (n > 0) s->pend[s->npend++] = (unsigned char)*b++, n--;
    f->hash = h;
}

static emb_status new_record(emb__corpus_src *s, const char *name) {
    finish_record(s);
    if (s->files.n == s->files_cap) {
        size_t cap = s->files_cap ? 2 * s->files_cap : 8;
        emb__corpus_file *v = realloc(s->files.v, cap * sizeof *v);
        if (!v) return emb__error(EMB_ERR_NOMEM, "out of memory listing the corpus files");
        s->files.v = v, s->files_cap = cap;
    }
    size_t len = strlen(name);
    char *c = malloc(len + 1);
    if (!c) return emb__error(EMB_ERR_NOMEM, "out of memory listing the corpus files");
    memcpy(c, name, len + 1);
    s->files.v[s->files.n++] = (emb__corpus_file){c, 0, EMB__FNV64_INIT};
    return EMB_OK;
}

void emb__corpus_files_free(emb__corpus_files *f) {
    for (size_t i = 0; i < f->n; i++) free(f->v[i].name);
    free(f->v);
    f->v = NULL, f->n = 0;
}

void emb__corpus_take_files(emb__corpus_src *s, emb__corpus_files *out) {
    finish_record(s);
    *out = s->files;
    s->files.v = NULL, s->files.n = 0, s->files_cap = 0;
}

emb_status emb__corpus_next_file(emb__corpus_src *s, bool *have) {
    close_file(s);
    *have = false;
    if (s->given) {
        if (s->next > 0) return EMB_OK;
        s->f = s->given, s->own_f = false, s->name = s->given_name;
    } else {
        if (s->next >= s->n) return EMB_OK;
        const char *p = s->paths[s->next];
        if (strcmp(p, "-") == 0) {
            s->f = s->spool ? s->spool : stdin, s->own_f = false, s->name = "<stdin>";
            if (s->spool && fseeko(s->spool, 0, SEEK_SET) != 0)
                return emb__error(EMB_ERR_IO, "<stdin>: cannot read its copy in %s: %s",
                                  emb__w2v_tmp_dir(), strerror(errno));
        } else {
            s->name = p;
            s->f = fopen(p, "rbe");
            if (!s->f) return emb__error(EMB_ERR_IO, "cannot open %s: %s", p, strerror(errno));
            s->own_f = true;
            struct stat sb;
            if (fstat(fileno(s->f), &sb) == 0 && S_ISCHR(sb.st_mode) && !isatty(fileno(s->f)))
                return emb__error(EMB_ERR_IO,
                                  "%s: is a character device; a corpus is a regular file, a "
                                  "pipe or a terminal (a device such as /dev/zero has no end)",
                                  p);
        }
    }
    s->next++;
    emb_status st = new_record(s, s->name);
    if (st) return st;
    s->raw_len = s->raw_pos = 0, s->raw_off = 0, s->raw_eof = false;
    s->done = false, s->boundary = false;
    if ((st = fill_raw(s))) return st;
    s->kind = sniff(s->raw, s->raw_len);
    if (s->kind != K_PLAIN && (st = start_decoder(s))) return st;
    *have = true;
    return EMB_OK;
}

/* One step of the decoder: input in[0, in_n) (eof: nothing follows), output out[0, out_n);
 * *used and *made say how much it took and gave. *end: a member, stream or frame ended
 * here (more may follow). false with a message in *why on corrupt data. */
static bool step(emb__corpus_src *s, const unsigned char *in, size_t in_n, bool eof, char *out,
                 size_t out_n, size_t *used, size_t *made, bool *end, const char **why) {
    *end = false;
    *why = "corrupt data";
    switch (s->kind) {
#ifdef EMB_HAVE_ZLIB
    case K_GZIP: {
        s->z.next_in = (unsigned char *)in, s->z.avail_in = (uInt)in_n;
        s->z.next_out = (unsigned char *)out, s->z.avail_out = (uInt)out_n;
        int rc = inflate(&s->z, Z_NO_FLUSH);
        *used = in_n - s->z.avail_in, *made = out_n - s->z.avail_out;
        if (rc == Z_STREAM_END) {
            *end = true;
            inflateReset(&s->z);
            return true;
        }
        if (rc == Z_OK || rc == Z_BUF_ERROR) return true;
        if (s->z.msg) *why = s->z.msg;
        return false;
    }
#endif
#ifdef EMB_HAVE_BZIP2
    case K_BZIP2: {
        s->bz.next_in = (char *)in, s->bz.avail_in = (unsigned)in_n;
        s->bz.next_out = out, s->bz.avail_out = (unsigned)out_n;
        int rc = BZ2_bzDecompress(&s->bz);
        *used = in_n - s->bz.avail_in, *made = out_n - s->bz.avail_out;
        if (rc == BZ_STREAM_END) {
            *end = true;
            BZ2_bzDecompressEnd(&s->bz);
            memset(&s->bz, 0, sizeof s->bz);
            if (BZ2_bzDecompressInit(&s->bz, 0, 0) != BZ_OK) {
                s->live = false;
                *why = "cannot restart the decoder";
                return false;
            }
            return true;
        }
        return rc == BZ_OK;
    }
#endif
#ifdef EMB_HAVE_LZMA
    case K_XZ: {
        s->xz.next_in = in, s->xz.avail_in = in_n;
        s->xz.next_out = (uint8_t *)out, s->xz.avail_out = out_n;
        lzma_ret rc = lzma_code(&s->xz, eof ? LZMA_FINISH : LZMA_RUN);
        *used = in_n - s->xz.avail_in, *made = out_n - s->xz.avail_out;
        if (rc == LZMA_STREAM_END) {
            *end = true;
            s->done = true; /* LZMA_CONCATENATED: the end of the last stream */
            return true;
        }
        if (rc == LZMA_OK || (rc == LZMA_BUF_ERROR && !eof)) return true;
        if (rc == LZMA_MEMLIMIT_ERROR) *why = "the stream needs more than 256 MiB to decode";
        if (rc == LZMA_BUF_ERROR) *why = "truncated";
        return false;
    }
#endif
#ifdef EMB_HAVE_ZSTD
    case K_ZSTD: {
        /* small steps: an error does not say where in the input it was found */
        ZSTD_inBuffer ib = {in, in_n < 4096 ? in_n : 4096, 0};
        ZSTD_outBuffer ob = {out, out_n, 0};
        size_t rc = ZSTD_decompressStream(s->zs, &ob, &ib);
        *used = ib.pos, *made = ob.pos;
        if (ZSTD_isError(rc)) {
            *why = ZSTD_getErrorName(rc);
            return false;
        }
        *end = rc == 0;
        return true;
    }
#endif
    default:
        (void)in, (void)in_n, (void)eof, (void)out, (void)out_n, (void)used, (void)made;
        return false;
    }
}

static emb_status read_compressed(emb__corpus_src *s, char *buf, size_t cap, size_t *got) {
    size_t made_total = 0;
    while (made_total == 0 && !s->done) {
        if (s->raw_pos == s->raw_len && !s->raw_eof) {
            emb_status st = fill_raw(s);
            if (st) return st;
        }
        bool eof = s->raw_eof && s->raw_pos == s->raw_len;
        if (eof && s->boundary && s->kind != K_XZ) {
            s->done = true;
            break;
        }
        size_t used = 0, made = 0;
        bool end;
        const char *why;
        if (!step(s, s->raw + s->raw_pos, s->raw_len - s->raw_pos, s->raw_eof, buf, cap, &used,
                  &made, &end, &why))
            return emb__error(EMB_ERR_FORMAT,
                              "%s: %s data is corrupt or truncated near byte %" PRIu64
                              " of the compressed file (%s)",
                              s->name, kind_name[s->kind], s->raw_off + s->raw_pos + used, why);
        s->raw_pos += used;
        made_total += made;
        if (end)
            s->boundary = true;
        else if (used > 0 || made > 0)
            s->boundary = false;
        if (eof && used == 0 && made == 0 && !end && !s->done)
            return emb__error(EMB_ERR_FORMAT,
                              "%s: %s data is truncated: the file ends at byte %" PRIu64
                              " inside a compressed stream",
                              s->name, kind_name[s->kind], s->raw_off + s->raw_pos);
    }
    *got = made_total;
    return EMB_OK;
}

static emb_status read_text(emb__corpus_src *s, char *buf, size_t cap, size_t *got) {
    *got = 0;
    if (s->kind != K_PLAIN) return read_compressed(s, buf, cap, got);
    if (s->raw_pos < s->raw_len) {
        size_t k = s->raw_len - s->raw_pos < cap ? s->raw_len - s->raw_pos : cap;
        memcpy(buf, s->raw + s->raw_pos, k);
        s->raw_pos += k;
        *got = k;
        return EMB_OK;
    }
    if (s->raw_eof) return EMB_OK;
    *got = fread(buf, 1, cap, s->f);
    if (*got < cap) {
        s->raw_eof = true;
        if (ferror(s->f))
            return emb__error(EMB_ERR_IO, "%s: read error: %s", s->name, strerror(errno));
    }
    return EMB_OK;
}

emb_status emb__corpus_read(emb__corpus_src *s, char *buf, size_t cap, size_t *got) {
    emb_status st = read_text(s, buf, cap, got);
    if (st == EMB_OK) add_text(s, buf, *got);
    return st;
}

/* ---- read more than once; the text as one stream ---- */

emb_status emb__corpus_spool_stdin(emb__corpus_src *s) {
    return emb__corpus_spool_stdin_max(s, EMB__CORPUS_SPOOL_MAX);
}

emb_status emb__corpus_spool_stdin_max(emb__corpus_src *s, uint64_t max) {
    bool has = false;
    for (size_t i = 0; i < s->n; i++) has = has || strcmp(s->paths[i], "-") == 0;
    if (!has || s->spool) return EMB_OK;
    int fd = emb__w2v_tmp_fd();
    FILE *f = fd >= 0 ? fdopen(fd, "w+b") : NULL;
    if (!f) {
        if (fd >= 0) close(fd);
        return emb__error(EMB_ERR_IO,
                          "cannot create a temporary file for standard input in %s "
                          "(TMPDIR): %s",
                          emb__w2v_tmp_dir(), strerror(errno));
    }
    uint64_t total = 0;
    emb_status st = EMB_OK;
    for (;;) {
        size_t got = fread(s->raw, 1, EMB__RAW_BUF, stdin);
        if (got == 0) break;
        if ((total += got) > max) {
            st = emb__error(EMB_ERR_UNSUPPORTED,
                            "<stdin>: longer than %" PRIu64 " %s: the corpus is read more than "
                            "once, and standard input is kept for that in a temporary file of "
                            "at most that size; give the corpus as a file",
                            max % (1u << 30) ? max : max >> 30, max % (1u << 30) ? "bytes" : "GiB");
            break;
        }
        if (fwrite(s->raw, 1, got, f) != got) {
            st = emb__error(EMB_ERR_IO,
                            "cannot copy standard input to a temporary file in %s "
                            "(TMPDIR): %s",
                            emb__w2v_tmp_dir(), strerror(errno));
            break;
        }
    }
    if (st == EMB_OK && ferror(stdin))
        st = emb__error(EMB_ERR_IO, "<stdin>: read error: %s", strerror(errno));
    if (st == EMB_OK && fflush(f) != 0)
        st = emb__error(EMB_ERR_IO,
                        "cannot copy standard input to a temporary file in %s "
                        "(TMPDIR): %s",
                        emb__w2v_tmp_dir(), strerror(errno));
    if (st) {
        fclose(f);
        return st;
    }
    s->spool = f;
    return EMB_OK;
}

emb_status emb__corpus_rewind(emb__corpus_src *s) {
    if (s->given)
        return emb__error(EMB_ERR_INVALID, "%s is an open stream: it cannot be read twice",
                          s->given_name);
    for (size_t i = 0; i < s->n && !s->spool; i++)
        if (strcmp(s->paths[i], "-") == 0)
            return emb__error(EMB_ERR_INVALID, "standard input cannot be read twice");
    close_file(s);
    s->next = 0;
    s->failed = EMB_OK;
    emb__corpus_files_free(&s->files);
    s->files_cap = 0, s->npend = 0;
    return EMB_OK;
}

typedef struct {
    emb__corpus_src *s;
    char *buf;
    size_t len, pos;
    bool open, first; /* a file is open; nothing of it read yet */
    bool any, eol;    /* the open file gave text; its last byte was a line end */
    bool eof;
} text_cookie;

static ssize_t text_fail(text_cookie *t, emb_status st) {
    t->s->failed = st;
    snprintf(t->s->failed_msg, sizeof t->s->failed_msg, "%s", emb_errmsg());
    errno = EIO;
    return -1;
}

static ssize_t text_read(void *cookie, char *out, size_t size) {
    text_cookie *t = cookie;
    size_t done = 0;
    while (done < size) {
        if (t->pos < t->len) {
            size_t k = t->len - t->pos < size - done ? t->len - t->pos : size - done;
            memcpy(out + done, t->buf + t->pos, k);
            t->pos += k, done += k;
            continue;
        }
        if (t->eof || t->s->failed) break;
        emb_status st;
        if (!t->open) {
            bool have;
            if ((st = emb__corpus_next_file(t->s, &have))) return text_fail(t, st);
            if (!have) {
                t->eof = true;
                break;
            }
            t->open = t->first = true, t->any = false;
            continue;
        }
        size_t got;
        if ((st = emb__corpus_read(t->s, t->buf, EMB__RAW_BUF, &got))) return text_fail(t, st);
        t->pos = 0, t->len = got;
        if (got == 0) { /* the file's end ends its last line */
            t->open = false;
            if (t->any && !t->eol) t->buf[0] = '\n', t->len = 1;
            continue;
        }
        /* as the training reader: a byte-order mark at the start is not text */
        if (t->first && got >= 3 && memcmp(t->buf, "\xEF\xBB\xBF", 3) == 0) t->pos = 3;
        t->first = false;
        if (t->pos < t->len) t->any = true, t->eol = t->buf[t->len - 1] == '\n';
    }
    if (done == 0 && t->s->failed) {
        errno = EIO;
        return -1;
    }
    return (ssize_t)done;
}

static int text_close(void *cookie) {
    text_cookie *t = cookie;
    free(t->buf);
    free(t);
    return 0;
}

FILE *emb__corpus_text(emb__corpus_src *s) {
    text_cookie *t = calloc(1, sizeof *t);
    if (t) t->buf = malloc(EMB__RAW_BUF);
    if (!t || !t->buf) {
        if (t) free(t);
        return NULL;
    }
    t->s = s;
    cookie_io_functions_t io = {text_read, NULL, NULL, text_close};
    FILE *f = fopencookie(t, "r", io);
    if (!f) text_close(t);
    return f;
}

emb_status emb__corpus_failed(const emb__corpus_src *s) {
    if (s->failed) return emb__error(s->failed, "%s", s->failed_msg);
    return EMB_OK;
}
