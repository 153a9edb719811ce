/* The token ids of a word2vec corpus, kept in an unlinked temporary file and read back
 * through small buffers, so that training needs memory for the vocabulary and the tables
 * but not for the corpus (see emb__w2v_ids in w2v_internal.h). The file is made when the
 * write buffer first fills: a corpus of fewer ids (a short text, a range of one, a fuzzer's
 * input) keeps them in that buffer and never makes a file. */
#include "w2v_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ids per buffer: of a cursor, and of the writer */
#define EMB__IDS_BUF 16384

const char *emb__w2v_tmp_dir(void) {
    const char *d = getenv("TMPDIR");
    return d && *d ? d : "/tmp";
}

int emb__w2v_tmp_fd(void) {
    const char *dir = emb__w2v_tmp_dir();
    int fd = -1;
#ifdef O_TMPFILE
    fd = open(dir, O_TMPFILE | O_RDWR | O_EXCL | O_CLOEXEC, 0600);
#endif
    if (fd < 0) { /* no O_TMPFILE there: a named file, removed at once */
        size_t n = strlen(dir);
        char *path = malloc(n + 32);
        if (!path) {
            errno = ENOMEM;
            return -1;
        }
        memcpy(path, dir, n);
        memcpy(path + n, "/emb-corpus-XXXXXX", 19);
        fd = mkstemp(path);
        if (fd >= 0) unlink(path);
        free(path);
    }
    return fd;
}

/* The file is made when the buffer first fills (spill); name is kept for its messages. */
emb_status emb__w2v_ids_open_file(emb__w2v_ids *s, const char *name) {
    memset(s, 0, sizeof *s);
    s->fd = -1;
    s->wbuf = malloc(EMB__IDS_BUF * sizeof(int32_t));
    s->name = name ? strdup(name) : NULL;
    if (!s->wbuf || (name && !s->name)) {
        emb__w2v_ids_close(s);
        return emb__error(EMB_ERR_NOMEM, "%s: cannot allocate a write buffer", name);
    }
    return EMB_OK;
}

/* The corpus's name for a message. */
static const char *corpus_name(const emb__w2v_ids *s) {
    return s->name ? s->name : "the corpus";
}

void emb__w2v_ids_use_memory(emb__w2v_ids *s, int32_t *ids, int64_t n) {
    memset(s, 0, sizeof *s);
    s->fd = -1;
    s->mem = ids;
    s->n = n;
}

void emb__w2v_ids_close(emb__w2v_ids *s) {
    if (s->fd >= 0) close(s->fd);
    free(s->mem);
    free(s->wbuf);
    free(s->name);
    memset(s, 0, sizeof *s);
    s->fd = -1;
}

static emb_status write_at(const emb__w2v_ids *s, const int32_t *p, int64_t n, int64_t at) {
    const int fd = s->fd;
    const char *b = (const char *)p;
    size_t left = (size_t)n * sizeof(int32_t);
    off_t off = (off_t)at * (off_t)sizeof(int32_t);
    while (left > 0) {
        ssize_t k = pwrite(fd, b, left, off);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0)
            return emb__error(EMB_ERR_IO,
                              "%s: cannot write its token ids to a temporary file in %s "
                              "(TMPDIR): %s",
                              corpus_name(s), emb__w2v_tmp_dir(),
                              k < 0 ? strerror(errno) : "nothing written");
        b += k, left -= (size_t)k, off += k;
    }
    return EMB_OK;
}

/* Reads ids [at, at + n) of the file; false on an error or a short file. */
static bool read_at(int fd, int32_t *p, int64_t n, int64_t at) {
    char *b = (char *)p;
    size_t left = (size_t)n * sizeof(int32_t);
    off_t off = (off_t)at * (off_t)sizeof(int32_t);
    while (left > 0) {
        ssize_t k = pread(fd, b, left, off);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) return false;
        b += k, left -= (size_t)k, off += k;
    }
    return true;
}

/* Writes the buffered ids to the file, made first when there is none yet. */
static emb_status spill(emb__w2v_ids *s) {
    if (s->fd < 0 && (s->fd = emb__w2v_tmp_fd()) < 0)
        return emb__error(EMB_ERR_IO,
                          "%s: cannot create a temporary file for its token ids in %s "
                          "(TMPDIR): %s",
                          corpus_name(s), emb__w2v_tmp_dir(), strerror(errno));
    emb_status st = write_at(s, s->wbuf, s->wn, s->n);
    s->n += s->wn;
    s->wn = 0;
    return st;
}

emb_status emb__w2v_ids_push(emb__w2v_ids *s, int32_t id) {
    s->wbuf[s->wn++] = id;
    if (s->wn < EMB__IDS_BUF) return EMB_OK;
    return spill(s);
}

emb_status emb__w2v_ids_flush(emb__w2v_ids *s) {
    if (s->fd < 0 && !s->mem) { /* never spilled: the buffer (64 KiB) becomes the store's
                                 * memory, as it is (a copy to its size costs more) */
        s->mem = s->wbuf;
        s->n = s->wn;
        s->wbuf = NULL, s->wn = 0;
        return EMB_OK;
    }
    return s->wn ? spill(s) : EMB_OK;
}

/* The renumbering of emb__w2v_ids_map: in[0, n) into out (which may be in), returns how many
 * are kept. */
static int64_t map_ids(const int32_t *in, int64_t n, const int32_t *map, int32_t *out,
                       bool *last_end) {
    int64_t w = 0;
    for (int64_t i = 0; i < n; i++) {
        int32_t id = in[i];
        if (id < 0) {
            if (*last_end) continue;
            *last_end = true;
        } else {
            id = map[id];
            if (id < 0) continue;
            *last_end = false;
        }
        out[w++] = id;
    }
    return w;
}

emb_status emb__w2v_ids_map(emb__w2v_ids *s, const int32_t *map) {
    if (s->mem) { /* in place in memory */
        bool last_end = true;
        s->n = map_ids(s->mem, s->n, map, s->mem, &last_end);
        return EMB_OK;
    }
    int32_t *buf = s->wbuf ? s->wbuf : malloc(EMB__IDS_BUF * sizeof(int32_t));
    if (!buf) return emb__error(EMB_ERR_NOMEM, "out of memory renumbering the token ids");
    s->wbuf = buf;
    int64_t w = 0, wn = 0;
    bool last_end = true;
    emb_status st = EMB_OK;
    int32_t in[4096];
    /* w <= the read position, and what is written was read before: in place. Reads go
     * through in[] in small steps, writes through buf. */
    for (int64_t r = 0; r < s->n && st == EMB_OK;) {
        int64_t k = s->n - r < 4096 ? s->n - r : 4096;
        if (!read_at(s->fd, in, k, r)) {
            st = emb__error(EMB_ERR_IO, "%s: cannot read back its token ids from %s: %s",
                            corpus_name(s), emb__w2v_tmp_dir(), strerror(errno));
            break;
        }
        r += k;
        wn += map_ids(in, k, map, buf + wn, &last_end);
        if (wn > EMB__IDS_BUF - 4096) { /* room for the next step's ids */
            st = write_at(s, buf, wn, w);
            w += wn, wn = 0;
        }
    }
    if (st == EMB_OK && wn) st = write_at(s, buf, wn, w), w += wn;
    if (st == EMB_OK && ftruncate(s->fd, (off_t)w * (off_t)sizeof(int32_t)) != 0)
        st = emb__error(EMB_ERR_IO, "%s: cannot shorten the temporary file of its token ids: %s",
                        corpus_name(s), strerror(errno));
    if (st == EMB_OK) s->n = w;
    free(s->wbuf);
    s->wbuf = NULL;
    return st;
}

emb_status emb__w2v_cursor_init(emb__w2v_cursor *c, const emb__w2v_ids *s) {
    memset(c, 0, sizeof *c);
    c->s = s;
    if (s->mem) { /* the whole array is the buffer */
        c->buf = s->mem;
        c->lo = 0;
        c->len = s->n;
        return EMB_OK;
    }
    /* a complete store: no more than its ids (a small corpus, one lane of many, a fuzzer's
     * input, does not take 64 KiB a cursor) */
    const int64_t cap = s->n < EMB__IDS_BUF ? (s->n > 0 ? s->n : 1) : EMB__IDS_BUF;
    c->own = malloc((size_t)cap * sizeof(int32_t));
    if (!c->own) return emb__error(EMB_ERR_NOMEM, "cannot allocate a corpus buffer");
    c->buf = c->own;
    return EMB_OK;
}

void emb__w2v_cursor_free(emb__w2v_cursor *c) {
    free(c->own);
    memset(c, 0, sizeof *c);
}

bool emb__w2v_cursor_fill(emb__w2v_cursor *c, int64_t pos) {
    const emb__w2v_ids *s = c->s;
    if (s->mem || pos < 0 || pos >= s->n) return false;
    int64_t k = s->n - pos < EMB__IDS_BUF ? s->n - pos : EMB__IDS_BUF;
    if (!read_at(s->fd, c->own, k, pos)) return false;
    c->lo = pos;
    c->len = k;
    return true;
}
