/* word2vec checkpoints: save the whole training state atomically, and resume from it
 * (include/emb/word2vec.h; the layout is in docs/word2vec.md). All integers little-endian
 * as stored by this machine (x86-64 and AArch64 are little-endian; a big-endian host
 * refuses the file by its magic check). */
#include "w2v_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <libgen.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char EMB__W2V_MAGIC[8] = {'E', 'M', 'B', 'W', '2', 'V', 'C', 'K'};
#define EMB__W2V_VERSION 1u

/* ---- atomic write ---- */

emb_status emb__w2v_atomic_write(const char *path, emb__w2v_writer fn, void *ctx) {
    size_t n = strlen(path);
    char *tmp = malloc(n + 16);
    if (!tmp) return emb__error(EMB_ERR_NOMEM, "out of memory");
    memcpy(tmp, path, n);
    memcpy(tmp + n, ".tmp.XXXXXX", 12);
    int fd = mkstemp(tmp);
    if (fd < 0) {
        emb_status st = emb__error(EMB_ERR_IO, "cannot create a temporary file beside %s: %s",
                                   path, strerror(errno));
        free(tmp);
        return st;
    }
    FILE *f = fdopen(fd, "wb");
    if (!f) {
        emb_status st = emb__error(EMB_ERR_IO, "cannot open %s: %s", tmp, strerror(errno));
        close(fd), unlink(tmp), free(tmp);
        return st;
    }
    emb_status st = fn(f, ctx);
    if (st == EMB_OK && (fflush(f) != 0 || ferror(f)))
        st = emb__error(EMB_ERR_IO, "cannot write %s: %s", path, strerror(errno));
    if (st == EMB_OK && fsync(fileno(f)) != 0)
        st = emb__error(EMB_ERR_IO, "cannot flush %s to disk: %s", path, strerror(errno));
    if (fclose(f) != 0 && st == EMB_OK)
        st = emb__error(EMB_ERR_IO, "cannot write %s: %s", path, strerror(errno));
    if (st == EMB_OK && rename(tmp, path) != 0)
        st = emb__error(EMB_ERR_IO, "cannot rename %s to %s: %s", tmp, path, strerror(errno));
    if (st) {
        unlink(tmp);
    } else { /* make the rename durable */
        char *d = strdup(path);
        if (d) {
            int dfd = open(dirname(d), O_RDONLY | O_DIRECTORY);
            if (dfd >= 0) fsync(dfd), close(dfd);
            free(d);
        }
    }
    free(tmp);
    return st;
}

/* ---- writing ---- */

typedef struct {
    FILE *f;
    uint64_t h; /* FNV-1a over every byte written after the magic */
    bool err;
} wr;

static void put(wr *w, const void *p, size_t n) {
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++) w->h = (w->h ^ b[i]) * 1099511628211ull;
    if (fwrite(p, 1, n, w->f) != n) w->err = true;
}
static void put_u64(wr *w, uint64_t v) { put(w, &v, 8); }
static void put_f64(wr *w, double v) { put(w, &v, 8); }

static emb_status write_ckpt(FILE *f, void *ctx) {
    const emb_w2v *m = ctx;
    wr w = {f, 1469598103934665603ull, false};
    if (fwrite(EMB__W2V_MAGIC, 1, 8, f) != 8) w.err = true;
    const emb_w2v_options *o = &m->o;
    put_u64(&w, EMB__W2V_VERSION);
    put_u64(&w, (uint64_t)o->model);
    put_u64(&w, (uint64_t)o->dim);
    put_u64(&w, (uint64_t)o->window);
    put_u64(&w, (uint64_t)o->negative);
    put_f64(&w, o->sample);
    put_u64(&w, (uint64_t)o->min_count);
    put_u64(&w, (uint64_t)o->max_vocab);
    put_u64(&w, (uint64_t)o->epochs);
    put_f64(&w, o->alpha);
    put_f64(&w, o->min_alpha);
    put_u64(&w, (uint64_t)o->cbow_mean);
    put_u64(&w, (uint64_t)m->nt);
    put_u64(&w, o->seed);
    put_u64(&w, (uint64_t)o->lowercase);
    put_u64(&w, (uint64_t)o->strip_punct);
    put_u64(&w, (uint64_t)o->max_sentence);
    put_u64(&w, (uint64_t)o->shared_negatives);
    put_u64(&w, (uint64_t)m->V);
    put_u64(&w, (uint64_t)m->n_ids);
    put_u64(&w, m->fingerprint);
    put_u64(&w, (uint64_t)m->words_done);
    for (int t = 0; t < m->nt; t++) {
        put_u64(&w, (uint64_t)m->lanes[t].lo);
        put_u64(&w, (uint64_t)m->lanes[t].hi);
        put_u64(&w, (uint64_t)m->lanes[t].pos);
        put_u64(&w, (uint64_t)m->lanes[t].epoch);
        put_u64(&w, m->lanes[t].rng);
    }
    for (int64_t i = 0; i < m->V; i++) {
        size_t len;
        const char *s = emb_vocab_word(m->vocab, i, &len);
        put_u64(&w, (uint64_t)len);
        put(&w, s, len);
        put_u64(&w, (uint64_t)emb_vocab_count(m->vocab, i));
    }
    size_t tbytes = (size_t)m->V * (size_t)o->dim * sizeof(float);
    put(&w, m->syn0, tbytes);
    put(&w, m->syn1, tbytes);
    uint64_t h = w.h;
    if (fwrite(&h, 1, 8, f) != 8) w.err = true;
    return w.err ? emb__error(EMB_ERR_IO, "cannot write the checkpoint: %s", strerror(errno))
                 : EMB_OK;
}

emb_status emb_w2v_save_checkpoint(const emb_w2v *w, const char *path) {
    if (!w) return emb__null("w2v");
    if (!path) return emb__null("path");
    return emb__w2v_atomic_write(path, write_ckpt, (void *)w);
}

/* ---- reading ---- */

typedef struct {
    const unsigned char *p, *end;
    uint64_t h;
    bool bad;
} rd;

static bool get(rd *r, void *out, size_t n) {
    if (r->bad || (size_t)(r->end - r->p) < n) {
        r->bad = true;
        return false;
    }
    for (size_t i = 0; i < n; i++) r->h = (r->h ^ r->p[i]) * 1099511628211ull;
    memcpy(out, r->p, n);
    r->p += n;
    return true;
}
static uint64_t get_u64(rd *r) {
    uint64_t v = 0;
    get(r, &v, 8);
    return v;
}
static double get_f64(rd *r) {
    double v = 0;
    get(r, &v, 8);
    return v;
}

static emb_status read_file(const char *path, unsigned char **data, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) return emb__error(EMB_ERR_IO, "cannot open %s: %s", path, strerror(errno));
    emb_status st = EMB_OK;
    long sz = -1;
    if (fseek(f, 0, SEEK_END) == 0) sz = ftell(f);
    if (sz < 0 || fseek(f, 0, SEEK_SET) != 0)
        st = emb__error(EMB_ERR_IO, "cannot read %s: %s", path, strerror(errno));
    unsigned char *buf = NULL;
    if (st == EMB_OK) {
        buf = malloc((size_t)sz + 1);
        if (!buf)
            st = emb__error(EMB_ERR_NOMEM, "cannot allocate %ld bytes to read %s", sz, path);
        else if (fread(buf, 1, (size_t)sz, f) != (size_t)sz)
            st = emb__error(EMB_ERR_IO, "cannot read %s: %s", path, strerror(errno));
    }
    fclose(f);
    if (st) {
        free(buf);
        return st;
    }
    *data = buf;
    *n = (size_t)sz;
    return EMB_OK;
}

#define DIFF(field, fmt, a, b)                                                                \
    return emb__error(EMB_ERR_FORMAT,                                                         \
                      "%s was written with %s " fmt ", but this run has %s " fmt              \
                      " (resume with the same settings)",                                     \
                      checkpoint, field, a, field, b)

static emb_status restore(emb_w2v *w, const unsigned char *data, size_t n,
                          const char *checkpoint) {
    if (n < 16 || memcmp(data, EMB__W2V_MAGIC, 8) != 0)
        return emb__error(EMB_ERR_FORMAT, "%s is not an emb word2vec checkpoint", checkpoint);
    rd r = {data + 8, data + n - 8, 1469598103934665603ull, false};
    uint64_t stored;
    memcpy(&stored, data + n - 8, 8);
    uint64_t ver = get_u64(&r);
    if (ver != EMB__W2V_VERSION)
        return emb__error(EMB_ERR_FORMAT, "%s: checkpoint version %" PRIu64 " (this emb reads %u)",
                          checkpoint, ver, EMB__W2V_VERSION);
    {   /* the checksum covers everything between the magic and itself */
        uint64_t h = 1469598103934665603ull;
        for (const unsigned char *p = data + 8; p < data + n - 8; p++) h = (h ^ *p) * 1099511628211ull;
        if (h != stored)
            return emb__error(EMB_ERR_FORMAT, "%s is corrupt (checksum mismatch)", checkpoint);
    }
    const emb_w2v_options *o = &w->o;
    uint64_t v;
    if ((v = get_u64(&r)) != (uint64_t)o->model) DIFF("model", "%" PRIu64, v, (uint64_t)o->model);
    if ((v = get_u64(&r)) != (uint64_t)o->dim) DIFF("dim", "%" PRIu64, v, (uint64_t)o->dim);
    if ((v = get_u64(&r)) != (uint64_t)o->window) DIFF("window", "%" PRIu64, v, (uint64_t)o->window);
    if ((v = get_u64(&r)) != (uint64_t)o->negative)
        DIFF("negative", "%" PRIu64, v, (uint64_t)o->negative);
    double d;
    if ((d = get_f64(&r)) != o->sample) DIFF("sample", "%g", d, o->sample);
    if ((v = get_u64(&r)) != (uint64_t)o->min_count)
        DIFF("min_count", "%" PRIu64, v, (uint64_t)o->min_count);
    if ((v = get_u64(&r)) != (uint64_t)o->max_vocab)
        DIFF("max_vocab", "%" PRIu64, v, (uint64_t)o->max_vocab);
    if ((v = get_u64(&r)) != (uint64_t)o->epochs) DIFF("epochs", "%" PRIu64, v, (uint64_t)o->epochs);
    if ((d = get_f64(&r)) != o->alpha) DIFF("alpha", "%g", d, o->alpha);
    if ((d = get_f64(&r)) != o->min_alpha) DIFF("min_alpha", "%g", d, o->min_alpha);
    if ((v = get_u64(&r)) != (uint64_t)o->cbow_mean)
        DIFF("cbow_mean", "%" PRIu64, v, (uint64_t)o->cbow_mean);
    if ((v = get_u64(&r)) != (uint64_t)w->nt) DIFF("threads", "%" PRIu64, v, (uint64_t)w->nt);
    if ((v = get_u64(&r)) != o->seed) DIFF("seed", "%" PRIu64, v, o->seed);
    if ((v = get_u64(&r)) != (uint64_t)o->lowercase)
        DIFF("lowercase", "%" PRIu64, v, (uint64_t)o->lowercase);
    if ((v = get_u64(&r)) != (uint64_t)o->strip_punct)
        DIFF("strip_punct", "%" PRIu64, v, (uint64_t)o->strip_punct);
    if ((v = get_u64(&r)) != (uint64_t)o->max_sentence)
        DIFF("max_sentence", "%" PRIu64, v, (uint64_t)o->max_sentence);
    if ((v = get_u64(&r)) != (uint64_t)o->shared_negatives)
        DIFF("shared_negatives", "%" PRIu64, v, (uint64_t)o->shared_negatives);
    uint64_t V = get_u64(&r), nids = get_u64(&r), fp = get_u64(&r);
    if (r.bad) return emb__error(EMB_ERR_FORMAT, "%s is truncated", checkpoint);
    if (V != (uint64_t)w->V || nids != (uint64_t)w->n_ids || fp != w->fingerprint)
        return emb__error(EMB_ERR_FORMAT,
                          "%s was written for another corpus (%" PRIu64 " words, %" PRIu64
                          " token ids; this corpus gives %" PRId64 " words, %" PRId64
                          " token ids%s)",
                          checkpoint, V, nids, w->V, w->n_ids,
                          V == (uint64_t)w->V && nids == (uint64_t)w->n_ids
                              ? ", same sizes but different tokens"
                              : "");
    int64_t done = (int64_t)get_u64(&r);
    emb__w2v_lane *lanes = calloc((size_t)w->nt, sizeof *lanes);
    if (!lanes) return emb__error(EMB_ERR_NOMEM, "out of memory");
    for (int t = 0; t < w->nt; t++) {
        lanes[t].lo = (int64_t)get_u64(&r);
        lanes[t].hi = (int64_t)get_u64(&r);
        lanes[t].pos = (int64_t)get_u64(&r);
        lanes[t].epoch = (int32_t)get_u64(&r);
        lanes[t].rng = get_u64(&r);
        if (lanes[t].lo != w->lanes[t].lo || lanes[t].hi != w->lanes[t].hi ||
            lanes[t].pos < lanes[t].lo || lanes[t].pos > lanes[t].hi || lanes[t].epoch < 0 ||
            lanes[t].epoch > o->epochs)
            r.bad = true;
    }
    for (int64_t i = 0; i < w->V && !r.bad; i++) {
        uint64_t len = get_u64(&r);
        size_t wl;
        const char *s = emb_vocab_word(w->vocab, i, &wl);
        if (len != wl || (size_t)(r.end - r.p) < len || memcmp(r.p, s, wl) != 0) {
            free(lanes);
            return emb__error(EMB_ERR_FORMAT, "%s was written for another corpus (word %" PRId64
                              " differs)", checkpoint, i);
        }
        r.p += len;
        (void)get_u64(&r); /* count: the corpus fingerprint already matched */
    }
    size_t tbytes = (size_t)w->V * (size_t)o->dim * sizeof(float);
    if (r.bad || (size_t)(r.end - r.p) != 2 * tbytes || done < 0) {
        free(lanes);
        return emb__error(EMB_ERR_FORMAT, "%s is truncated or malformed", checkpoint);
    }
    memcpy(w->syn0, r.p, tbytes);
    memcpy(w->syn1, r.p + tbytes, tbytes);
    memcpy(w->lanes, lanes, (size_t)w->nt * sizeof *lanes);
    w->words_done = done;
    free(lanes);
    return EMB_OK;
}

/* The thread count a checkpoint was written with (its 13th field), or 0 when the file is
 * too short or the value out of range (restore() then reports what is wrong). The resumed
 * run takes it: each thread's range, position and random state are part of the state, so
 * the run goes on exactly as it would have, whatever the thread count asked for now. */
static int checkpoint_threads(const unsigned char *data, size_t n) {
    const size_t at = 8 + 8 + 11 * 8;
    if (n < at + 8 || memcmp(data, EMB__W2V_MAGIC, 8) != 0) return 0;
    uint64_t v;
    memcpy(&v, data + at, 8);
    return v >= 1 && v <= 1024 ? (int)v : 0;
}

emb_status emb_w2v_resume(const emb_w2v_options *opts, const char *corpus,
                          const char *checkpoint, emb_w2v **out) {
    if (!out) return emb__null("out");
    if (!opts) return emb__null("options");
    if (!checkpoint) return emb__null("checkpoint");
    unsigned char *data = NULL;
    size_t n = 0;
    emb_status st = read_file(checkpoint, &data, &n);
    if (st) return st;
    emb_w2v *w;
    emb_w2v_options o = *opts;
    if (checkpoint_threads(data, n) > 0) o.threads = checkpoint_threads(data, n);
    st = emb_w2v_create_from_file(&o, corpus, &w);
    if (st == EMB_OK) {
        st = restore(w, data, n, checkpoint);
        if (st) emb_w2v_free(w);
    }
    free(data);
    if (st == EMB_OK) *out = w;
    return st;
}
