/* word2vec checkpoints: save the whole training state atomically, and resume from it
 * (include/emb/word2vec.h; the layout is in docs/word2vec.md). Version 4 is version 3 with
 * the list of corpus files read (each its name, text bytes and fingerprint) after the phrase
 * options, so that a resume over other files names the one that differs. Version 3 stores every
 * number little-endian through core's codec (src/core/bytes.h) with its FNV-1a 64 checksum,
 * and after the other options the subword options (minn, maxn, bucket) and the phrase
 * options (passes, min_count, threshold, delimiter), and with subwords the n-gram bucket rows
 * after the words' rows of the input table. Version 2 is version 3 without those fields (no
 * subwords, no phrases); version 1, written before, has version 2's
 * layout in the writing machine's byte order (little-endian on every machine emb ran on) and
 * is read the same way. */
#include "w2v_internal.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

static const char EMB__W2V_MAGIC[8] = {'E', 'M', 'B', 'W', '2', 'V', 'C', 'K'};
#define EMB__W2V_VERSION 4u
#define EMB__W2V_OLDEST  1u /* the oldest version read: the same layout */
/* Version 1's checksum is FNV-1a 64 started from this value instead of FNV's offset basis
 * (EMB__FNV64_INIT, which has one more digit: 14695981039346656037). */
#define EMB__W2V_V1_BASIS 1469598103934665603ull
/* The 8-byte fields before the lanes: 17 options, vocabulary size, token ids,
 * fingerprint, words done; version 3 adds 8 after the options: minn, maxn, bucket, phrase
 * passes (bits 0-7; the scorer in bits 8-15, 1 for npmi), phrase min_count, phrase threshold
 * and the delimiter (16 bytes, 0-padded). */
#define EMB__W2V_HEAD_FIELDS(ver) ((ver) >= 3 ? 29 : 21)

/* The input table's rows: the words', then with subwords the n-gram buckets. */
static int64_t input_rows(const emb_w2v *m) {
    return m->V + (m->o.maxn > 0 ? m->o.bucket : 0);
}

/* ---- writing: through core's atomic writer ---- */

typedef struct {
    emb__writer w;
    uint64_t h; /* FNV-1a over every byte written after the magic */
} wr;

static void put(wr *w, const void *p, size_t n) {
    w->h = emb__fnv64_update(w->h, p, n);
    emb__writer_put(&w->w, p, n);
}
static void put_u64(wr *w, uint64_t v) {
    unsigned char b[8];
    emb__put_u64le(b, v);
    put(w, b, 8);
}
static void put_f64(wr *w, double v) {
    unsigned char b[8];
    emb__put_f64le(b, v);
    put(w, b, 8);
}
/* n float32 values, little-endian, in pieces of 4 KiB. */
static void put_f32s(wr *w, const float *x, size_t n) {
    unsigned char b[4096];
    for (size_t i = 0; i < n; i += sizeof b / 4) {
        const size_t k = n - i < sizeof b / 4 ? n - i : sizeof b / 4;
        emb__f32le_encode(b, x + i, k);
        put(w, b, 4 * k);
    }
}

static void write_ckpt(wr *w, const emb_w2v *m) {
    emb__writer_put(&w->w, EMB__W2V_MAGIC, 8);
    const emb_w2v_options *o = &m->o;
    put_u64(w, EMB__W2V_VERSION);
    put_u64(w, (uint64_t)o->model);
    put_u64(w, (uint64_t)o->dim);
    put_u64(w, (uint64_t)o->window);
    put_u64(w, (uint64_t)o->negative);
    put_f64(w, o->sample);
    put_u64(w, (uint64_t)o->min_count);
    put_u64(w, (uint64_t)o->max_vocab);
    put_u64(w, (uint64_t)o->epochs);
    put_f64(w, o->alpha);
    put_f64(w, o->min_alpha);
    put_u64(w, (uint64_t)o->cbow_mean);
    put_u64(w, (uint64_t)m->nt);
    put_u64(w, o->seed);
    put_u64(w, (uint64_t)o->lowercase);
    put_u64(w, (uint64_t)o->strip_punct);
    put_u64(w, (uint64_t)o->max_sentence);
    put_u64(w, (uint64_t)o->shared_negatives);
    put_u64(w, (uint64_t)(o->maxn > 0 ? o->minn : 0));
    put_u64(w, (uint64_t)o->maxn);
    put_u64(w, (uint64_t)(o->maxn > 0 ? o->bucket : 0));
    const bool ph = o->phrases > 0;
    char delim[16] = {0};
    if (ph) memcpy(delim, o->phrases_delimiter, strlen(o->phrases_delimiter));
    put_u64(w, (uint64_t)o->phrases | (ph ? (uint64_t)o->phrases_scoring << 8 : 0));
    put_u64(w, ph ? (uint64_t)o->phrases_min_count : 0);
    put_f64(w, ph ? o->phrases_threshold : 0.0);
    put(w, delim, 16);
    /* version 4: the corpus files read, each its name, text bytes and fingerprint */
    put_u64(w, (uint64_t)m->files.n);
    for (size_t i = 0; i < m->files.n; i++) {
        const emb__corpus_file *f = &m->files.v[i];
        put_u64(w, (uint64_t)strlen(f->name));
        put(w, f->name, strlen(f->name));
        put_u64(w, f->bytes);
        put_u64(w, f->hash);
    }
    put_u64(w, (uint64_t)m->V);
    put_u64(w, (uint64_t)m->n_ids);
    put_u64(w, m->fingerprint);
    put_u64(w, (uint64_t)m->words_done);
    for (int t = 0; t < m->nt; t++) {
        put_u64(w, (uint64_t)m->lanes[t].lo);
        put_u64(w, (uint64_t)m->lanes[t].hi);
        put_u64(w, (uint64_t)m->lanes[t].pos);
        put_u64(w, (uint64_t)m->lanes[t].epoch);
        put_u64(w, m->lanes[t].rng);
    }
    for (int64_t i = 0; i < m->V; i++) {
        size_t len;
        const char *s = emb_vocab_word(m->vocab, i, &len);
        put_u64(w, (uint64_t)len);
        put(w, s, len);
        put_u64(w, (uint64_t)emb_vocab_count(m->vocab, i));
    }
    const size_t tn = (size_t)m->V * (size_t)o->dim;
    put_f32s(w, m->syn0, (size_t)input_rows(m) * (size_t)o->dim);
    put_f32s(w, m->syn1, tn);
    unsigned char h[8];
    emb__put_u64le(h, w->h);
    emb__writer_put(&w->w, h, 8);
}

emb_status emb_w2v_save_checkpoint(const emb_w2v *w, const char *path) {
    if (!w) return emb__null("w2v");
    if (!path) return emb__null("path");
    if (w->diverged)
        return emb__error(EMB_ERR_STATE,
                          "%s: not written: the training diverged (its vectors hold NaN or "
                          "infinite values)",
                          path);
    wr c;
    c.h = EMB__FNV64_INIT;
    emb_status st = emb__writer_open(&c.w, path);
    if (st) return st;
    write_ckpt(&c, w);
    if ((st = c.w.status)) {
        emb__writer_abort(&c.w);
        return st;
    }
    return emb__writer_commit(&c.w);
}

/* ---- reading ---- */

typedef struct {
    const unsigned char *p, *end;
    bool bad;
} rd;

static bool get(rd *r, void *out, size_t n) {
    if (r->bad || (size_t)(r->end - r->p) < n) {
        r->bad = true;
        return false;
    }
    memcpy(out, r->p, n);
    r->p += n;
    return true;
}
static uint64_t get_u64(rd *r) {
    unsigned char b[8];
    return get(r, b, 8) ? emb__get_u64le(b) : 0;
}
static double get_f64(rd *r) {
    unsigned char b[8];
    return get(r, b, 8) ? emb__get_f64le(b) : 0.0;
}

#define DIFF(field, fmt, a, b)                                                                     \
    return emb__error(EMB_ERR_FORMAT,                                                              \
                      "%s was written with %s " fmt ", but this run has %s " fmt                   \
                      " (resume with the same settings)",                                          \
                      checkpoint, field, a, field, b)

/* The tokens done and the lanes, each checked against this corpus and lane
 * count; *lanes (allocated) on success. */
static emb_status read_progress(const emb_w2v *w, rd *r, const char *checkpoint, uint64_t *done,
                                emb__w2v_lane **lanes_out) {
    const emb_w2v_options *o = &w->o;
    const uint64_t done_u = get_u64(r);
    emb__w2v_lane *lanes = calloc((size_t)w->nt, sizeof *lanes);
    if (!lanes) return emb__error(EMB_ERR_NOMEM, "out of memory");
    const char *bad = NULL;
    int64_t expect_done = 0;
    emb__w2v_cursor cur;
    emb_status cst = emb__w2v_cursor_init(&cur, &w->ids);
    if (cst) {
        free(lanes);
        return cst;
    }
    for (int t = 0; t < w->nt && !bad; t++) {
        uint64_t lo = get_u64(r), hi = get_u64(r), pos = get_u64(r), epoch = get_u64(r);
        lanes[t].rng = get_u64(r);
        if (r->bad) break;
        /* a cut of the ids at sentence starts (checked whole below): an earlier build cut
         * them elsewhere, and the checkpoint's lanes are kept */
        if (lo != (t == 0 ? 0 : (uint64_t)lanes[t - 1].hi) || hi < lo || hi > (uint64_t)w->n_ids ||
            (t == w->nt - 1 && hi != (uint64_t)w->n_ids))
            bad = "a lane's range of tokens";
        else if (pos < lo || pos > hi)
            bad = "a lane's position";
        else if (epoch > (uint64_t)o->epochs || (t > 0 && epoch != (uint64_t)lanes[0].epoch))
            bad = "a lane's epoch";
        else if (lanes[t].rng == 0)
            bad = "a lane's random state (0)";
        if (bad) break;
        lanes[t].lo = (int64_t)lo;
        lanes[t].hi = (int64_t)hi;
        lanes[t].pos = (int64_t)pos;
        lanes[t].epoch = (int32_t)epoch;
        /* the tokens (not sentence ends) this thread has processed: whole epochs of its
         * range, then [lo, pos) */
        int64_t in_range = 0, before = 0;
        for (int64_t k = lanes[t].lo; k < lanes[t].hi && !bad; k++) {
            int32_t id = emb__w2v_id_at(&cur, k);
            if (id == INT32_MIN) bad = ""; /* the ids could not be read back */
            in_range += id >= 0;
            if (k < lanes[t].pos) before += id >= 0;
        }
        expect_done += (int64_t)epoch * in_range + before;
    }
    emb__w2v_cursor_free(&cur);
    bool cut_ok = true;
    if (!bad && !r->bad) {
        emb_status vst = emb__w2v_lanes_valid(w, lanes, &cut_ok);
        if (vst) {
            free(lanes);
            return vst;
        }
        if (!cut_ok) bad = "a lane's range of tokens";
    }
    if (bad && !*bad) {
        free(lanes);
        return emb__error(EMB_ERR_IO, "cannot read back the corpus's token ids: %s",
                          strerror(errno));
    }
    if (bad) {
        free(lanes);
        return emb__error(EMB_ERR_FORMAT, "%s is malformed: %s is out of range", checkpoint, bad);
    }
    if (!r->bad &&
        (done_u != (uint64_t)expect_done || done_u > (uint64_t)(w->tokens * o->epochs))) {
        free(lanes);
        return emb__error(EMB_ERR_FORMAT,
                          "%s is malformed: the words done (%" PRIu64
                          ") do not match the threads' positions "
                          "(%" PRId64 " of %" PRId64 " words)",
                          checkpoint, done_u, expect_done, w->tokens * o->epochs);
    }
    *done = done_u;
    *lanes_out = lanes;
    return EMB_OK;
}

/* The first n-gram bucket row of the input table (subwords) holding NaN or an infinity, or
 * -1 (the words' rows are checked by emb__w2v_find_nonfinite). */
static int64_t nonfinite_bucket(const emb_w2v *w) {
    const int64_t dim = w->o.dim, end = input_rows(w);
    for (int64_t r = w->V; r < end; r++) {
        const float *v = w->syn0 + r * dim;
        float acc = 0.0f;
        for (int64_t k = 0; k < dim; k++) acc += v[k] - v[k]; /* NaN iff not finite */
        if (acc != 0.0f) return r;
    }
    return -1;
}

/* Version 3's phrase options against this run's. */
static emb_status check_phrases(rd *r, const emb_w2v_options *o, const char *checkpoint) {
    const bool ph = o->phrases > 0;
    const uint64_t passes = get_u64(r), mc = get_u64(r);
    const double thr = get_f64(r);
    char delim[17] = {0}, want[16] = {0};
    (void)get(r, delim, 16);
    if (ph) memcpy(want, o->phrases_delimiter, strlen(o->phrases_delimiter));
    /* the passes, and the scorer above them (0 for gensim's default, as before npmi) */
    if ((passes & 0xff) != (uint64_t)o->phrases)
        DIFF("phrases", "%" PRIu64, passes & 0xff, (uint64_t)o->phrases);
    if (passes >> 8 != (ph ? (uint64_t)o->phrases_scoring : 0))
        DIFF("phrases_scoring", "%" PRIu64, passes >> 8, (uint64_t)o->phrases_scoring);
    if (mc != (ph ? (uint64_t)o->phrases_min_count : 0))
        DIFF("phrases_min_count", "%" PRIu64, mc, (uint64_t)o->phrases_min_count);
    if (memcmp(&thr, &(double){ph ? o->phrases_threshold : 0.0}, sizeof thr) != 0)
        DIFF("phrases_threshold", "%g", thr, o->phrases_threshold);
    if (memcmp(delim, want, 16) != 0)
        DIFF("phrases_delimiter", "\"%s\"", delim, o->phrases_delimiter);
    return EMB_OK;
}

/* Version 4's list of corpus files, read past; the first one that differs from this run's
 * (by its text's bytes and fingerprint; a name alone may change) described in why[0..n)
 * as a user needs it to fix the command, or why[0] = 0 when none does. false when the list
 * is malformed. */
#define EMB__W2V_MAX_NAME 65536
static bool read_files(rd *r, const emb__corpus_files *run, char *why, size_t n) {
    why[0] = 0;
    const uint64_t nf = get_u64(r);
    if (r->bad || nf > (uint64_t)(r->end - r->p) / 24) return false;
    for (uint64_t i = 0; i < nf; i++) {
        const uint64_t len = get_u64(r);
        if (r->bad || len > EMB__W2V_MAX_NAME || (uint64_t)(r->end - r->p) < len + 16) return false;
        const char *name = (const char *)r->p;
        r->p += len;
        const uint64_t bytes = get_u64(r), hash = get_u64(r);
        if (why[0] || i >= run->n) continue;
        const emb__corpus_file *f = &run->v[i];
        if (f->bytes == bytes && f->hash == hash) continue;
        snprintf(why, n,
                 "file %" PRIu64 " of %" PRIu64 " differs: the checkpoint's is %.*s (%" PRIu64
                 " bytes of text, fingerprint %016" PRIx64 "), this run's is %s (%" PRIu64
                 " bytes, fingerprint %016" PRIx64 ")",
                 i + 1, nf, (int)(len < 1024 ? len : 1024), name, bytes, hash, f->name, f->bytes,
                 f->hash);
    }
    if (!why[0] && nf != run->n && nf > 0 && run->n > 0) {
        const emb__corpus_file *f = nf < run->n ? &run->v[nf] : NULL;
        if (f)
            snprintf(why, n,
                     "this run reads %zu files, the checkpoint was written for the first %" PRIu64
                     " of them: file %" PRIu64 ", %s (%" PRIu64 " bytes of text), is new",
                     run->n, nf, nf + 1, f->name, f->bytes);
        else
            snprintf(why, n,
                     "the checkpoint was written for %" PRIu64 " files, this run reads the "
                     "first %zu of them: file %zu and later are missing",
                     nf, run->n, run->n + 1);
    }
    return true;
}

/* The options stored in a checkpoint of version `ver` against this run's. */
static emb_status check_options(rd *r, const emb_w2v *w, uint64_t ver, const char *checkpoint) {
    const emb_w2v_options *o = &w->o;
    uint64_t v;
    if ((v = get_u64(r)) != (uint64_t)o->model) DIFF("model", "%" PRIu64, v, (uint64_t)o->model);
    if ((v = get_u64(r)) != (uint64_t)o->dim) DIFF("dim", "%" PRIu64, v, (uint64_t)o->dim);
    if ((v = get_u64(r)) != (uint64_t)o->window) DIFF("window", "%" PRIu64, v, (uint64_t)o->window);
    if ((v = get_u64(r)) != (uint64_t)o->negative)
        DIFF("negative", "%" PRIu64, v, (uint64_t)o->negative);
    double d;
    if ((d = get_f64(r)) != o->sample) DIFF("sample", "%g", d, o->sample);
    if ((v = get_u64(r)) != (uint64_t)o->min_count)
        DIFF("min_count", "%" PRIu64, v, (uint64_t)o->min_count);
    if ((v = get_u64(r)) != (uint64_t)o->max_vocab)
        DIFF("max_vocab", "%" PRIu64, v, (uint64_t)o->max_vocab);
    if ((v = get_u64(r)) != (uint64_t)o->epochs) DIFF("epochs", "%" PRIu64, v, (uint64_t)o->epochs);
    if ((d = get_f64(r)) != o->alpha) DIFF("alpha", "%g", d, o->alpha);
    if ((d = get_f64(r)) != o->min_alpha) DIFF("min_alpha", "%g", d, o->min_alpha);
    if ((v = get_u64(r)) != (uint64_t)o->cbow_mean)
        DIFF("cbow_mean", "%" PRIu64, v, (uint64_t)o->cbow_mean);
    if ((v = get_u64(r)) != (uint64_t)w->nt) DIFF("lanes", "%" PRIu64, v, (uint64_t)w->nt);
    if ((v = get_u64(r)) != o->seed) DIFF("seed", "%" PRIu64, v, o->seed);
    if ((v = get_u64(r)) != (uint64_t)o->lowercase)
        DIFF("lowercase", "%" PRIu64, v, (uint64_t)o->lowercase);
    if ((v = get_u64(r)) != (uint64_t)o->strip_punct)
        DIFF("strip_punct", "%" PRIu64, v, (uint64_t)o->strip_punct);
    if ((v = get_u64(r)) != (uint64_t)o->max_sentence)
        DIFF("max_sentence", "%" PRIu64, v, (uint64_t)o->max_sentence);
    if ((v = get_u64(r)) != (uint64_t)o->shared_negatives)
        DIFF("shared_negatives", "%" PRIu64, v, (uint64_t)o->shared_negatives);
    /* subwords: version 3 stores them; older versions were written without */
    const uint64_t maxn = o->maxn, minn = o->maxn > 0 ? (uint64_t)o->minn : 0,
                   bucket = o->maxn > 0 ? (uint64_t)o->bucket : 0;
    if (ver < 3 && maxn > 0)
        return emb__error(EMB_ERR_FORMAT,
                          "%s was written without subwords (version %" PRIu64
                          "), but this run has maxn %d (resume with the same settings)",
                          checkpoint, ver, o->maxn);
    if (ver >= 3) {
        const uint64_t cminn = get_u64(r), cmaxn = get_u64(r), cbucket = get_u64(r);
        if (cmaxn != maxn) DIFF("maxn", "%" PRIu64, cmaxn, maxn);
        if (cminn != minn) DIFF("minn", "%" PRIu64, cminn, minn);
        if (cbucket != bucket) DIFF("bucket", "%" PRIu64, cbucket, bucket);
        emb_status st = check_phrases(r, o, checkpoint);
        if (st) return st;
    } else if (o->phrases > 0) {
        return emb__error(EMB_ERR_FORMAT,
                          "%s was written without phrases (version %" PRIu64
                          "), but this run has phrases %d (resume with the same settings)",
                          checkpoint, ver, o->phrases);
    }
    return EMB_OK;
}

static emb_status restore(emb_w2v *w, const unsigned char *data, size_t n, const char *checkpoint) {
    if (n < 16 || memcmp(data, EMB__W2V_MAGIC, 8) != 0)
        return emb__error(EMB_ERR_FORMAT, "%s is not an emb word2vec checkpoint", checkpoint);
    rd r = {data + 8, data + n - 8, false};
    uint64_t ver = get_u64(&r);
    if (ver < EMB__W2V_OLDEST || ver > EMB__W2V_VERSION)
        return emb__error(EMB_ERR_FORMAT,
                          "%s: checkpoint version %" PRIu64 " (this emb reads %u to %u)",
                          checkpoint, ver, EMB__W2V_OLDEST, EMB__W2V_VERSION);
    /* the checksum covers everything between the magic and itself */
    const uint64_t basis = ver == 1 ? EMB__W2V_V1_BASIS : EMB__FNV64_INIT;
    if (emb__fnv64_update(basis, data + 8, n - 16) != emb__get_u64le(data + n - 8))
        return emb__error(EMB_ERR_FORMAT, "%s is corrupt (checksum mismatch)", checkpoint);
    emb_status st = check_options(&r, w, ver, checkpoint);
    if (st) return st;
    const emb_w2v_options *o = &w->o;
    char why[2400];
    if (ver >= 4 && !read_files(&r, &w->files, why, sizeof why))
        return emb__error(EMB_ERR_FORMAT, "%s is truncated or malformed (its list of corpus files)",
                          checkpoint);
    uint64_t V = get_u64(&r), nids = get_u64(&r), fp = get_u64(&r);
    if (r.bad) return emb__error(EMB_ERR_FORMAT, "%s is truncated", checkpoint);
    const bool other = V != (uint64_t)w->V || nids != (uint64_t)w->n_ids || fp != w->fingerprint;
    if (other && ver >= 4 && why[0])
        return emb__error(EMB_ERR_FORMAT,
                          "%s was written for another corpus: %s (resume with the files the "
                          "checkpoint was written for, in the same order)",
                          checkpoint, why);
    if (other)
        return emb__error(
            EMB_ERR_FORMAT,
            "%s was written for another corpus (%" PRIu64 " words, %" PRIu64
            " token ids; this corpus gives %" PRId64 " words, %" PRId64 " token ids%s)",
            checkpoint, V, nids, w->V, w->n_ids,
            V == (uint64_t)w->V && nids == (uint64_t)w->n_ids ? ", same sizes but different tokens"
                                                              : "");
    /* Progress: every field in range and consistent with the others (the checksum only
     * says the file is as it was written, not that it was written by emb). */
    uint64_t done_u = 0;
    emb__w2v_lane *lanes = NULL;
    st = read_progress(w, &r, checkpoint, &done_u, &lanes);
    if (st) return st;
    for (int64_t i = 0; i < w->V && !r.bad; i++) {
        uint64_t len = get_u64(&r);
        size_t wl;
        const char *s = emb_vocab_word(w->vocab, i, &wl);
        if (len != wl || (size_t)(r.end - r.p) < len || memcmp(r.p, s, wl) != 0) {
            free(lanes);
            return emb__error(EMB_ERR_FORMAT,
                              "%s was written for another corpus (word %" PRId64 " differs)",
                              checkpoint, i);
        }
        r.p += len;
        (void)get_u64(&r); /* count: the corpus fingerprint already matched */
    }
    const size_t tbytes = (size_t)w->V * (size_t)o->dim * sizeof(float),
                 ibytes = (size_t)input_rows(w) * (size_t)o->dim * sizeof(float);
    if (r.bad || (size_t)(r.end - r.p) != ibytes + tbytes) {
        free(lanes);
        return emb__error(EMB_ERR_FORMAT, "%s is truncated or malformed", checkpoint);
    }
    emb__f32le_decode(w->syn0, r.p, ibytes / 4);
    emb__f32le_decode(w->syn1, r.p + ibytes, tbytes / 4);
    int table;
    int64_t row;
    const int64_t bad_bucket = nonfinite_bucket(w);
    if (bad_bucket >= 0) {
        free(lanes);
        return emb__error(EMB_ERR_FORMAT,
                          "%s holds NaN or infinite values in n-gram bucket %" PRId64
                          " (input row %" PRId64 "): it was saved from a run that had diverged",
                          checkpoint, bad_bucket - w->V, bad_bucket);
    }
    if (emb__w2v_find_nonfinite(w, &table, &row)) {
        free(lanes);
        return emb__error(EMB_ERR_FORMAT,
                          "%s holds NaN or infinite values in the %s vector of \"%s\" (row %" PRId64
                          "): it was saved from a run that had diverged",
                          checkpoint, table ? "output" : "input",
                          emb_vocab_word(w->vocab, row, NULL), row);
    }
    memcpy(w->lanes, lanes, (size_t)w->nt * sizeof *lanes);
    w->words_done = (int64_t)done_u;
    free(lanes);
    return EMB_OK;
}

/* A model's tables at r (emb__w2v_read_model): the input table's rows (the words', then the
 * n-gram buckets'), then the output's, which must be all the bytes left; copied into new
 * arrays, refused when a value is NaN or infinite. */
static emb_status read_model_tables(const rd *r, const unsigned char *data, const char *path,
                                    uint64_t V, uint64_t bucket, uint64_t dim, float **t0,
                                    float **t1) {
    /* the rows are counted against the bytes left before they are multiplied (bucket < 2^31) */
    const uint64_t rows0 = V + bucket, row_bytes = dim * sizeof(float);
    const size_t have = (size_t)(r->end - r->p);
    if (rows0 + V > have / row_bytes || have != (rows0 + V) * row_bytes)
        return emb__error(EMB_ERR_FORMAT,
                          "%s: the tables at offset %zu hold %zu bytes, not %" PRIu64
                          " rows of %" PRIu64 " bytes",
                          path, (size_t)(r->p - data), have, rows0 + V, row_bytes);
    const size_t bytes0 = (size_t)(rows0 * row_bytes), tbytes = (size_t)(V * row_bytes);
    float *a = malloc(bytes0), *b = malloc(tbytes);
    emb_status st = a && b ? EMB_OK
                           : emb__error(EMB_ERR_NOMEM, "%s: cannot allocate the tables (%zu bytes)",
                                        path, bytes0 + tbytes);
    if (st == EMB_OK) {
        memcpy(a, r->p, bytes0), memcpy(b, r->p + bytes0, tbytes);
        const size_t n0 = bytes0 / sizeof(float), n1 = tbytes / sizeof(float);
        for (size_t k = 0; k < n0 + n1 && st == EMB_OK; k++)
            if (!isfinite(k < n0 ? a[k] : b[k - n0]))
                st = emb__error(EMB_ERR_FORMAT,
                                "%s holds NaN or infinite values: it was saved from a run that had "
                                "diverged",
                                path);
    }
    if (st) {
        free(a), free(b);
        return st;
    }
    *t0 = a, *t1 = b;
    return EMB_OK;
}

/* A checkpoint read as a model to continue training from (emb_w2v_continue): its options'
 * dim, its words with their counts and both tables, whatever corpus it was trained on. Every
 * size is checked against the bytes the file holds before anything is allocated. */
emb_status emb__w2v_read_model(const unsigned char *data, size_t n, const char *path,
                               int64_t *dim_out, int64_t sub[3], emb_vocab **vocab_out,
                               float **syn0_out, float **syn1_out) {
    if (n < 16 || memcmp(data, EMB__W2V_MAGIC, 8) != 0)
        return emb__error(EMB_ERR_FORMAT,
                          "%s is not an emb word2vec model (a checkpoint or --save-state file)",
                          path);
    rd r = {data + 8, data + n - 8, false};
    uint64_t ver = get_u64(&r);
    if (ver < EMB__W2V_OLDEST || ver > EMB__W2V_VERSION)
        return emb__error(EMB_ERR_FORMAT,
                          "%s: checkpoint version %" PRIu64 " (this emb reads %u to %u)", path, ver,
                          EMB__W2V_OLDEST, EMB__W2V_VERSION);
    const uint64_t basis = ver == 1 ? EMB__W2V_V1_BASIS : EMB__FNV64_INIT;
    if (emb__fnv64_update(basis, data + 8, n - 16) != emb__get_u64le(data + n - 8))
        return emb__error(EMB_ERR_FORMAT, "%s is corrupt (checksum mismatch)", path);
    /* model .. shared_negatives (17 fields), [version 3: minn, maxn, bucket, the phrase
     * fields], V, token ids, fingerprint, done */
    uint64_t f[29];
    const int nf = EMB__W2V_HEAD_FIELDS(ver);
    const emb__corpus_files none = {NULL, 0};
    char why[8];
    for (int k = 0; k < nf; k++) {
        /* version 4: the list of corpus files before the vocabulary size */
        if (k == nf - 4 && ver >= 4 && !read_files(&r, &none, why, sizeof why))
            return emb__error(EMB_ERR_FORMAT,
                              "%s is truncated or malformed (its list of corpus files)", path);
        f[k] = get_u64(&r);
    }
    const uint64_t dim = f[1], lanes = f[11], V = f[nf - 4], maxn = nf > 21 ? f[18] : 0,
                   minn = maxn > 0 ? f[17] : 0, bucket = maxn > 0 ? f[19] : 0;
    if (r.bad)
        return emb__error(EMB_ERR_FORMAT, "%s is truncated (offset %zu)", path,
                          (size_t)(r.p - data));
    if (dim < 1 || dim > (1u << 20) || lanes < 1 || lanes > EMB__W2V_LANES_MAX || V < 1 ||
        V >= INT32_MAX)
        return emb__error(EMB_ERR_FORMAT,
                          "%s is malformed: dim %" PRIu64 ", lanes %" PRIu64 ", %" PRIu64 " words",
                          path, dim, lanes, V);
    /* the subword options as a run checks them (emb_w2v_options_check): n-grams of 1 to 100
     * characters, 1 to 2^31 - 1 buckets, which with the words' rows stay below 2^32 rows */
    if (maxn > 0 && (minn < 1 || minn > maxn || maxn > 100 || bucket < 1 || bucket >= INT32_MAX))
        return emb__error(EMB_ERR_FORMAT,
                          "%s is malformed: subwords minn %" PRIu64 ", maxn %" PRIu64
                          ", bucket %" PRIu64,
                          path, minn, maxn, bucket);
    if ((size_t)(r.end - r.p) < lanes * 40)
        return emb__error(EMB_ERR_FORMAT, "%s is truncated (offset %zu)", path,
                          (size_t)(r.p - data));
    r.p += lanes * 40; /* each lane's range, position, epoch and random state */
    /* the words need at least 16 bytes each, the tables 8 * dim: checked before allocating */
    uint64_t left = (uint64_t)(r.end - r.p);
    if (V > left / 16 || dim > (left / V) / 8)
        return emb__error(EMB_ERR_FORMAT,
                          "%s is truncated: %" PRIu64 " words of dimension %" PRIu64
                          " do not fit in its %" PRIu64 " bytes after offset %zu",
                          path, V, dim, left, (size_t)(r.p - data));
    emb_vocab *vocab = NULL;
    emb_status st = emb_vocab_create(&vocab);
    if (st == EMB_OK) st = emb_vocab_reserve(vocab, (int64_t)V);
    for (uint64_t i = 0; i < V && st == EMB_OK; i++) {
        size_t at = (size_t)(r.p - data);
        uint64_t len = get_u64(&r);
        if (r.bad || len < 1 || len > EMB_VOCAB_MAX_WORD || (uint64_t)(r.end - r.p) < len + 8) {
            st = emb__error(EMB_ERR_FORMAT,
                            "%s: word %" PRIu64 " at offset %zu: bad length %" PRIu64, path, i, at,
                            len);
            break;
        }
        const char *w = (const char *)r.p;
        r.p += len;
        uint64_t count = get_u64(&r);
        bool added = false;
        if (!emb__utf8_valid(w, (size_t)len))
            st = emb__error(EMB_ERR_FORMAT, "%s: word %" PRIu64 " at offset %zu is not valid UTF-8",
                            path, i, at);
        else if (count < 1 || count > INT64_MAX)
            st = emb__error(EMB_ERR_FORMAT, "%s: word %" PRIu64 " at offset %zu has count %" PRIu64,
                            path, i, at, count);
        else if ((st = emb_vocab_add(vocab, w, (size_t)len, (int64_t)count, NULL, &added)) ==
                     EMB_OK &&
                 !added)
            st = emb__error(EMB_ERR_FORMAT,
                            "%s: word %" PRIu64 " at offset %zu repeats an earlier one", path, i,
                            at);
    }
    float *t0 = NULL, *t1 = NULL;
    if (st == EMB_OK) st = read_model_tables(&r, data, path, V, bucket, dim, &t0, &t1);
    if (st) {
        emb_vocab_free(vocab), free(t0), free(t1);
        return st;
    }
    *dim_out = (int64_t)dim;
    sub[0] = (int64_t)minn, sub[1] = (int64_t)maxn, sub[2] = (int64_t)bucket;
    *vocab_out = vocab;
    *syn0_out = t0;
    *syn1_out = t1;
    return EMB_OK;
}

/* The lanes a checkpoint was written with (its 13th field; before lanes were apart from
 * threads, one per thread), or 0 when the file is too short or the value out of range
 * (restore() then reports what is wrong). The resumed run takes them: each lane's range,
 * position and random state are part of the state, so the run goes on as it would have on
 * whatever number of threads it gets now. */
static int checkpoint_lanes(const unsigned char *data, size_t n) {
    const size_t at = 8 + 8 + 11 * 8;
    if (n < at + 8 || memcmp(data, EMB__W2V_MAGIC, 8) != 0) return 0;
    uint64_t v;
    memcpy(&v, data + at, 8);
    return v >= 1 && v <= EMB__W2V_LANES_MAX ? (int)v : 0;
}

emb_status emb_w2v_resume(const emb_w2v_options *opts, const char *corpus, const char *checkpoint,
                          emb_w2v **out) {
    if (!corpus) return emb__null("corpus");
    return emb_w2v_resume_files(opts, &corpus, 1, checkpoint, out);
}

emb_status emb_w2v_resume_files(const emb_w2v_options *opts, const char *const *corpus, size_t n,
                                const char *checkpoint, emb_w2v **out) {
    if (!out) return emb__null("out");
    if (!opts) return emb__null("options");
    if (!checkpoint) return emb__null("checkpoint");
    /* read into memory, not mapped: a checkpoint truncated meanwhile is an error, not SIGBUS */
    emb__file f;
    emb_status st = emb__file_open(checkpoint, &f, EMB__FILE_READ);
    if (st) return st;
    emb_w2v *w;
    emb_w2v_options o = *opts;
    if (checkpoint_lanes(f.data, f.size) > 0) o.lanes = checkpoint_lanes(f.data, f.size);
    st = emb_w2v_create_from_files(&o, corpus, n, &w);
    if (st == EMB_OK) {
        st = restore(w, f.data, f.size, checkpoint);
        if (st) emb_w2v_free(w);
    }
    emb__file_close(&f);
    if (st == EMB_OK) *out = w;
    return st;
}
