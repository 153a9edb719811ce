/* tests/fuzz/fuzz_api.c: a structured libFuzzer harness of emb's public API.
 *
 * The fuzz input is decoded as a program: a sequence of operations (the table `ops` at the
 * end of this file) on a small world of live objects: tensor slots with harness-owned
 * buffers, embeddings, EmbeddingBags, Linear layers, optimizers, sparse gradients, k-NN
 * indexes, generators and a saved generator state. (The file readers have their own
 * fuzzers, fuzz_read_*.c.) Every argument is drawn from the input: random shapes (empty, huge,
 * negative, too many dimensions), wrong dtypes, NULL pointers, out-of-range indices,
 * non-finite hyper-parameters.
 *
 * Checks, besides ASan/UBSan/LeakSanitizer (built with -fno-sanitize-recover):
 *  - every failing call leaves everything the caller owns unchanged: the whole world is
 *    serialised before each call and compared after a failure (tensor buffers and structs,
 *    embedding and Linear weights, sparse gradients, generator states, optimizer step
 *    counts), and out-pointers (emb_embedding **out, size_t *needed, ...) keep a sentinel;
 *  - a failing call returns a known negative status and leaves a non-empty emb_errmsg();
 *  - a few cheap oracles on success (a lookup copies the rows bitwise, repr's truncation).
 * A violated check prints what happened and calls abort(): libFuzzer then saves the input.
 *
 * Adding an operation: write `static void op_xxx(world *w, rd *r)` that decodes its
 * arguments with the rd_* helpers and the pick_* helpers, makes each API call through
 * API(w, call) (which does the snapshot and the checks), installs what a successful call
 * created into the world, and add a line to `ops`. Never change the world between
 * API(...)'s snapshot and the call (decode first, call last). See tests/fuzz/README.md.
 */
#include <emb/emb.h>

#include "internal.h" /* emb__tensor_same_shape, emb__dtype_torch_type */

#include <float.h>
#include <inttypes.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

/* ---------------------------------------------------------------------------------------
 * Reading the input
 * ------------------------------------------------------------------------------------- */

typedef struct rd {
    const uint8_t *p;
    size_t n, i;
} rd;

static bool rd_done(const rd *r) {
    return r->i >= r->n;
}

static uint8_t rd_u8(rd *r) {
    return r->i < r->n ? r->p[r->i++] : 0;
}

static uint32_t rd_u32(rd *r) {
    uint32_t v = 0;
    for (int k = 0; k < 4; k++) v |= (uint32_t)rd_u8(r) << (8 * k);
    return v;
}

static uint64_t rd_u64(rd *r) {
    return (uint64_t)rd_u32(r) | ((uint64_t)rd_u32(r) << 32);
}

static bool rd_bool(rd *r) {
    return rd_u8(r) & 1;
}

/* true with probability about 1/n */
static bool rd_chance(rd *r, int n) {
    return rd_u8(r) % n == 0;
}

static const int64_t interesting_i64[] = {
    0,
    1,
    2,
    3,
    4,
    5,
    7,
    8,
    16,
    17,
    31,
    64,
    -1,
    -2,
    -3,
    -100,
    INT64_MAX,
    INT64_MIN,
    INT64_MAX - 1,
    INT32_MAX,
    INT32_MIN,
    (int64_t)INT32_MAX + 1,
    INT64_C(1) << 32,
    INT64_C(1) << 40,
    INT64_C(1) << 62,
    INT64_C(1) << 61,
    -(INT64_C(1) << 62),
    INT64_C(1) << 31,
    1000,
    1001,
    UINT16_MAX,
    EMB_PADDING_NONE,
};

/* Mostly small values in [lo, lo + 16), sometimes an interesting or a raw 64-bit one. */
static int64_t rd_i64(rd *r, int64_t lo) {
    uint8_t b = rd_u8(r);
    if (b < 192) return lo + (b % 16);
    if (b < 250) return interesting_i64[b % (sizeof interesting_i64 / sizeof *interesting_i64)];
    return (int64_t)rd_u64(r);
}

static const double interesting_f64[] = {
    0.0,     -0.0,     1.0,      -1.0,      0.5,  2.0,     3.0,    1e-3,
    0.9,     0.999,    1e-8,     1e-10,     0.1,  10.0,    1e30,   -1e30,
    DBL_MAX, -DBL_MAX, INFINITY, -INFINITY, NAN,  1e-300,  5e-324, FLT_MAX,
    1.5,     -0.5,     100.0,    7.0,       0.25, 65504.0, 1e38,   3.4028235677973366e38,
};

static double rd_f64(rd *r) {
    uint8_t b = rd_u8(r);
    if (b < 224) return interesting_f64[b % (sizeof interesting_f64 / sizeof *interesting_f64)];
    uint64_t u = rd_u64(r);
    double d;
    memcpy(&d, &u, sizeof d);
    return d;
}

/* A float element: small integers and fractions mostly, special values sometimes. */
static float rd_f32(rd *r) {
    uint8_t b = rd_u8(r);
    if (b < 160) return (float)((int)(b % 32) - 16) * 0.25f;
    if (b < 250)
        return (float)interesting_f64[b % (sizeof interesting_f64 / sizeof *interesting_f64)];
    uint32_t u = rd_u32(r);
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* ---------------------------------------------------------------------------------------
 * The world
 * ------------------------------------------------------------------------------------- */

#define NT        8     /* tensor slots */
#define NE        3     /* embeddings */
#define NL        2     /* Linear layers */
#define NO        2     /* optimizers */
#define NP        6     /* parameters per optimizer */
#define NS        2     /* sparse gradients */
#define NG        2     /* generators (index NG means NULL: the default generator) */
#define NK        2     /* k-NN indexes */
#define NB        2     /* embedding bags */
#define NQ        2     /* reduced-precision tables */
#define NOUT      1024  /* entries of the ids/scores output arrays */
#define MAX_ELEMS 2048  /* largest tensor the harness allocates */
#define MAX_TABLE 65536 /* largest embedding / Linear weight (elements) the harness asks for */

typedef struct tslot {
    emb_tensor t;
    void *buf; /* harness-owned storage (t.data is buf, or NULL) */
    size_t bytes;
    int pins; /* registered as an optimizer parameter or wrapped by an embedding */
} tslot;

typedef struct eslot {
    emb_embedding *e;
    const void *w; /* the weight's memory, for snapshots (also when read-only) */
    size_t wbytes;
    int pins;
    int wrapped_slot;   /* tensor slot the table borrows, or -1 */
    void *handed;       /* memory handed over with a release callback, or NULL */
    int *release_count; /* where the release callback counts (heap, survives the slot) */
} eslot;

typedef struct lslot {
    emb_linear *l;
    emb_tensor w, b;
    int pins;
} lslot;

typedef struct pref {
    int kind; /* 0 tensor slot, 1 embedding weight, 2 Linear weight, 3 Linear bias */
    int idx;
    int id;
} pref;

typedef struct oslot {
    emb_optimizer *o;
    int np;
    pref p[NP];
} oslot;

typedef struct kslot {
    emb_knn *k;
    int table; /* tensor slot it borrows (pinned) */
} kslot;

typedef struct bslot {
    emb_bag *b;
    int pins;
    int wrapped_slot; /* tensor slot the table borrows, or -1 */
} bslot;

typedef struct qslot {
    emb_qtable *q;
    int wrapped_slot; /* tensor slot whose memory the table is (pinned), or -1 */
} qslot;

typedef struct world {
    tslot t[NT];
    qslot q[NQ];
    kslot k[NK];
    bslot b[NB];
    int64_t ids[NOUT];
    float scores[NOUT];
    double rho;
    unsigned char *ostate; /* a saved optimizer state (emb_optimizer_save_state) */
    size_t ostate_len;
    eslot e[NE];
    lslot l[NL];
    oslot o[NO];
    emb_sparse_grad s[NS];
    bool s_init[NS];
    emb_generator *g[NG];
    /* generators at the last snapshot: g[0..NG-1] and the default one (index NG), and a
     * copy of each one's struct (see gen_snapshot) */
    const emb_generator *g_was[NG + 1];
    void *g_raw[NG + 1];
    unsigned char state[4096];
    size_t state_len;
    /* snapshots */
    unsigned char *snap;
    size_t snap_len, snap_cap;
    unsigned char *snap2;
    size_t snap2_len, snap2_cap;
    const char *op;
} world;

static const char *cur_op = "?";

#define FAIL(...)                                                                                  \
    do {                                                                                           \
        fprintf(stderr, "\n*** emb fuzz finding in op %s: ", cur_op);                              \
        fprintf(stderr, __VA_ARGS__);                                                              \
        fprintf(stderr, "\n");                                                                     \
        abort();                                                                                   \
    } while (0)

static void sn_put(unsigned char **b, size_t *len, size_t *cap, const void *p, size_t n) {
    if (*len + n > *cap) {
        size_t c = *cap ? *cap : 4096;
        while (c < *len + n) c *= 2;
        unsigned char *q = realloc(*b, c);
        if (!q) abort();
        *b = q;
        *cap = c;
    }
    if (n) memcpy(*b + *len, p, n);
    *len += n;
}

/* Serialises everything the caller owns into (b, len). */
static void serialise(world *w, unsigned char **b, size_t *len, size_t *cap) {
    *len = 0;
#define PUT(p, n) sn_put(b, len, cap, (p), (n))
    for (int k = 0; k < NT; k++) {
        PUT(&w->t[k].t, sizeof w->t[k].t);
        if (w->t[k].buf) PUT(w->t[k].buf, w->t[k].bytes);
    }
    for (int k = 0; k < NE; k++) {
        if (!w->e[k].e) continue;
        PUT(w->e[k].w, w->e[k].wbytes);
        bool rg = emb_embedding_requires_grad(w->e[k].e);
        PUT(&rg, sizeof rg);
    }
    for (int k = 0; k < NB; k++) {
        if (!w->b[k].b) continue;
        emb_tensor v;
        emb_embedding *e = emb_bag_embedding(w->b[k].b);
        if (emb_embedding_weight_const(e, &v) != EMB_OK) abort();
        PUT(v.data, emb_tensor_nbytes(&v));
        bool rg = emb_embedding_requires_grad(e);
        PUT(&rg, sizeof rg);
    }
    for (int k = 0; k < NQ; k++) {
        if (!w->q[k].q) continue;
        PUT(emb_qtable_data(w->q[k].q), emb_qtable_nbytes(w->q[k].q));
    }
    for (int k = 0; k < NL; k++) {
        if (!w->l[k].l) continue;
        PUT(w->l[k].w.data, emb_tensor_nbytes(&w->l[k].w));
        if (w->l[k].b.data) PUT(w->l[k].b.data, emb_tensor_nbytes(&w->l[k].b));
    }
    for (int k = 0; k < NO; k++) {
        if (!w->o[k].o) continue;
        for (int j = 0; j < w->o[k].np; j++) {
            int64_t s = emb_optimizer_param_steps(w->o[k].o, w->o[k].p[j].id);
            PUT(&s, sizeof s);
        }
        /* the whole state: options (lr), step counts, moments, momentum buffers */
        size_t n = emb_optimizer_state_nbytes(w->o[k].o);
        unsigned char *buf = malloc(n ? n : 1);
        if (!buf) abort();
        if (emb_optimizer_save_state(w->o[k].o, buf, n) != EMB_OK)
            FAIL("emb_optimizer_save_state failed while taking a snapshot: %s", emb_errmsg());
        PUT(buf, n);
        free(buf);
    }
    for (int k = 0; k < NS; k++) {
        const emb_sparse_grad *g = &w->s[k];
        PUT(&g->num_rows, 8);
        PUT(&g->dim, 8);
        PUT(&g->nnz, 8);
        PUT(&g->coalesced, sizeof g->coalesced);
        if (w->s_init[k] && g->nnz > 0) {
            PUT(g->indices, (size_t)g->nnz * 8);
            PUT(g->values, (size_t)(g->nnz * g->dim) * 4);
        }
    }
    /* generators: gen_snapshot and gen_changed */
    PUT(w->state, sizeof w->state);
    PUT(w->ids, sizeof w->ids);
    PUT(w->scores, sizeof w->scores);
    PUT(&w->rho, sizeof w->rho);
#undef PUT
}

/* Generators are compared apart: emb_generator_get_state of every generator before every
 * call was half of this harness's time. A snapshot copies each generator's struct instead
 * (a memcpy); after a failed call, a generator whose struct is byte for byte the same has
 * the same state, and one whose struct differs is compared by emb_generator_get_state of
 * the copy and of the generator, as before (a struct may differ in bytes the state does
 * not show, such as the default generator seeded on first use). */
static void gen_snapshot(world *w) {
    size_t n = emb__generator_nbytes();
    for (int k = 0; k <= NG; k++) {
        const emb_generator *g = k < NG ? w->g[k] : emb_default_generator();
        w->g_was[k] = g;
        if (!g) continue;
        if (!w->g_raw[k] && !(w->g_raw[k] = malloc(n))) abort();
        memcpy(w->g_raw[k], g, n);
    }
}

/* The first generator whose state differs from the last snapshot's (NG: the default
 * generator), or -1. */
static int gen_changed(world *w) {
    size_t n = emb__generator_nbytes(), ss = emb_generator_state_nbytes();
    unsigned char a[4096], b[4096];
    if (ss > sizeof a) abort();
    for (int k = 0; k <= NG; k++) {
        const emb_generator *g = k < NG ? w->g[k] : emb_default_generator();
        if (g != w->g_was[k]) return k;
        if (!g || memcmp(w->g_raw[k], g, n) == 0) continue;
        if (emb_generator_get_state(w->g_raw[k], a, ss) != EMB_OK ||
            emb_generator_get_state(g, b, ss) != EMB_OK)
            abort();
        if (memcmp(a, b, ss) != 0) return k;
    }
    return -1;
}

static void snapshot(world *w) {
    serialise(w, &w->snap, &w->snap_len, &w->snap_cap);
    gen_snapshot(w);
}

/* Per-call counts of successes and failures, printed at exit when EMB_FUZZ_STATS is set
 * (to see which calls the fuzzer gets past their checks). */
#define NSTAT 128
static struct {
    const char *call;
    unsigned long ok, err;
} stats[NSTAT];

static void count_call(const char *call, bool ok) {
    for (int i = 0; i < NSTAT; i++) {
        if (!stats[i].call) stats[i].call = call;
        if (stats[i].call == call) {
            if (ok)
                stats[i].ok++;
            else
                stats[i].err++;
            return;
        }
    }
}

static void print_stats(void) {
    for (int i = 0; i < NSTAT && stats[i].call; i++)
        fprintf(stderr, "%10lu ok %10lu err  %.70s\n", stats[i].ok, stats[i].err, stats[i].call);
}

/* The checks after one API call. */
static const char *verbose; /* EMB_FUZZ_VERBOSE=<substring of a call>: print its errors */

static emb_status check_call(world *w, emb_status st, const char *call) {
    count_call(call, st == EMB_OK);
    if (verbose && st && strstr(call, verbose)) fprintf(stderr, "%.40s: %s\n", call, emb_errmsg());
    if (st == EMB_OK) return st;
    const char *name = emb_status_str(st);
    if (st > 0 || strcmp(name, "unknown status") == 0)
        FAIL("%s returned an unknown status %d", call, (int)st);
    const char *msg = emb_errmsg();
    if (!msg || !msg[0]) FAIL("%s failed with %d (%s) but emb_errmsg() is empty", call, st, name);
    serialise(w, &w->snap2, &w->snap2_len, &w->snap2_cap);
    if (w->snap2_len != w->snap_len || memcmp(w->snap, w->snap2, w->snap_len) != 0) {
        size_t i = 0;
        while (i < w->snap_len && i < w->snap2_len && w->snap[i] == w->snap2[i]) i++;
        FAIL("%s failed with %d (%s: %s) but changed the caller's state (first difference "
             "at snapshot byte %zu of %zu/%zu)",
             call, st, name, msg, i, w->snap_len, w->snap2_len);
    }
    int g = gen_changed(w);
    if (g >= 0)
        FAIL("%s failed with %d (%s: %s) but changed the state of generator %d%s", call, st, name,
             msg, g, g == NG ? " (the default one)" : "");
    return st;
}

/* Every API call that can fail goes through this. */
#define API(w, call) (snapshot(w), emb_clear_error(), check_call((w), (call), #call))

/* ---------------------------------------------------------------------------------------
 * Tensor slots
 * ------------------------------------------------------------------------------------- */

static size_t dsize(emb_dtype d) {
    size_t s = emb_dtype_nbytes(d);
    return s ? s : 1;
}

/* Valid, allocatable element count for (ndim, shape), or -1. */
static int64_t small_numel(int ndim, const int64_t *shape) {
    if (ndim < 0 || ndim > EMB_MAX_DIMS) return -1;
    int64_t n = 1;
    bool empty = false;
    for (int i = 0; i < ndim; i++) {
        if (shape[i] < 0) return -1;
        if (shape[i] == 0) empty = true;
    }
    if (empty) return 0;
    for (int i = 0; i < ndim; i++)
        if (__builtin_mul_overflow(n, shape[i], &n) || n > MAX_ELEMS) return -1;
    return n;
}

static void fill(rd *r, emb_dtype dt, void *buf, int64_t n, int64_t idx_hi) {
    for (int64_t i = 0; i < n; i++) {
        switch (dt) {
        case EMB_FLOAT32:
            ((float *)buf)[i] = rd_f32(r);
            break;
        case EMB_FLOAT64:
            ((double *)buf)[i] = rd_f32(r);
            break;
        case EMB_INT64: {
            uint8_t b = rd_u8(r);
            ((int64_t *)buf)[i] =
                b < 224 && idx_hi > 0 ? (int64_t)(b % (uint64_t)idx_hi) : rd_i64(r, -2);
            break;
        }
        case EMB_INT32: {
            uint8_t b = rd_u8(r);
            ((int32_t *)buf)[i] =
                b < 224 && idx_hi > 0 ? (int32_t)(b % (uint64_t)idx_hi) : (int32_t)rd_i64(r, -2);
            break;
        }
        default: {
            unsigned char *c = buf;
            for (size_t k = 0; k < dsize(dt); k++) c[i * dsize(dt) + k] = rd_u8(r);
        }
        }
    }
}

/* (Re)makes slot k with the given dtype and shape. The struct is stored as given even when
 * it is invalid (the API must reject it); storage is allocated when the shape is valid and
 * small, and data stays NULL otherwise (a NULL data pointer the API must reject when
 * numel > 0). Returns false when the slot is pinned. */
static bool tslot_make(world *w, rd *r, int k, emb_dtype dt, int ndim, const int64_t *shape,
                       int64_t idx_hi) {
    tslot *s = &w->t[k];
    if (s->pins) return false;
    free(s->buf);
    s->buf = NULL;
    s->bytes = 0;
    memset(&s->t, 0, sizeof s->t);
    s->t.dtype = dt;
    s->t.ndim = ndim;
    for (int i = 0; i < ndim && i < EMB_MAX_DIMS; i++) s->t.shape[i] = shape[i];
    int64_t n = small_numel(ndim, shape);
    if (n > 0) {
        s->bytes = (size_t)n * dsize(dt);
        s->buf = malloc(s->bytes);
        if (!s->buf) abort();
        fill(r, dt, s->buf, n, idx_hi);
        s->t.data = s->buf;
    } else if (n == 0 && rd_chance(r, 2)) {
        s->bytes = 1; /* an empty tensor with a non-NULL data pointer */
        s->buf = malloc(1);
        if (!s->buf) abort();
        *(unsigned char *)s->buf = 0;
        s->t.data = s->buf;
    }
    return true;
}

static emb_dtype rd_dtype(rd *r) {
    uint8_t b = rd_u8(r);
    if (b < 128) return EMB_FLOAT32;
    if (b < 192) return EMB_INT64;
    if (b < 220) return EMB_INT32;
    if (b < 250) return (emb_dtype)(b % 10);
    return (emb_dtype)(int)(int8_t)rd_u8(r); /* unknown values, negative ones included */
}

static int rd_ndim(rd *r) {
    uint8_t b = rd_u8(r);
    if (b < 240) return b % 5;
    static const int odd[] = {5, 8, 9, 10, -1, INT32_MIN, 64, 7};
    return odd[b % 8];
}

/* A dimension: mostly 0..6, sometimes huge or negative. */
static int64_t rd_dim(rd *r) {
    uint8_t b = rd_u8(r);
    if (b < 230) return b % 7;
    return rd_i64(r, 0);
}

static tslot *pick_t(world *w, rd *r) {
    return &w->t[rd_u8(r) % NT];
}

/* A tensor argument: a slot, or now and then NULL. */
static emb_tensor *arg_t(world *w, rd *r) {
    if (rd_chance(r, 24)) return NULL;
    return &pick_t(w, r)->t;
}

static emb_generator *pick_g(world *w, rd *r) {
    return w->g[rd_u8(r) % (NG + 1) % NG];
}
static emb_generator *arg_g(world *w, rd *r) {
    uint8_t b = rd_u8(r) % (NG + 1);
    return b < NG ? w->g[b] : NULL;
}

/* Output slot: with high probability reshaped to `shape` (or one dimension off by one)
 * so that calls get past their shape checks; returns the slot index, or -1 for NULL. */
static int out_slot(world *w, rd *r, emb_dtype dt, int ndim, const int64_t *shape) {
    if (rd_chance(r, 24)) return -1;
    int k = rd_u8(r) % NT;
    uint8_t mode = rd_u8(r);
    if (mode < 200) {
        int64_t sh[EMB_MAX_DIMS + 1];
        int nd = ndim;
        for (int i = 0; i < ndim && i < EMB_MAX_DIMS; i++) sh[i] = shape[i];
        if (nd > EMB_MAX_DIMS) nd = EMB_MAX_DIMS + 1; /* the API must refuse it */
        for (int i = EMB_MAX_DIMS; i < nd; i++) sh[i] = 1;
        if (mode >= 180 && nd > 0 && sh[mode % nd] < INT64_MAX) sh[mode % nd] += 1;
        if (mode >= 190 && mode < 195) dt = rd_dtype(r);
        if (!tslot_make(w, r, k, dt, nd, sh, 0)) return k;
    }
    return k;
}

static emb_tensor *slot_t(world *w, int k) {
    return k < 0 ? NULL : &w->t[k].t;
}

/* A fresh tensor in an unpinned slot; NULL when all slots are pinned. */
static emb_tensor *fresh(world *w, rd *r, emb_dtype dt, int nd, const int64_t *sh, int64_t hi) {
    int start = rd_u8(r);
    for (int i = 0; i < NT; i++) {
        int k = (start + i) % NT;
        if (!w->t[k].pins) return tslot_make(w, r, k, dt, nd, sh, hi) ? &w->t[k].t : NULL;
    }
    return NULL;
}

/* A slot holding `dt`, scanning from a random start; else any slot. */
static emb_tensor *existing(world *w, rd *r, emb_dtype dt, emb_dtype dt2) {
    int start = rd_u8(r);
    for (int i = 0; i < NT; i++) {
        int k = (start + i) % NT;
        if (w->t[k].t.dtype == dt || w->t[k].t.dtype == dt2) return &w->t[k].t;
    }
    return &w->t[start % NT].t;
}

/* An index tensor, mostly int64/int32 with values mostly in [0, hi): fresh (of shape sh when
 * given, else random), an existing one, or anything. */
static emb_tensor *arg_idx(world *w, rd *r, int64_t hi, int nd, const int64_t *sh) {
    uint8_t b = rd_u8(r);
    if (b < 128) {
        emb_dtype dt = rd_chance(r, 3) ? EMB_INT32 : EMB_INT64;
        if (rd_chance(r, 32)) dt = rd_dtype(r);
        int64_t shape[EMB_MAX_DIMS + 1];
        if (!sh || rd_chance(r, 16)) {
            nd = rd_chance(r, 16) ? rd_u8(r) % 11 : rd_u8(r) % 4;
            for (int i = 0; i < nd && i <= EMB_MAX_DIMS; i++)
                shape[i] = rd_chance(r, 16) ? rd_dim(r) : rd_u8(r) % 6;
            sh = shape;
        }
        emb_tensor *t = fresh(w, r, dt, nd, sh, hi > 0 ? hi : 1);
        if (t) return t;
    }
    if (b < 240) return existing(w, r, EMB_INT64, EMB_INT32);
    return arg_t(w, r);
}

/* A float32 input, mostly of shape (nd, sh) (one dimension off now and then). */
static emb_tensor *arg_f32(world *w, rd *r, int nd, const int64_t *sh) {
    uint8_t b = rd_u8(r);
    if (b < 128 && nd >= 0 && nd <= EMB_MAX_DIMS) {
        int64_t shape[EMB_MAX_DIMS + 1];
        for (int i = 0; i < nd; i++) shape[i] = sh[i];
        if (nd > 0 && rd_chance(r, 16)) shape[rd_u8(r) % nd] = rd_dim(r);
        emb_tensor *t = fresh(w, r, rd_chance(r, 32) ? rd_dtype(r) : EMB_FLOAT32, nd, shape, 0);
        if (t) return t;
    }
    if (b < 240) return existing(w, r, EMB_FLOAT32, EMB_FLOAT32);
    return arg_t(w, r);
}

/* ---------------------------------------------------------------------------------------
 * Tensor ops and core
 * ------------------------------------------------------------------------------------- */

static void op_tensor_new(world *w, rd *r) {
    int k = rd_u8(r) % NT;
    emb_dtype dt = rd_dtype(r);
    int nd = rd_ndim(r);
    int64_t sh[EMB_MAX_DIMS];
    for (int i = 0; i < nd && i < EMB_MAX_DIMS; i++) sh[i] = rd_dim(r);
    tslot_make(w, r, k, dt, nd, sh, 0);
}

/* An index tensor whose values are mostly valid for one of the tables. */
static void op_tensor_indices(world *w, rd *r) {
    int k = rd_u8(r) % NT;
    eslot *es = &w->e[rd_u8(r) % NE];
    int64_t hi = es->e ? emb_embedding_num_embeddings(es->e) : 1 + rd_u8(r) % 8;
    emb_dtype dt = rd_chance(r, 3) ? EMB_INT32 : EMB_INT64;
    int nd = rd_u8(r) % 4;
    int64_t sh[EMB_MAX_DIMS];
    for (int i = 0; i < nd; i++) sh[i] = rd_u8(r) % 6;
    tslot_make(w, r, k, dt, nd, sh, hi);
}

static void op_tensor_core(world *w, rd *r) {
    emb_tensor t, keep;
    memset(&t, 0x5a, sizeof t);
    keep = t;
    int nd = rd_ndim(r);
    int64_t sh[EMB_MAX_DIMS + 2];
    for (int i = 0; i < EMB_MAX_DIMS + 2; i++) sh[i] = rd_dim(r);
    emb_dtype dt = rd_dtype(r);
    uint8_t m = rd_u8(r) % 5;
    float dummy[4] = {0};
    emb_status st;
    switch (m) {
    case 0:
        st = API(w, emb_tensor_init(rd_chance(r, 8) ? NULL : &t, dt, rd_bool(r) ? dummy : NULL, nd,
                                    rd_chance(r, 8) ? NULL : sh));
        if (st && memcmp(&t, &keep, sizeof t)) FAIL("emb_tensor_init changed *t on error");
        break;
    case 1: {
        /* only shapes that are small or whose allocation is refused before allocating
         * (invalid, or a byte size that overflows); never a real multi-GB allocation */
        bool refused = nd < 0 || nd > EMB_MAX_DIMS || emb_dtype_nbytes(dt) == 0;
        bool empty = false;
        int64_t bytes = 1;
        for (int i = 0; !refused && i < nd; i++) {
            if (sh[i] < 0) refused = true;
            if (sh[i] == 0) empty = true;
        }
        for (int i = 0; !refused && !empty && i < nd; i++)
            if (__builtin_mul_overflow(bytes, sh[i], &bytes)) refused = true;
        if (!refused && !empty &&
            __builtin_mul_overflow(bytes, (int64_t)emb_dtype_nbytes(dt), &bytes))
            refused = true;
        if (!refused && !empty && bytes > 8 * MAX_ELEMS) break;
        st = API(w, emb_tensor_alloc(&t, dt, nd, sh));
        if (st && memcmp(&t, &keep, sizeof t)) FAIL("emb_tensor_alloc changed *t on error");
        if (!st) emb_tensor_release(&t);
        break;
    }
    case 2:
        API(w, emb_tensor_check(arg_t(w, r), rd_bool(r) ? "x" : NULL));
        break;
    case 3: {
        emb_tensor *a = arg_t(w, r), *b = arg_t(w, r);
        (void)emb__tensor_same_shape(a, b);
        if (a) (void)emb_tensor_numel(a), (void)emb_tensor_nbytes(a);
        char buf[64];
        size_t n = emb_shape_repr(nd, rd_bool(r) ? sh : NULL, rd_bool(r) ? buf : NULL, 0);
        size_t n2 = emb_shape_repr(nd, sh, buf, rd_u8(r) % sizeof buf);
        (void)n, (void)n2;
        (void)emb_dtype_name(dt), (void)emb__dtype_torch_type(dt), (void)emb_dtype_nbytes(dt);
        (void)emb_status_str((int)rd_i64(r, -14));
        break;
    }
    default:
        emb_set_num_threads((int)rd_i64(r, -1));
        emb_set_kernel_mode((emb_kernel_mode)(rd_u8(r) % 3));
        break;
    }
}

/* ---------------------------------------------------------------------------------------
 * Embeddings
 * ------------------------------------------------------------------------------------- */

static emb_embedding_options rd_emb_opts(world *w, rd *r) {
    emb_embedding_options o = emb_embedding_options_default();
    uint8_t f = rd_u8(r);
    if (f & 1) o.padding_idx = rd_i64(r, -3);
    if (f & 2) o.max_norm = rd_f64(r);
    if (f & 4) o.norm_type = rd_f64(r);
    if (f & 8) o.scale_grad_by_freq = true;
    if (f & 16) o.sparse = true;
    if (f & 32) o.generator = pick_g(w, r);
    return o;
}

/* A pair of sizes (rows x columns of a table): small, negative, or so large that the byte
 * size overflows and the call must refuse before allocating. Never a pair that would make
 * the library allocate gigabytes for real ([2^40, 0] is a valid empty table, but anything
 * proportional to its rows would be a huge allocation that libFuzzer reports as OOM). */
static void clamp_sizes(int64_t *v, int64_t *d) {
    int64_t n;
    if (*v < 0 || *d < 0) return;
    if (!__builtin_mul_overflow(*v, *d, &n) && !__builtin_mul_overflow(n, (int64_t)4, &n) &&
        *v > 0 && *d > 0)
        ; /* fits: clamp below if large */
    else if (*v > 0 && *d > 0)
        return; /* overflows: refused */
    if (*v > MAX_TABLE / 16) *v = *v % 64 + 1;
    if (*d > MAX_TABLE / 16) *d = *d % 64 + 1;
    if (*v * *d > MAX_TABLE) *d = 1;
}

static void rd_table_size(rd *r, int64_t *v, int64_t *d) {
    *v = rd_i64(r, 0);
    *d = rd_i64(r, 0);
    clamp_sizes(v, d);
}

static int free_eslot(world *w, rd *r) {
    for (int tries = 0; tries < NE; tries++) {
        int k = (rd_u8(r) + tries) % NE;
        if (!w->e[k].pins) return k;
    }
    return -1;
}

static void eslot_release(world *w, eslot *s);

static void eslot_install(world *w, int k, emb_embedding *e) {
    eslot *s = &w->e[k];
    eslot_release(w, s);
    if (!s->release_count) {
        s->release_count = calloc(1, sizeof(int));
        if (!s->release_count) abort();
    }
    s->e = e;
    s->wrapped_slot = -1;
    emb_tensor v;
    if (emb_embedding_weight_const(e, &v) != EMB_OK) FAIL("emb_embedding_weight_const failed");
    s->w = v.data;
    s->wbytes = emb_tensor_nbytes(&v);
}

static void rel_cb(void *data, void *ctx) {
    int *count = ctx;
    (*count)++;
    free(data);
}

/* Read-only tables handed over live in a PROT_READ mapping: any write by emb faults. */
static size_t map_len(size_t bytes) {
    size_t pg = (size_t)sysconf(_SC_PAGESIZE);
    return (bytes + pg - 1) / pg * pg + pg;
}

static void rel_cb_map(void *data, void *ctx) {
    int *count = ctx;
    (*count)++;
    /* the size is stored in the page before the data */
    unsigned char *base = (unsigned char *)data - (size_t)sysconf(_SC_PAGESIZE);
    size_t len;
    memcpy(&len, base, sizeof len);
    munmap(base, len);
}

static void *map_read_only_copy(const void *src, size_t bytes) {
    size_t pg = (size_t)sysconf(_SC_PAGESIZE), len = map_len(bytes);
    unsigned char *base =
        mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (base == MAP_FAILED) abort();
    memcpy(base, &len, sizeof len);
    if (bytes) memcpy(base + pg, src, bytes);
    if (mprotect(base + pg, len - pg, PROT_READ) != 0) abort();
    return base + pg;
}

static void eslot_release(world *w, eslot *s) {
    if (!s->e) return;
    if (s->wrapped_slot >= 0) w->t[s->wrapped_slot].pins--;
    int before = s->release_count ? *s->release_count : 0;
    emb_embedding_free(s->e);
    if (s->handed && (!s->release_count || *s->release_count != before + 1))
        FAIL("emb_embedding_free did not call the release callback exactly once");
    s->e = NULL;
    s->w = NULL;
    s->wbytes = 0;
    s->handed = NULL;
    s->wrapped_slot = -1;
}

static void op_emb_create(world *w, rd *r) {
    int k = free_eslot(w, r);
    if (k < 0) return;
    int64_t v, d;
    rd_table_size(r, &v, &d);
    emb_embedding_options o = rd_emb_opts(w, r);
    emb_embedding *sentinel = (emb_embedding *)&o, *e = sentinel;
    bool null_out = rd_chance(r, 24);
    emb_status st =
        API(w, emb_embedding_create(v, d, rd_chance(r, 8) ? NULL : &o, null_out ? NULL : &e));
    if (st) {
        if (e != sentinel) FAIL("emb_embedding_create wrote *out on error");
        return;
    }
    eslot_install(w, k, e);
}

static void op_emb_from_pretrained(world *w, rd *r) {
    int k = free_eslot(w, r);
    if (k < 0) return;
    int64_t wsh[2] = {rd_dim(r), rd_dim(r)};
    emb_tensor *t = arg_f32(w, r, 2, wsh);
    bool freeze = rd_bool(r);
    emb_embedding_options o = rd_emb_opts(w, r);
    emb_embedding *sentinel = (emb_embedding *)&o, *e = sentinel;
    emb_status st = API(w, emb_embedding_from_pretrained(t, freeze, rd_chance(r, 8) ? NULL : &o,
                                                         rd_chance(r, 24) ? NULL : &e));
    if (st) {
        if (e != sentinel) FAIL("emb_embedding_from_pretrained wrote *out on error");
        return;
    }
    eslot_install(w, k, e);
    if (emb_embedding_requires_grad(e) == freeze) FAIL("from_pretrained: requires_grad != !freeze");
}

/* emb_embedding_wrap over a tensor slot (borrowed) or over a copy handed over with a
 * release callback. */
static void op_emb_wrap(world *w, rd *r) {
    int k = free_eslot(w, r);
    if (k < 0) return;
    int ts = rd_u8(r) % NT;
    emb_tensor t = w->t[ts].t;
    emb_storage stg = {.read_only = rd_bool(r), .release = NULL, .release_ctx = NULL};
    bool pass_stg = !rd_chance(r, 4);
    bool hand = pass_stg && rd_bool(r);
    void *copy = NULL;
    if (!w->e[k].release_count) {
        w->e[k].release_count = calloc(1, sizeof(int));
        if (!w->e[k].release_count) abort();
    }
    bool mapped = false;
    if (hand && stg.read_only && t.data) {
        copy = map_read_only_copy(w->t[ts].buf, w->t[ts].bytes);
        mapped = true;
        t.data = copy;
        stg.release = rel_cb_map;
        stg.release_ctx = w->e[k].release_count;
    } else if (hand) {
        copy = malloc(w->t[ts].bytes ? w->t[ts].bytes : 1);
        if (!copy) abort();
        if (w->t[ts].bytes) memcpy(copy, w->t[ts].buf, w->t[ts].bytes);
        if (t.data) t.data = copy;
        stg.release = rel_cb;
        stg.release_ctx = w->e[k].release_count;
    }
    bool freeze = rd_bool(r);
    emb_embedding_options o = rd_emb_opts(w, r);
    emb_embedding *sentinel = (emb_embedding *)&o, *e = sentinel;
    int before = *w->e[k].release_count;
    emb_status st =
        API(w, emb_embedding_wrap(rd_chance(r, 24) ? NULL : &t, pass_stg ? &stg : NULL, freeze,
                                  rd_chance(r, 8) ? NULL : &o, rd_chance(r, 24) ? NULL : &e));
    if (st) {
        if (e != sentinel) FAIL("emb_embedding_wrap wrote *out on error");
        if (*w->e[k].release_count != before)
            FAIL("emb_embedding_wrap called release on error (ownership stays with the caller)");
        if (mapped)
            rel_cb_map(copy, &before);
        else
            free(copy);
        return;
    }
    eslot_install(w, k, e);
    eslot *s = &w->e[k];
    s->w = t.data;
    s->wbytes = emb_tensor_nbytes(&t);
    if (hand) {
        s->handed = copy;
    } else {
        free(copy);
        s->wrapped_slot = ts;
        w->t[ts].pins++;
    }
}

static void op_emb_free(world *w, rd *r) {
    eslot *s = &w->e[rd_u8(r) % NE];
    if (s->pins || !s->e) return;
    eslot_release(w, s);
}

static emb_embedding *arg_e(world *w, rd *r) {
    if (rd_chance(r, 32)) return NULL;
    int start = rd_u8(r);
    for (int i = 0; i < NE; i++)
        if (w->e[(start + i) % NE].e) return w->e[(start + i) % NE].e;
    return NULL;
}

/* Output shape of a lookup of `idx` into a table of dim d. */
static int lookup_shape(const emb_tensor *idx, int64_t d, int64_t *sh) {
    int nd = 0;
    if (idx && idx->ndim >= 0 && idx->ndim < EMB_MAX_DIMS)
        for (; nd < idx->ndim; nd++) sh[nd] = idx->shape[nd];
    sh[nd++] = d;
    return nd;
}

/* Entry i of an int32 or int64 index tensor that a lookup accepted. */
static int64_t index_at(const emb_tensor *idx, int64_t i) {
    return idx->dtype == EMB_INT64 ? ((const int64_t *)idx->data)[i]
                                   : ((const int32_t *)idx->data)[i];
}

static void check_lookup(const emb_tensor *weight, const emb_tensor *idx, const emb_tensor *out) {
    int64_t n = emb_tensor_numel(idx), d = weight->shape[1];
    if (n <= 0 || d == 0) return;
    /* out may alias the weight (not refused: the rows read are then unspecified) */
    if ((const char *)out->data < (const char *)weight->data + emb_tensor_nbytes(weight) &&
        (const char *)weight->data < (const char *)out->data + emb_tensor_nbytes(out))
        return;
    for (int64_t i = 0; i < n; i++) {
        int64_t row = index_at(idx, i);
        if (memcmp((const float *)out->data + i * d, (const float *)weight->data + row * d,
                   (size_t)d * 4) != 0)
            FAIL("lookup: output row %" PRId64 " is not weight row %" PRId64, i, row);
    }
}

static void op_emb_forward(world *w, rd *r) {
    emb_embedding *e = arg_e(w, r);
    emb_tensor *idx = arg_idx(w, r, emb_embedding_num_embeddings(e), -1, NULL);
    int64_t sh[EMB_MAX_DIMS + 1];
    int nd = lookup_shape(idx, e ? emb_embedding_embedding_dim(e) : rd_dim(r), sh);
    int o = out_slot(w, r, EMB_FLOAT32, nd, sh);
    emb_status st = API(w, emb_embedding_forward(e, idx, slot_t(w, o)));
    if (!st && !isfinite(emb_embedding_max_norm(e))) {
        emb_tensor wv;
        if (emb_embedding_weight_const(e, &wv) == EMB_OK) check_lookup(&wv, idx, slot_t(w, o));
    }
}

static void op_emb_lookup(world *w, rd *r) {
    emb_tensor wt, *weight;
    emb_embedding *e = w->e[rd_u8(r) % NE].e;
    int64_t wsh[2] = {rd_dim(r), rd_dim(r)};
    if (rd_bool(r) && e && emb_embedding_weight_const(e, &wt) == EMB_OK)
        weight = &wt;
    else
        weight = arg_f32(w, r, 2, wsh);
    emb_tensor *idx = arg_idx(w, r, weight && weight->ndim == 2 ? weight->shape[0] : 4, -1, NULL);
    int64_t sh[EMB_MAX_DIMS + 1];
    int nd = lookup_shape(idx, weight && weight->ndim == 2 ? weight->shape[1] : rd_dim(r), sh);
    int o = out_slot(w, r, EMB_FLOAT32, nd, sh);
    emb_status st = API(w, emb_embedding_lookup(weight, idx, slot_t(w, o)));
    if (!st) check_lookup(weight, idx, slot_t(w, o));
}

static void op_emb_renorm(world *w, rd *r) {
    emb_tensor wt, *weight;
    emb_embedding *e = w->e[rd_u8(r) % NE].e;
    int64_t wsh[2] = {rd_dim(r), rd_dim(r)};
    if (rd_bool(r) && e && emb_embedding_weight(e, &wt) == EMB_OK)
        weight = &wt;
    else
        weight = arg_f32(w, r, 2, wsh);
    emb_tensor *idx = arg_idx(w, r, weight && weight->ndim == 2 ? weight->shape[0] : 4, -1, NULL);
    double max_norm = rd_f64(r), p = rd_f64(r);
    API(w, emb_embedding_renorm_(weight, idx, max_norm, p));
}

static void op_emb_output_shape(world *w, rd *r) {
    int nd = -77;
    int64_t sh[EMB_MAX_DIMS];
    memset(sh, 0x5a, sizeof sh);
    emb_embedding *e = arg_e(w, r);
    emb_tensor *idx = arg_idx(w, r, 4, -1, NULL);
    emb_status st = API(w, emb_embedding_output_shape(e, idx, rd_chance(r, 24) ? NULL : &nd,
                                                      rd_chance(r, 24) ? NULL : sh));
    if (st && nd != -77) FAIL("emb_embedding_output_shape wrote *ndim on error");
}

static void op_emb_misc(world *w, rd *r) {
    emb_embedding *e = arg_e(w, r);
    (void)emb_embedding_num_embeddings(e), (void)emb_embedding_embedding_dim(e);
    (void)emb_embedding_padding_idx(e), (void)emb_embedding_max_norm(e);
    (void)emb_embedding_norm_type(e), (void)emb_embedding_scale_grad_by_freq(e);
    (void)emb_embedding_is_sparse(e), (void)emb_embedding_is_read_only(e);
    if (e && rd_bool(r)) emb_embedding_set_requires_grad(e, rd_bool(r));
    emb_tensor v;
    memset(&v, 0x5a, sizeof v);
    emb_tensor keep = v;
    bool c = rd_bool(r);
    emb_status st = c ? API(w, emb_embedding_weight_const(e, rd_chance(r, 24) ? NULL : &v))
                      : API(w, emb_embedding_weight(e, rd_chance(r, 24) ? NULL : &v));
    if (st && memcmp(&v, &keep, sizeof v)) FAIL("emb_embedding_weight wrote *view on error");
    if (!st && e && emb_embedding_is_read_only(e) && !c)
        FAIL("emb_embedding_weight gave a writable view of a read-only table");
    (void)emb_embedding_options_default();
}

/* An overwriting dense backward against zeroing + the accumulating one, on the same
 * arguments: they refuse the same inputs, and overwriting gives the same bits. The gradient
 * slot is compared only when it is plain harness storage that aliases no other argument
 * (go, and the tensors args); it is left as the overwriting call left it. */
typedef struct {
    tslot *s;
    void *saved, *got;
} xcheck;

static void xcheck_begin(world *w, xcheck *x, int gw, int go, const emb_tensor *const *args,
                         int nargs) {
    tslot *s = gw >= 0 ? &w->t[gw] : NULL;
    bool plain = s && go != gw && s->buf && s->t.data == s->buf && s->bytes > 0;
    for (int i = 0; plain && i < nargs; i++) plain = args[i] != &s->t;
    x->s = plain ? s : NULL;
    x->saved = plain ? malloc(s->bytes) : NULL;
    x->got = plain ? malloc(s->bytes) : NULL;
    if (plain && (!x->saved || !x->got)) FAIL("harness: out of memory");
    if (plain) memcpy(x->saved, s->buf, s->bytes);
}

/* After the overwriting call: keep its result, zero the slot for the accumulating one. */
static void xcheck_mid(xcheck *x) {
    if (!x->s) return;
    memcpy(x->got, x->s->buf, x->s->bytes);
    memset(x->s->buf, 0, x->s->bytes);
}

static void xcheck_end(xcheck *x, emb_status s1, emb_status s2, const char *what) {
    if (s1 != s2) FAIL("%s: the overwriting and accumulating forms disagree on refusing", what);
    if (x->s) {
        if (!s1 && memcmp(x->got, x->s->buf, x->s->bytes))
            FAIL("%s: overwriting differs from zeroing then accumulating", what);
        memcpy(x->s->buf, s1 ? x->saved : x->got, x->s->bytes);
    }
    free(x->saved);
    free(x->got);
}

static void op_emb_backward(world *w, rd *r) {
    emb_embedding *e = arg_e(w, r);
    emb_tensor *idx = arg_idx(w, r, emb_embedding_num_embeddings(e), -1, NULL);
    int64_t d = e ? emb_embedding_embedding_dim(e) : rd_dim(r);
    int64_t sh[EMB_MAX_DIMS + 1];
    int nd = lookup_shape(idx, d, sh);
    int go = !rd_chance(r, 8) ? out_slot(w, r, EMB_FLOAT32, nd, sh) : (int)(rd_u8(r) % NT);
    int64_t wsh[2] = {e ? emb_embedding_num_embeddings(e) : rd_dim(r), d};
    int gw = out_slot(w, r, EMB_FLOAT32, 2, wsh);
    if (go >= 0 && go == gw && rd_bool(r)) go = (go + 1) % NT;
    if (!rd_chance(r, 4)) {
        if (rd_bool(r))
            API(w, emb_embedding_backward(e, idx, slot_t(w, go), slot_t(w, gw)));
        else
            API(w, emb_embedding_backward_overwrite(e, idx, slot_t(w, go), slot_t(w, gw)));
        return;
    }
    /* The two forms side by side (see xcheck) */
    xcheck x;
    const emb_tensor *args[1] = {idx};
    xcheck_begin(w, &x, gw, go, args, 1);
    emb_status s1 = API(w, emb_embedding_backward_overwrite(e, idx, slot_t(w, go), slot_t(w, gw)));
    xcheck_mid(&x);
    emb_status s2 = emb_embedding_backward(e, idx, slot_t(w, go), slot_t(w, gw));
    xcheck_end(&x, s1, s2, "embedding_backward");
}

static emb_sparse_grad *arg_s(world *w, rd *r) {
    if (rd_chance(r, 32)) return NULL;
    int start = rd_u8(r);
    for (int i = 0; i < NS; i++)
        if (w->s_init[(start + i) % NS]) return &w->s[(start + i) % NS];
    return NULL;
}

/* A sparse gradient initialised for [rows, dim] (harness side, before the call). */
static emb_sparse_grad *fresh_s(world *w, rd *r, int64_t rows, int64_t dim) {
    int k = rd_u8(r) % NS;
    if (w->s_init[k]) emb_sparse_grad_release(&w->s[k]);
    memset(&w->s[k], 0, sizeof w->s[k]);
    w->s_init[k] = emb_sparse_grad_init(&w->s[k], rows, dim) == EMB_OK;
    return w->s_init[k] ? &w->s[k] : NULL;
}

/* A sparse backward's table, indices and output-gradient slot (usually of the right
 * shape). */
static emb_embedding *backward_args(world *w, rd *r, emb_tensor **idx, int *go) {
    emb_embedding *e = arg_e(w, r);
    *idx = arg_idx(w, r, emb_embedding_num_embeddings(e), -1, NULL);
    int64_t d = e ? emb_embedding_embedding_dim(e) : rd_dim(r);
    int64_t sh[EMB_MAX_DIMS + 1];
    int nd = lookup_shape(*idx, d, sh);
    *go = rd_bool(r) ? out_slot(w, r, EMB_FLOAT32, nd, sh) : (int)(rd_u8(r) % NT);
    return e;
}

static void op_emb_backward_sparse(world *w, rd *r) {
    emb_tensor *idx;
    int go;
    emb_embedding *e = backward_args(w, r, &idx, &go);
    emb_sparse_grad *g = e && rd_chance(r, 3) ? fresh_s(w, r, emb_embedding_num_embeddings(e),
                                                        emb_embedding_embedding_dim(e))
                                              : arg_s(w, r);
    API(w, emb_embedding_backward_sparse(e, idx, slot_t(w, go), g));
}

/* Two sparse gradients with the same entries and flags (or both failed the same way). */
static void same_sparse(const emb_sparse_grad *a, const emb_sparse_grad *b, const char *what) {
    if (a->nnz != b->nnz || a->coalesced != b->coalesced || a->num_rows != b->num_rows ||
        a->dim != b->dim)
        FAIL("%s: the borrowing backward's gradient (nnz %lld) differs from the copying one's "
             "(nnz %lld)",
             what, (long long)b->nnz, (long long)a->nnz);
    if (a->nnz && memcmp(a->indices, b->indices, (size_t)a->nnz * sizeof(int64_t)))
        FAIL("%s: indices differ", what);
    if (a->nnz * a->dim > 0 &&
        memcmp(a->values, b->values, (size_t)(a->nnz * a->dim) * sizeof(float)))
        FAIL("%s: values differ", what);
}

/* emb_embedding_backward_sparse_view against emb_embedding_backward_sparse on twin
 * gradients local to this operation (so the arrays a gradient borrows outlive it): the same
 * status, entries and flags, again after a second backward into each or a coalesce, and the
 * caller's tensors (the world) unchanged by a successful borrowing call. */
static void op_emb_backward_sparse_view(world *w, rd *r) {
    emb_tensor *idx;
    int go;
    emb_embedding *e = backward_args(w, r, &idx, &go);
    int64_t rows = e && !rd_chance(r, 16) ? emb_embedding_num_embeddings(e) : rd_i64(r, 0);
    int64_t dim = e && !rd_chance(r, 16) ? emb_embedding_embedding_dim(e) : rd_dim(r);
    clamp_sizes(&rows, &dim);
    emb_sparse_grad a, b;
    memset(&a, 0, sizeof a), memset(&b, 0, sizeof b);
    if (emb_sparse_grad_init(&a, rows, dim) || emb_sparse_grad_init(&b, rows, dim)) return;
    if (rd_bool(r)) { /* both start from the same non-empty gradient */
        emb_tensor *i0 = arg_idx(w, r, rows, -1, NULL);
        int64_t sh0[EMB_MAX_DIMS + 1];
        int nd0 = lookup_shape(i0, dim, sh0);
        emb_tensor *g0 = arg_f32(w, r, nd0, sh0);
        emb_status s0 = emb_embedding_backward_sparse(e, i0, g0, &a);
        if (s0 != emb_embedding_backward_sparse(e, i0, g0, &b))
            FAIL("emb_embedding_backward_sparse: two identical calls disagree");
    }
    emb_status s1 = API(w, emb_embedding_backward_sparse(e, idx, slot_t(w, go), &a));
    emb_status s2 = API(w, emb_embedding_backward_sparse_view(e, idx, slot_t(w, go), &b));
    if (s1 != s2)
        FAIL("emb_embedding_backward_sparse_view returned %d where the copying backward "
             "returned %d",
             (int)s2, (int)s1);
    if (s2 == EMB_OK) {
        serialise(w, &w->snap2, &w->snap2_len, &w->snap2_cap);
        if (w->snap2_len != w->snap_len || memcmp(w->snap, w->snap2, w->snap_len) != 0 ||
            gen_changed(w) >= 0)
            FAIL("emb_embedding_backward_sparse_view changed the caller's tensors");
    }
    same_sparse(&a, &b, "backward");
    switch (rd_u8(r) % 3) {
    case 0: { /* a second backward into each */
        s1 = emb_embedding_backward_sparse(e, idx, slot_t(w, go), &a);
        s2 = emb_embedding_backward_sparse_view(e, idx, slot_t(w, go), &b);
        if (s1 != s2) FAIL("second backward: %d against %d", (int)s2, (int)s1);
        same_sparse(&a, &b, "second backward");
        break;
    }
    case 1:
        s1 = emb_sparse_grad_coalesce(&a);
        s2 = emb_sparse_grad_coalesce(&b);
        if (s1 != s2) FAIL("coalesce: %d against %d", (int)s2, (int)s1);
        same_sparse(&a, &b, "coalesce");
        if (b.borrowed && b.nnz > 1) FAIL("a coalesced gradient still borrows");
        break;
    default:
        emb_sparse_grad_clear(&b);
        if (b.borrowed || b.nnz) FAIL("clear kept the borrowed entries");
        break;
    }
    emb_sparse_grad_release(&a);
    emb_sparse_grad_release(&b);
}

static void op_sparse(world *w, rd *r) {
    int k = rd_u8(r) % NS;
    emb_sparse_grad *g = &w->s[k];
    switch (rd_u8(r) % 7) {
    case 6: { /* from the caller's rows and values */
        if (w->s_init[k]) emb_sparse_grad_release(g);
        memset(g, 0, sizeof *g);
        w->s_init[k] = false;
        emb_embedding *e = w->e[rd_u8(r) % NE].e;
        int64_t rows = e && rd_bool(r) ? emb_embedding_num_embeddings(e) : rd_i64(r, 0);
        int64_t dim = e && rd_bool(r) ? emb_embedding_embedding_dim(e) : rd_i64(r, 0);
        clamp_sizes(&rows, &dim);
        int64_t nn = rd_u8(r) % 6;
        emb_tensor *ri = arg_idx(w, r, rows, 1, &nn);
        int64_t vs[2] = {ri && ri->ndim == 1 ? ri->shape[0] : nn, dim};
        emb_tensor *vals = arg_f32(w, r, 2, vs);
        emb_sparse_grad keep = *g;
        emb_status st =
            API(w, emb_sparse_grad_from_rows(rd_chance(r, 24) ? NULL : g, rows, dim, ri, vals));
        if (st && memcmp(g, &keep, sizeof keep))
            FAIL("emb_sparse_grad_from_rows changed g on error");
        w->s_init[k] = st == EMB_OK;
        break;
    }
    case 0: { /* init: for a table's shape or random sizes */
        if (w->s_init[k]) emb_sparse_grad_release(g);
        emb_embedding *e = w->e[rd_u8(r) % NE].e;
        int64_t rows = e && rd_bool(r) ? emb_embedding_num_embeddings(e) : rd_i64(r, 0);
        int64_t dim = e && rd_bool(r) ? emb_embedding_embedding_dim(e) : rd_i64(r, 0);
        clamp_sizes(&rows, &dim);
        emb_sparse_grad keep;
        memset(g, 0, sizeof *g);
        keep = *g;
        w->s_init[k] = false;
        emb_status st = API(w, emb_sparse_grad_init(rd_chance(r, 24) ? NULL : g, rows, dim));
        if (st && memcmp(g, &keep, sizeof keep)) FAIL("emb_sparse_grad_init changed g on error");
        w->s_init[k] = st == EMB_OK;
        break;
    }
    case 1:
        emb_sparse_grad_clear(w->s_init[k] ? g : NULL);
        break;
    case 2:
        if (w->s_init[k]) emb_sparse_grad_release(g);
        break;
    case 3:
        API(w, emb_sparse_grad_coalesce(arg_s(w, r)));
        break;
    default: {
        emb_sparse_grad *a = arg_s(w, r);
        int64_t sh[2] = {a ? a->num_rows : rd_dim(r), a ? a->dim : rd_dim(r)};
        int o = out_slot(w, r, EMB_FLOAT32, 2, sh);
        API(w, emb_sparse_grad_add_to_dense(a, slot_t(w, o)));
        break;
    }
    }
}

/* ---------------------------------------------------------------------------------------
 * Linear, one_hot, losses
 * ------------------------------------------------------------------------------------- */

static void op_linear_create(world *w, rd *r) {
    int k = rd_u8(r) % NL;
    if (w->l[k].pins) return;
    int64_t in, out;
    rd_table_size(r, &in, &out);
    bool bias = rd_bool(r);
    emb_linear *sentinel = (emb_linear *)w, *l = sentinel;
    emb_status st =
        API(w, emb_linear_create(in, out, bias, arg_g(w, r), rd_chance(r, 24) ? NULL : &l));
    if (st) {
        if (l != sentinel) FAIL("emb_linear_create wrote *out on error");
        return;
    }
    emb_linear_free(w->l[k].l);
    memset(&w->l[k], 0, sizeof w->l[k]);
    w->l[k].l = l;
    if (emb_linear_weight(l, &w->l[k].w) != EMB_OK) FAIL("emb_linear_weight failed");
    if (bias && emb_linear_bias(l, &w->l[k].b) != EMB_OK) FAIL("emb_linear_bias failed");
    emb_tensor v;
    if (!bias && emb_linear_bias(l, &v) == EMB_OK) FAIL("emb_linear_bias without a bias");
    (void)emb_linear_in_features(l), (void)emb_linear_out_features(l);
    (void)emb_linear_has_bias(l);
}

static emb_linear *arg_l(world *w, rd *r) {
    if (rd_chance(r, 32)) return NULL;
    int start = rd_u8(r);
    for (int i = 0; i < NL; i++)
        if (w->l[(start + i) % NL].l) return w->l[(start + i) % NL].l;
    return NULL;
}

static int linear_shape(const emb_tensor *x, int64_t f, int64_t *sh) {
    int nd = 0;
    if (x && x->ndim >= 1 && x->ndim <= EMB_MAX_DIMS) {
        for (; nd < x->ndim - 1; nd++) sh[nd] = x->shape[nd];
    }
    sh[nd++] = f;
    return nd;
}

static emb_tensor *arg_x(world *w, rd *r, emb_linear *l) {
    int nd = 1 + rd_u8(r) % 3;
    int64_t sh[3];
    for (int i = 0; i < nd; i++) sh[i] = rd_u8(r) % 5;
    sh[nd - 1] = l ? emb_linear_in_features(l) : rd_dim(r);
    return arg_f32(w, r, nd, sh);
}

static void op_linear_forward(world *w, rd *r) {
    emb_linear *l = arg_l(w, r);
    emb_tensor *x = arg_x(w, r, l);
    int64_t sh[EMB_MAX_DIMS + 1];
    int nd = linear_shape(x, l ? emb_linear_out_features(l) : rd_dim(r), sh);
    int o = out_slot(w, r, EMB_FLOAT32, nd, sh);
    API(w, emb_linear_forward(l, x, slot_t(w, o)));
}

static void op_linear_backward(world *w, rd *r) {
    emb_linear *l = arg_l(w, r);
    emb_tensor *x = arg_x(w, r, l);
    int64_t sh[EMB_MAX_DIMS + 1];
    int nd = linear_shape(x, l ? emb_linear_out_features(l) : rd_dim(r), sh);
    int gy = out_slot(w, r, EMB_FLOAT32, nd, sh);
    int64_t xsh[EMB_MAX_DIMS];
    int xnd = x ? x->ndim : 0;
    for (int i = 0; x && i < xnd && i < EMB_MAX_DIMS; i++) xsh[i] = x->shape[i];
    int gx = rd_bool(r) && x ? out_slot(w, r, EMB_FLOAT32, xnd, xsh) : -1;
    int64_t wsh[2] = {l ? emb_linear_out_features(l) : 1, l ? emb_linear_in_features(l) : 1};
    int gw = rd_bool(r) ? out_slot(w, r, EMB_FLOAT32, 2, wsh) : -1;
    int gb = rd_bool(r) ? out_slot(w, r, EMB_FLOAT32, 1, wsh) : -1;
    API(w, emb_linear_backward(l, x, slot_t(w, gy), slot_t(w, gx), slot_t(w, gw), slot_t(w, gb)));
}

static void op_one_hot(world *w, rd *r) {
    emb_tensor *idx = arg_idx(w, r, 1 + rd_u8(r) % 8, -1, NULL);
    int64_t c = rd_chance(r, 3) ? -1 : rd_i64(r, -1);
    if (rd_bool(r)) {
        int64_t out = -77;
        emb_status st = API(w, emb_one_hot_num_classes(idx, c, rd_chance(r, 24) ? NULL : &out));
        if (st && out != -77) FAIL("emb_one_hot_num_classes wrote *out_classes on error");
        return;
    }
    int64_t cls = c;
    if (c == -1 && idx && emb_one_hot_num_classes(idx, c, &cls) != EMB_OK) cls = rd_dim(r);
    int64_t sh[EMB_MAX_DIMS + 1];
    int nd = lookup_shape(idx, cls, sh);
    int o = out_slot(w, r, rd_bool(r) ? EMB_INT64 : EMB_FLOAT32, nd, sh);
    API(w, emb_one_hot(idx, c, slot_t(w, o)));
}

static emb_loss_options rd_loss_opts(rd *r) {
    emb_loss_options o = emb_loss_options_default();
    uint8_t f = rd_u8(r);
    if (f & 1) o.reduction = (emb_reduction)(rd_u8(r) % 4);
    if (f & 2) o.ignore_index = rd_i64(r, -2);
    if (f & 4) o.label_smoothing = rd_f64(r);
    return o;
}

static void op_loss(world *w, rd *r) {
    uint8_t which = rd_u8(r) % 6;
    emb_loss_options o = rd_loss_opts(r);
    const emb_loss_options *po = rd_chance(r, 8) ? NULL : &o;
    int64_t ish[3] = {rd_dim(r), rd_dim(r), rd_dim(r)};
    int ind = which < 2 ? 1 + rd_u8(r) % 2 : rd_u8(r) % 4;
    emb_tensor *in = arg_f32(w, r, ind, ish);
    emb_tensor *tg;
    if (which < 2) {
        int64_t n = in && in->ndim == 2 ? in->shape[0] : 0;
        int64_t c = in && in->ndim >= 1 && in->ndim <= 2 ? in->shape[in->ndim - 1] : 4;
        tg = arg_idx(w, r, c, in && in->ndim == 2 ? 1 : 0, &n);
    } else {
        tg = arg_f32(w, r, ind, ish);
    }
    int64_t c = in && in->ndim >= 1 && in->ndim <= EMB_MAX_DIMS ? in->shape[in->ndim - 1] : 1;
    emb_tensor *pw = (which >= 4 && rd_bool(r)) ? arg_f32(w, r, 1, &c) : NULL;
    /* loss / grad_loss shape: 0-d for mean and sum, else per element */
    emb_reduction red = po ? po->reduction : EMB_REDUCTION_MEAN;
    int64_t sh[EMB_MAX_DIMS];
    int nd = 0;
    if (red == EMB_REDUCTION_NONE && in && in->ndim >= 0 && in->ndim <= EMB_MAX_DIMS) {
        if (which < 2) {
            if (in->ndim == 2) sh[nd++] = in->shape[0];
        } else {
            for (; nd < in->ndim; nd++) sh[nd] = in->shape[nd];
        }
    }
    if (which % 2 == 0) {
        int l = out_slot(w, r, EMB_FLOAT32, nd, sh);
        switch (which) {
        case 0:
            API(w, emb_cross_entropy_forward(in, tg, po, slot_t(w, l)));
            break;
        case 2:
            API(w, emb_mse_loss_forward(in, tg, po, slot_t(w, l)));
            break;
        default:
            API(w, emb_bce_with_logits_forward(in, tg, pw, po, slot_t(w, l)));
            break;
        }
    } else {
        int gl = out_slot(w, r, EMB_FLOAT32, nd, sh);
        int64_t ish2[EMB_MAX_DIMS];
        int ind2 = in ? in->ndim : 0;
        for (int i = 0; in && i < ind2 && i < EMB_MAX_DIMS; i++) ish2[i] = in->shape[i];
        int gi = out_slot(w, r, EMB_FLOAT32, ind2, ish2);
        switch (which) {
        case 1:
            API(w, emb_cross_entropy_backward(in, tg, po, slot_t(w, gl), slot_t(w, gi)));
            break;
        case 3:
            API(w, emb_mse_loss_backward(in, tg, po, slot_t(w, gl), slot_t(w, gi)));
            break;
        default:
            API(w, emb_bce_with_logits_backward(in, tg, pw, po, slot_t(w, gl), slot_t(w, gi)));
            break;
        }
    }
}

/* ---------------------------------------------------------------------------------------
 * Optimizers
 * ------------------------------------------------------------------------------------- */

static void unpin(world *w, const pref *p) {
    switch (p->kind) {
    case 0:
        w->t[p->idx].pins--;
        break;
    case 1:
        w->e[p->idx].pins--;
        break;
    case 4:
        w->b[p->idx].pins--;
        break;
    default:
        w->l[p->idx].pins--;
        break;
    }
}

static void oslot_free(world *w, oslot *s) {
    emb_optimizer_free(s->o);
    for (int j = 0; j < s->np; j++) unpin(w, &s->p[j]);
    memset(s, 0, sizeof *s);
}

static void op_optim_create(world *w, rd *r) {
    int k = rd_u8(r) % NO;
    emb_optimizer_options o = emb_optimizer_options_default((emb_optimizer_kind)(rd_u8(r) % 6));
    uint32_t f = rd_u8(r) | (uint32_t)rd_u8(r) << 8;
    if (f & 1) o.kind = (emb_optimizer_kind)(rd_u8(r) % 6);
    if (f & 2) o.lr = rd_f64(r);
    if (f & 4) o.momentum = rd_f64(r);
    if (f & 8) o.dampening = rd_f64(r);
    if (f & 16) o.nesterov = rd_bool(r);
    if (f & 32) o.weight_decay = rd_f64(r);
    if (f & 64) o.lr_decay = rd_f64(r);
    if (f & 128) o.initial_accumulator_value = rd_f64(r);
    if (f & 256) o.eps = rd_f64(r);
    if (f & 512) o.beta1 = rd_f64(r);
    if (f & 1024) o.beta2 = rd_f64(r);
    if (f & 2048) o.amsgrad = rd_bool(r);
    if (f & 4096) o.maximize = rd_bool(r);
    emb_optimizer *sentinel = (emb_optimizer *)w, *opt = sentinel;
    emb_status st =
        API(w, emb_optimizer_create(rd_chance(r, 24) ? NULL : &o, rd_chance(r, 24) ? NULL : &opt));
    if (st) {
        if (opt != sentinel) FAIL("emb_optimizer_create wrote *out on error");
        return;
    }
    oslot_free(w, &w->o[k]);
    w->o[k].o = opt;
}

static oslot *pick_o(world *w, rd *r) {
    int start = rd_u8(r);
    for (int i = 0; i < NO; i++)
        if (w->o[(start + i) % NO].o) return &w->o[(start + i) % NO];
    return &w->o[start % NO];
}

static void op_optim_add_param(world *w, rd *r) {
    oslot *s = pick_o(w, r);
    pref p = {.kind = rd_u8(r) % 5, .idx = 0, .id = -1};
    emb_tensor v, *t = NULL;
    switch (p.kind) {
    case 4:
        p.idx = rd_u8(r) % NB;
        if (w->b[p.idx].b && emb_bag_weight(w->b[p.idx].b, &v) == EMB_OK) t = &v;
        break;
    case 0:
        p.idx = rd_u8(r) % NT;
        t = &w->t[p.idx].t;
        break;
    case 1:
        p.idx = rd_u8(r) % NE;
        if (w->e[p.idx].e && emb_embedding_weight(w->e[p.idx].e, &v) == EMB_OK) t = &v;
        break;
    default:
        p.idx = rd_u8(r) % NL;
        if (w->l[p.idx].l)
            t = p.kind == 2 ? &w->l[p.idx].w : w->l[p.idx].b.data ? &w->l[p.idx].b : NULL;
        break;
    }
    if (s->np == NP) return;
    int id = -77;
    emb_status st = API(w, emb_optimizer_add_param(s->o, t, rd_chance(r, 8) ? NULL : &id));
    if (st) {
        if (id != -77) FAIL("emb_optimizer_add_param wrote *param_id on error");
        return;
    }
    if (!s->o) FAIL("emb_optimizer_add_param succeeded on a NULL optimizer");
    p.id = s->np; /* ids are 0, 1, 2, ... in registration order */
    if (id != -77 && id != p.id) FAIL("emb_optimizer_add_param gave id %d, expected %d", id, p.id);
    s->p[s->np++] = p;
    switch (p.kind) {
    case 0:
        w->t[p.idx].pins++;
        break;
    case 1:
        w->e[p.idx].pins++;
        break;
    case 4:
        w->b[p.idx].pins++;
        break;
    default:
        w->l[p.idx].pins++;
        break;
    }
}

/* The view of a registered parameter, for shaping gradients. */
static bool param_view(world *w, const pref *p, emb_tensor *v) {
    switch (p->kind) {
    case 0:
        *v = w->t[p->idx].t;
        return true;
    case 1: {
        const eslot *s = &w->e[p->idx];
        int64_t sh[2] = {emb_embedding_num_embeddings(s->e), emb_embedding_embedding_dim(s->e)};
        memset(v, 0, sizeof *v);
        v->dtype = EMB_FLOAT32;
        v->ndim = 2;
        v->shape[0] = sh[0];
        v->shape[1] = sh[1];
        return true;
    }
    case 2:
        *v = w->l[p->idx].w;
        return true;
    case 4:
        return emb_embedding_weight_const(emb_bag_embedding(w->b[p->idx].b), v) == EMB_OK;
    default:
        *v = w->l[p->idx].b;
        return true;
    }
}

static void op_optim_step(world *w, rd *r) {
    oslot *s = pick_o(w, r);
    int j = s->np ? rd_u8(r) % s->np : 0;
    int id = s->np && !rd_chance(r, 16) ? s->p[j].id : (int)rd_i64(r, -1);
    uint8_t mode = rd_u8(r) % 3;
    emb_tensor pv;
    bool have = s->np && param_view(w, &s->p[j], &pv);
    if (mode == 0) {
        int g = have ? out_slot(w, r, EMB_FLOAT32, pv.ndim, pv.shape) : (int)(rd_u8(r) % NT);
        API(w, emb_optimizer_step(s->o, id, slot_t(w, g)));
    } else if (mode == 1) {
        emb_sparse_grad *g = arg_s(w, r);
        if (have && pv.ndim == 2 && rd_bool(r)) { /* a fresh sparse gradient for the param */
            g = fresh_s(w, r, pv.shape[0], pv.shape[1]);
            if (g && rd_bool(r)) {
                emb_tensor *idx = arg_idx(w, r, pv.shape[0], -1, NULL);
                int64_t sh[EMB_MAX_DIMS + 1];
                int nd = lookup_shape(idx, pv.shape[1], sh);
                emb_tensor *go = arg_f32(w, r, nd, sh);
                emb_embedding *e = arg_e(w, r);
                if (e && emb_embedding_embedding_dim(e) == pv.shape[1] &&
                    emb_embedding_num_embeddings(e) == pv.shape[0])
                    (void)emb_embedding_backward_sparse(e, idx, go, g);
            }
        }
        API(w, emb_optimizer_step_sparse(s->o, id, g));
    } else {
        emb_tensor *idx = arg_idx(w, r, have && pv.ndim == 2 ? pv.shape[0] : 4, -1, NULL);
        int64_t sh[EMB_MAX_DIMS + 1];
        int nd = lookup_shape(idx, have && pv.ndim == 2 ? pv.shape[1] : rd_dim(r), sh);
        int go = out_slot(w, r, EMB_FLOAT32, nd, sh);
        emb_embedding *e = arg_e(w, r); /* padding_idx etc. are the table's */
        API(w, emb_optimizer_step_fused(s->o, id, e, idx, slot_t(w, go)));
    }
    (void)emb_optimizer_param_steps(s->o, id);
}

/* The trainer's pieces: set_lr/get_lr, init_state, advance_step + update_rows (the Hogwild
 * row update, here on one thread), save/load (a round trip must load; a flipped byte or a
 * truncated copy must be refused), and a sparse gradient from rows for a step. */
static void op_optim_trainer(world *w, rd *r) {
    oslot *s = pick_o(w, r);
    int j = s->np ? rd_u8(r) % s->np : 0;
    int id = s->np && !rd_chance(r, 16) ? s->p[j].id : (int)rd_i64(r, -1);
    emb_tensor pv;
    bool have = s->np && param_view(w, &s->p[j], &pv);
    const int64_t rows = have && pv.ndim == 2 ? pv.shape[0] : 4;
    const int64_t dim = have && pv.ndim == 2 ? pv.shape[1] : rd_dim(r);
    switch (rd_u8(r) % 6) {
    case 0: {
        double lr = rd_f64(r);
        API(w, emb_optimizer_set_lr(s->o, lr));
        (void)emb_optimizer_lr(s->o);
        break;
    }
    case 1:
        API(w, emb_optimizer_init_state(s->o, id));
        break;
    case 2:
        API(w, emb_optimizer_advance_step(s->o, id));
        break;
    case 3: {
        emb_tensor *ri = arg_idx(w, r, rows, 1, (const int64_t[]){rd_u8(r) % 8});
        int64_t n = ri && ri->ndim == 1 ? ri->shape[0] : rd_u8(r) % 4;
        emb_tensor *v = arg_f32(w, r, 2, (const int64_t[]){n, dim});
        API(w, emb_optimizer_update_rows(s->o, id, ri, v));
        break;
    }
    case 4: {
        size_t n = emb_optimizer_state_nbytes(s->o);
        if (!s->o || n == 0 || n > ((size_t)1 << 22)) break;
        unsigned char *buf = malloc(n);
        if (!buf) break;
        if (emb_optimizer_save_state(s->o, buf, n) != EMB_OK)
            FAIL("save_state failed: %s", emb_errmsg());
        const uint8_t how = rd_u8(r) % 4;
        size_t nl = n;
        if (how == 1) buf[(uint64_t)rd_i64(r, 0) % n] ^= (unsigned char)(1 + rd_u8(r) % 255);
        if (how == 2) nl = (size_t)((uint64_t)rd_i64(r, 0) % n);
        emb_status st = API(w, emb_optimizer_load_state(s->o, buf, nl));
        if (how == 0 && st != EMB_OK) FAIL("a saved state does not load: %s", emb_errmsg());
        if ((how == 1 || how == 2) && st == EMB_OK) FAIL("a damaged state loaded");
        free(buf);
        break;
    }
    default: {
        emb_sparse_grad *g = fresh_s(w, r, rows, dim);
        if (!g) break;
        emb_sparse_grad_release(g); /* from_rows wants a gradient without storage */
        emb_tensor *ri = arg_idx(w, r, rows, 1, (const int64_t[]){rd_u8(r) % 8});
        int64_t n = ri && ri->ndim == 1 ? ri->shape[0] : rd_u8(r) % 4;
        emb_tensor *v = arg_f32(w, r, 2, (const int64_t[]){n, dim});
        if (API(w, emb_sparse_grad_from_rows(g, rows, dim, ri, v)) == EMB_OK && rd_bool(r))
            API(w, emb_optimizer_step_sparse(s->o, id, g));
        break;
    }
    }
}

static void op_optim_free(world *w, rd *r) {
    oslot_free(w, &w->o[rd_u8(r) % NO]);
}

/* set_lr / init_state / save_state / load_state (the saved state kept in the world). */
static void op_optim_state(world *w, rd *r) {
    oslot *s = pick_o(w, r);
    emb_optimizer *o = rd_chance(r, 32) ? NULL : s->o;
    switch (rd_u8(r) % 4) {
    case 0: {
        double lr = rd_f64(r);
        emb_status st = API(w, emb_optimizer_set_lr(o, lr));
        if (!st && emb_optimizer_lr(o) != lr) FAIL("set_lr then get_lr differ");
        break;
    }
    case 1: {
        int id = s->np && !rd_chance(r, 8) ? s->p[rd_u8(r) % s->np].id : (int)rd_i64(r, -1);
        API(w, emb_optimizer_init_state(o, id));
        break;
    }
    case 2: {
        size_t need = emb_optimizer_state_nbytes(o);
        size_t n = rd_chance(r, 4) && need ? need - 1 - rd_u8(r) % need : need;
        unsigned char *buf = malloc(need ? need : 1);
        if (!buf) abort();
        memset(buf, 0x5a, need ? need : 1);
        emb_status st = API(w, emb_optimizer_save_state(o, rd_chance(r, 24) ? NULL : buf, n));
        if (st) {
            for (size_t i = 0; i < need; i++)
                if (buf[i] != 0x5a) FAIL("emb_optimizer_save_state wrote buf on error");
            free(buf);
        } else {
            free(w->ostate);
            w->ostate = buf;
            w->ostate_len = n;
        }
        break;
    }
    default: { /* load the saved state, maybe mutated or truncated, into any optimizer */
        size_t n = w->ostate_len;
        unsigned char *buf = malloc(n + 16);
        if (!buf) abort();
        if (n) memcpy(buf, w->ostate, n);
        memset(buf + n, 0, 16);
        int muts = rd_chance(r, 2) ? 0 : rd_u8(r) % 3;
        for (int m = 0; m < muts && n; m++) buf[rd_u32(r) % n] ^= (uint8_t)(1u << (rd_u8(r) % 8));
        if (rd_chance(r, 4)) n = n ? rd_u32(r) % (n + 16) : rd_u8(r) % 16;
        API(w, emb_optimizer_load_state(o, rd_chance(r, 24) ? NULL : buf, n));
        free(buf);
        break;
    }
    }
}

/* Harness shortcut to reach the steps: an optimizer of a random kind with mostly default
 * options over the weight of a live embedding (and maybe a Linear weight). */
static void op_optim_setup(world *w, rd *r) {
    int k = rd_u8(r) % NO;
    emb_optimizer_options o = emb_optimizer_options_default((emb_optimizer_kind)(rd_u8(r) % 5));
    if (rd_bool(r)) o.lr = rd_f64(r);
    if (o.kind == EMB_OPTIMIZER_SGD && rd_bool(r)) o.momentum = rd_f64(r);
    if (rd_chance(r, 4)) o.weight_decay = rd_f64(r);
    if (rd_chance(r, 4)) o.maximize = true;
    emb_optimizer *opt = NULL;
    if (emb_optimizer_create(&o, &opt) != EMB_OK) return;
    oslot_free(w, &w->o[k]);
    oslot *s = &w->o[k];
    s->o = opt;
    int start = rd_u8(r);
    for (int i = 0; i < NE && s->np < NP; i++) {
        int j = (start + i) % NE;
        emb_tensor v;
        if (!w->e[j].e || emb_embedding_weight(w->e[j].e, &v) != EMB_OK) continue;
        int id;
        if (emb_optimizer_add_param(opt, &v, &id) != EMB_OK) continue;
        s->p[s->np++] = (pref){.kind = 1, .idx = j, .id = id};
        w->e[j].pins++;
        if (rd_bool(r)) break;
    }
    for (int j = 0; j < NB && s->np < NP; j++) {
        emb_tensor v;
        if (!w->b[j].b || rd_bool(r) || emb_bag_weight(w->b[j].b, &v) != EMB_OK) continue;
        int id;
        if (emb_optimizer_add_param(opt, &v, &id) != EMB_OK) continue;
        s->p[s->np++] = (pref){.kind = 4, .idx = j, .id = id};
        w->b[j].pins++;
    }
}

/* ---------------------------------------------------------------------------------------
 * Generators and random fills
 * ------------------------------------------------------------------------------------- */

static void op_gen(world *w, rd *r) {
    int k = rd_u8(r) % NG;
    size_t ss = emb_generator_state_nbytes();
    switch (rd_u8(r) % 8) {
    case 0: {
        emb_generator *g = (emb_generator *)w;
        emb_status st = API(w, emb_generator_create(rd_u64(r), rd_chance(r, 24) ? NULL : &g));
        if (st) {
            if (g != (emb_generator *)w) FAIL("emb_generator_create wrote *out on error");
            return;
        }
        emb_generator_free(w->g[k]);
        w->g[k] = g;
        break;
    }
    case 1:
        emb_generator_seed(arg_g(w, r), rd_u64(r));
        break;
    case 2:
        (void)emb_generator_random(arg_g(w, r)), (void)emb_generator_random64(arg_g(w, r));
        (void)emb_generator_initial_seed(arg_g(w, r));
        break;
    case 3: { /* get_state into the world's buffer, with a random size */
        size_t n = rd_chance(r, 4) ? (size_t)rd_u8(r) * 16 : ss;
        if (n > sizeof w->state) n = sizeof w->state;
        emb_status st =
            API(w, emb_generator_get_state(arg_g(w, r), rd_chance(r, 24) ? NULL : w->state, n));
        if (!st) w->state_len = ss;
        break;
    }
    case 4: { /* set_state from the saved state, mutated */
        unsigned char buf[4096];
        memcpy(buf, w->state, sizeof buf);
        int muts = rd_u8(r) % 4;
        for (int m = 0; m < muts; m++) {
            size_t at = rd_u32(r) % ss;
            uint8_t kind = rd_u8(r) % 3;
            if (kind == 0)
                buf[at] = rd_u8(r);
            else if (kind == 1 && at + 8 <= ss) {
                double d = rd_f64(r);
                memcpy(buf + at, &d, 8);
            } else {
                uint32_t u = rd_u32(r);
                if (at + 4 <= ss) memcpy(buf + at, &u, 4);
            }
        }
        if (rd_bool(r) && ss >= 8) {
            /* recompute the checksum over the first ss - 8 bytes: version 2 holds FNV-1a 64
             * (little-endian) in the last 8, version 1 FNV-1a 32 in the 4 before the padding;
             * sometimes the state is turned into version 1 first */
            if (rd_chance(r, 4)) {
                const uint32_t one = 1;
                memcpy(buf + 4, &one, 4);
            }
            uint32_t version;
            memcpy(&version, buf + 4, 4);
            if (version == 1) {
                uint32_t h = 2166136261u;
                for (size_t i = 0; i < ss - 8; i++) h = (h ^ buf[i]) * 16777619u;
                memcpy(buf + ss - 8, &h, 4);
            } else {
                uint64_t h = 14695981039346656037ull;
                for (size_t i = 0; i < ss - 8; i++) h = (h ^ buf[i]) * 1099511628211ull;
                for (int b = 0; b < 8; b++) buf[ss - 8 + b] = (unsigned char)(h >> (8 * b));
            }
        }
        size_t n = rd_chance(r, 8) ? rd_u32(r) % (ss + 16) : ss;
        API(w, emb_generator_set_state(arg_g(w, r), rd_chance(r, 24) ? NULL : buf, n));
        break;
    }
    case 5: {
        emb_tensor *t = arg_t(w, r);
        double a = rd_f64(r), b = rd_f64(r);
        switch (rd_u8(r) % 4) {
        case 0:
            API(w, emb_normal_(t, a, b, arg_g(w, r)));
            break;
        case 1:
            API(w, emb_uniform_(t, a, b, arg_g(w, r)));
            break;
        case 2:
            API(w, emb_randn_(t, arg_g(w, r)));
            break;
        default:
            API(w, emb_randint_(t, rd_i64(r, -3), rd_i64(r, 0), arg_g(w, r)));
            break;
        }
        break;
    }
    case 6:
        emb_generator_free(w->g[k]);
        w->g[k] = NULL;
        break;
    default:
        emb_manual_seed(rd_u64(r));
        break;
    }
}

/* ---------------------------------------------------------------------------------------
 * Printing
 * ------------------------------------------------------------------------------------- */

static const char *const suffix_pool[] = {
    "requires_grad=True",
    "grad_fn=<EmbeddingBackward0>",
    "",
    "x",
    NULL,
    "a very long suffix that will not fit on the line next to the data in any case ok",
};

static void op_print(world *w, rd *r) {
    emb_print_options o = emb_print_options_default();
    uint8_t f = rd_u8(r);
    if (f & 1) o.precision = (int)rd_i64(r, -1);
    if (f & 2) o.threshold = (int)rd_i64(r, -1);
    if (f & 4) o.edgeitems = (int)rd_i64(r, -1);
    if (f & 8) o.linewidth = (int)rd_i64(r, -1);
    if (f & 16) o.sci_mode = (emb_sci_mode)(rd_u8(r) % 4);
    if (f & 32)
        for (int i = 0; i < 4; i++)
            o.suffixes[i] = suffix_pool[rd_u8(r) % (sizeof suffix_pool / sizeof *suffix_pool)];
    const emb_print_options *po = rd_chance(r, 4) ? NULL : &o;
    emb_tensor *t = arg_t(w, r);
    if (rd_bool(r)) {
        char buf[256];
        size_t size = rd_chance(r, 4) ? 0 : rd_u8(r) % (sizeof buf + 1);
        memset(buf, 0x5a, sizeof buf);
        size_t needed = 12345;
        bool want = !rd_chance(r, 4);
        emb_status st = API(
            w, emb_tensor_repr(t, po, rd_chance(r, 16) ? NULL : buf, size, want ? &needed : NULL));
        if (st) {
            if (needed != 12345) FAIL("emb_tensor_repr wrote *needed on error");
            for (size_t i = 0; i < sizeof buf; i++)
                if (buf[i] != 0x5a) FAIL("emb_tensor_repr wrote buf on error");
        } else if (want && size > 0) {
            size_t got = strlen(buf);
            size_t expect = needed < size - 1 ? needed : size - 1;
            if (got != expect)
                FAIL("emb_tensor_repr: strlen %zu, expected min(needed %zu, size-1 %zu)", got,
                     needed, size - 1);
        }
    } else {
        /* a small fixed buffer (writes beyond it fail: EMB_ERR_IO) or a growing one */
        char mem[64];
        char *grow = NULL;
        size_t grow_len = 0;
        FILE *f2 = rd_bool(r) ? fmemopen(mem, sizeof mem, "w") : open_memstream(&grow, &grow_len);
        if (!f2) abort();
        API(w, emb_tensor_print(rd_chance(r, 24) ? NULL : f2, t, po));
        fclose(f2);
        free(grow);
    }
}

/* ---------------------------------------------------------------------------------------
 * EmbeddingBag (bag.h)
 * ------------------------------------------------------------------------------------- */

static emb_bag_options rd_bag_opts(world *w, rd *r) {
    emb_bag_options o = emb_bag_options_default();
    uint8_t f = rd_u8(r);
    if (f & 1) o.mode = (emb_bag_mode)(rd_chance(r, 16) ? (int)rd_i64(r, -1) : rd_u8(r) % 3);
    if (f & 2) o.padding_idx = rd_i64(r, -3);
    if (f & 4) o.max_norm = rd_f64(r);
    if (f & 8) o.norm_type = rd_f64(r);
    if (f & 16) o.scale_grad_by_freq = rd_bool(r);
    if (f & 32) o.sparse = rd_bool(r);
    if (f & 64) o.include_last_offset = true;
    if (f & 128) o.generator = pick_g(w, r);
    return o;
}

static void bslot_release(world *w, bslot *s) {
    if (!s->b) return;
    emb_bag_free(s->b);
    if (s->wrapped_slot >= 0) w->t[s->wrapped_slot].pins--;
    s->b = NULL;
    s->wrapped_slot = -1;
}

static void op_bag_create(world *w, rd *r) {
    int k = rd_u8(r) % NB;
    if (w->b[k].pins) return;
    emb_bag_options o = rd_bag_opts(w, r);
    const emb_bag_options *po = rd_chance(r, 8) ? NULL : &o;
    emb_bag *sentinel = (emb_bag *)w, *b = sentinel;
    emb_bag **out = rd_chance(r, 24) ? NULL : &b;
    uint8_t how = rd_u8(r) % 3;
    emb_tensor *t = NULL;
    emb_storage stg = {.read_only = rd_bool(r), .release = NULL, .release_ctx = NULL};
    emb_status st;
    if (how == 0) {
        int64_t v, d;
        rd_table_size(r, &v, &d);
        st = API(w, emb_bag_create(v, d, po, out));
    } else {
        int64_t sh[2] = {rd_dim(r), rd_dim(r)};
        t = arg_f32(w, r, 2, sh);
        bool freeze = rd_bool(r);
        if (how == 1)
            st = API(w, emb_bag_from_pretrained(t, freeze, po, out));
        else
            st = API(w, emb_bag_wrap(t, rd_bool(r) ? &stg : NULL, freeze, po, out));
    }
    if (st) {
        if (b != sentinel) FAIL("emb_bag_create/from_pretrained/wrap wrote *out on error");
        return;
    }
    bslot_release(w, &w->b[k]);
    w->b[k].b = b;
    w->b[k].wrapped_slot = -1;
    if (how == 2) {
        w->b[k].wrapped_slot = (int)(((tslot *)(void *)t) - w->t);
        w->t[w->b[k].wrapped_slot].pins++;
    }
    (void)emb_bag_mode_of(b), (void)emb_bag_include_last_offset(b);
}

static emb_bag *arg_b(world *w, rd *r) {
    if (rd_chance(r, 32)) return NULL;
    int start = rd_u8(r);
    for (int i = 0; i < NB; i++)
        if (w->b[(start + i) % NB].b) return w->b[(start + i) % NB].b;
    /* none yet: make a small one (harness side) so that bag calls get going */
    emb_bag_options o = emb_bag_options_default();
    o.mode = (emb_bag_mode)(rd_u8(r) % 3);
    if (rd_chance(r, 4)) o.padding_idx = rd_u8(r) % 4;
    if (rd_chance(r, 8)) o.max_norm = 1.0;
    if (rd_chance(r, 8)) o.include_last_offset = true;
    emb_bag *b = NULL;
    if (emb_bag_create(1 + rd_u8(r) % 8, 1 + rd_u8(r) % 4, &o, &b) != EMB_OK) return NULL;
    bslot *s = &w->b[start % NB];
    s->b = b;
    s->wrapped_slot = -1;
    return b;
}

/* Bag arguments: input (1-D with offsets, or 2-D), offsets, per_sample_weights. */
typedef struct bag_args {
    emb_tensor *input, *offsets, *psw;
} bag_args;

static bag_args rd_bag_args(world *w, rd *r, int64_t rows, bool want_psw) {
    bag_args a = {NULL, NULL, NULL};
    bool two_d = rd_chance(r, 3);
    int64_t sh[2] = {two_d ? rd_u8(r) % 4 : rd_u8(r) % 9, rd_u8(r) % 4};
    a.input = arg_idx(w, r, rows, two_d ? 2 : 1, sh);
    if (!two_d || rd_chance(r, 8)) {
        int64_t n = a.input && a.input->ndim == 1 ? a.input->shape[0] : 0;
        if (n < 0 || n > 64) n = 0;
        int64_t nb = rd_u8(r) % 5;
        if (rd_chance(r, 4)) {
            a.offsets = arg_t(w, r);
        } else {
            emb_dtype dt = rd_chance(r, 3) ? EMB_INT32 : EMB_INT64;
            emb_tensor *o = fresh(w, r, dt, 1, &nb, 1);
            if (o && o->data) { /* sorted offsets starting at 0, sometimes broken */
                int64_t prev = 0;
                for (int64_t i = 0; i < nb; i++) {
                    int64_t v = i == 0 ? 0 : prev + rd_u8(r) % (n - prev + 1);
                    if (rd_chance(r, 16)) v = rd_i64(r, -2);
                    if (dt == EMB_INT64)
                        ((int64_t *)o->data)[i] = v;
                    else
                        ((int32_t *)o->data)[i] = (int32_t)v;
                    prev = v >= 0 && v <= n ? v : prev;
                }
            }
            a.offsets = o;
        }
    }
    if (want_psw && rd_bool(r) && a.input && a.input->ndim >= 0 && a.input->ndim <= 2) {
        int64_t ps[2] = {a.input->shape[0], a.input->shape[1]};
        a.psw = arg_f32(w, r, a.input->ndim, ps);
    }
    return a;
}

/* Output slots [B, dim] for a bag call (B from emb_bag_num_bags when it succeeds). */
static int64_t bag_count(emb_bag *b, const bag_args *a, rd *r) {
    int64_t nb = -1;
    if (b && emb_bag_num_bags(b, a->input, a->offsets, &nb) == EMB_OK) return nb;
    return rd_u8(r) % 4;
}

static void op_bag_forward(world *w, rd *r) {
    emb_bag *b = arg_b(w, r);
    emb_embedding *e = b ? emb_bag_embedding(b) : NULL;
    bag_args a = rd_bag_args(w, r, emb_embedding_num_embeddings(e), true);
    int64_t sh[2] = {bag_count(b, &a, r), e ? emb_embedding_embedding_dim(e) : rd_dim(r)};
    int o = out_slot(w, r, EMB_FLOAT32, 2, sh);
    bool want_max = b ? emb_bag_mode_of(b) == EMB_BAG_MAX : rd_bool(r);
    int mi = want_max && !rd_chance(r, 4) ? out_slot(w, r, EMB_INT64, 2, sh) : -1;
    if (!want_max && rd_chance(r, 16)) mi = rd_u8(r) % NT;
    if (rd_chance(r, 8)) {
        int64_t nbags = -77;
        emb_status st =
            API(w, emb_bag_num_bags(b, a.input, a.offsets, rd_chance(r, 16) ? NULL : &nbags));
        if (st && nbags != -77) FAIL("emb_bag_num_bags wrote *num_bags on error");
        return;
    }
    if (rd_chance(r, 4)) { /* the functional form on a tensor slot */
        emb_bag_options opts = rd_bag_opts(w, r);
        int64_t wsh[2] = {rd_dim(r), sh[1]};
        emb_tensor *wt = arg_f32(w, r, 2, wsh);
        API(w, emb_bag_lookup(wt, a.input, a.offsets, a.psw, rd_chance(r, 8) ? NULL : &opts,
                              slot_t(w, o), slot_t(w, mi)));
        return;
    }
    API(w, emb_bag_forward(b, a.input, a.offsets, a.psw, slot_t(w, o), slot_t(w, mi)));
}

static void op_bag_backward(world *w, rd *r) {
    emb_bag *b = arg_b(w, r);
    emb_embedding *e = b ? emb_bag_embedding(b) : NULL;
    bag_args a = rd_bag_args(w, r, emb_embedding_num_embeddings(e), true);
    int64_t sh[2] = {bag_count(b, &a, r), e ? emb_embedding_embedding_dim(e) : rd_dim(r)};
    int go = out_slot(w, r, EMB_FLOAT32, 2, sh);
    uint8_t which = rd_u8(r) % 4;
    if (which == 0) {
        int mi = rd_bool(r) ? out_slot(w, r, EMB_INT64, 2, sh) : -1;
        if (mi >= 0 && w->t[mi].t.data && w->t[mi].t.dtype == EMB_INT64) {
            int64_t n = emb_tensor_numel(&w->t[mi].t), rows = emb_embedding_num_embeddings(e);
            for (int64_t i = 0; i < n; i++) /* mostly valid rows, as a forward leaves them */
                if (!rd_chance(r, 16))
                    ((int64_t *)w->t[mi].t.data)[i] =
                        rows > 0 ? (int64_t)(rd_u8(r) % (uint64_t)rows) : 0;
        }
        int64_t wsh[2] = {emb_embedding_num_embeddings(e), sh[1]};
        int gw = out_slot(w, r, EMB_FLOAT32, 2, wsh);
        if (!rd_chance(r, 4)) {
            if (rd_bool(r))
                API(w, emb_bag_backward(b, a.input, a.offsets, a.psw, slot_t(w, mi), slot_t(w, go),
                                        slot_t(w, gw)));
            else
                API(w, emb_bag_backward_overwrite(b, a.input, a.offsets, a.psw, slot_t(w, mi),
                                                  slot_t(w, go), slot_t(w, gw)));
        } else {
            xcheck x;
            const emb_tensor *args[4] = {a.input, a.offsets, a.psw, slot_t(w, mi)};
            xcheck_begin(w, &x, gw, go, args, 4);
            emb_status s1 =
                API(w, emb_bag_backward_overwrite(b, a.input, a.offsets, a.psw, slot_t(w, mi),
                                                  slot_t(w, go), slot_t(w, gw)));
            xcheck_mid(&x);
            emb_status s2 = emb_bag_backward(b, a.input, a.offsets, a.psw, slot_t(w, mi),
                                             slot_t(w, go), slot_t(w, gw));
            xcheck_end(&x, s1, s2, "bag_backward");
        }
    } else if (which == 1) {
        emb_sparse_grad *g = e && rd_chance(r, 2) ? fresh_s(w, r, emb_embedding_num_embeddings(e),
                                                            emb_embedding_embedding_dim(e))
                                                  : arg_s(w, r);
        API(w, emb_bag_backward_sparse(b, a.input, a.offsets, a.psw, slot_t(w, go), g));
    } else if (which == 2) {
        int64_t ps[2] = {0, 0};
        int pnd = a.input && a.input->ndim >= 0 && a.input->ndim <= 2 ? a.input->ndim : 1;
        for (int i = 0; a.input && i < pnd; i++) ps[i] = a.input->shape[i];
        int gp = out_slot(w, r, EMB_FLOAT32, pnd, ps);
        API(w, emb_bag_backward_per_sample_weights(b, a.input, a.offsets, slot_t(w, go),
                                                   slot_t(w, gp)));
    } else {
        oslot *s = pick_o(w, r);
        int id = s->np ? s->p[rd_u8(r) % s->np].id : (int)rd_i64(r, -1);
        API(w, emb_optimizer_step_fused_bag(s->o, id, b, a.input, a.offsets, a.psw, slot_t(w, go)));
    }
}

static void op_bag_free(world *w, rd *r) {
    bslot *s = &w->b[rd_u8(r) % NB];
    if (!s->pins) bslot_release(w, s);
    emb_tensor v;
    emb_bag *b = arg_b(w, r);
    emb_tensor keep;
    memset(&v, 0x5a, sizeof v);
    keep = v;
    emb_status st = API(w, emb_bag_weight(b, rd_chance(r, 24) ? NULL : &v));
    if (st && memcmp(&v, &keep, sizeof v)) FAIL("emb_bag_weight wrote *view on error");
}

/* ---------------------------------------------------------------------------------------
 * k-NN search (search.h)
 * ------------------------------------------------------------------------------------- */

static void kslot_free(world *w, kslot *s) {
    if (!s->k) return;
    emb_knn_free(s->k);
    w->t[s->table].pins--;
    s->k = NULL;
}

static void op_knn_create(world *w, rd *r) {
    kslot *s = &w->k[rd_u8(r) % NK];
    int64_t sh[2] = {rd_dim(r), rd_dim(r)};
    emb_tensor *t = arg_f32(w, r, 2, sh);
    int64_t rows = rd_chance(r, 2) ? 0 : rd_i64(r, -1);
    emb_knn *sentinel = (emb_knn *)w, *k = sentinel;
    emb_status st = API(w, emb_knn_create(t, rows, rd_chance(r, 24) ? NULL : &k));
    if (st) {
        if (k != sentinel) FAIL("emb_knn_create wrote *out on error");
        return;
    }
    kslot_free(w, s);
    s->k = k;
    s->table = (int)(((tslot *)(void *)t) - w->t);
    w->t[s->table].pins++;
    (void)emb_knn_num_rows(k), (void)emb_knn_dim(k), (void)emb_knn_num_rows(NULL);
}

static emb_knn *arg_k(world *w, rd *r) {
    if (rd_chance(r, 32)) return NULL;
    int start = rd_u8(r);
    for (int i = 0; i < NK; i++)
        if (w->k[(start + i) % NK].k) return w->k[(start + i) % NK].k;
    return NULL;
}

/* q * k entries fit in the output arrays, or their product overflows (must be refused). */
static bool outputs_fit(int64_t q, int64_t k) {
    int64_t n;
    if (q < 0 || k < 0) return true;
    if (__builtin_mul_overflow(q, k, &n)) return true;
    return n <= NOUT;
}

static void op_knn_search(world *w, rd *r) {
    emb_knn *k = arg_k(w, r);
    int64_t sh[2] = {rd_u8(r) % 5, k ? emb_knn_dim(k) : rd_dim(r)};
    emb_tensor *q = arg_f32(w, r, 2, sh);
    int64_t kk = rd_chance(r, 8) ? rd_i64(r, -1) : 1 + rd_u8(r) % 8;
    int64_t nq = q && q->ndim == 2 && q->shape[0] >= 0 ? q->shape[0] : 0;
    if (!outputs_fit(nq, kk)) kk = 1 + kk % 8;
    int64_t nex = rd_chance(r, 2) ? 0 : rd_chance(r, 8) ? rd_i64(r, -2) : rd_u8(r) % 4;
    int64_t ex[64];
    if (nex > 64) nex = nex % 64;
    if (nq > 64) nex = 0; /* an invalid query tensor: no exclude list the size of it */
    int64_t n_ex_entries = nq * (nex > 0 ? nex : 0);
    if (n_ex_entries > 64) nex = 64 / (nq ? nq : 1), n_ex_entries = nq * nex;
    for (int64_t i = 0; i < n_ex_entries && i < 64; i++) ex[i] = rd_i64(r, -1);
    bool ex_null = nex == 0 ? rd_bool(r) : rd_chance(r, 24);
    API(w, emb_knn_search(k, q, kk, ex_null ? NULL : ex, nex, rd_chance(r, 24) ? NULL : w->ids,
                          rd_chance(r, 24) ? NULL : w->scores));
}

static void op_knn_analogy(world *w, rd *r) {
    emb_knn *k = arg_k(w, r);
    int64_t nq = rd_chance(r, 8) ? rd_i64(r, -1) : rd_u8(r) % 4;
    int64_t kk = rd_chance(r, 8) ? rd_i64(r, -1) : 1 + rd_u8(r) % 8;
    if (nq > 20 && !outputs_fit(nq, 3)) nq = 3; /* abc must hold 3 * nq entries */
    if (nq > 20) nq %= 20;
    if (!outputs_fit(nq, kk)) kk = 1 + kk % 8;
    int64_t abc[60];
    int64_t hi = k ? emb_knn_num_rows(k) + 2 : 4;
    for (int64_t i = 0; i < 3 * (nq > 0 ? nq : 0); i++)
        abc[i] = rd_chance(r, 16) ? rd_i64(r, -2) : (int64_t)(rd_u8(r) % (uint64_t)hi);
    API(w, emb_knn_analogy(k, rd_chance(r, 24) ? NULL : abc, nq, kk,
                           rd_chance(r, 24) ? NULL : w->ids, rd_chance(r, 24) ? NULL : w->scores));
}

static void op_spearman(world *w, rd *r) {
    double x[32], y[32];
    int64_t n = rd_chance(r, 16) ? rd_i64(r, -2) : rd_u8(r) % 33;
    if (n > 32) n = 32;
    for (int64_t i = 0; i < n; i++) {
        x[i] = rd_chance(r, 2) ? (double)(rd_u8(r) % 5) : rd_f64(r);
        y[i] = rd_chance(r, 2) ? (double)(rd_u8(r) % 5) : rd_f64(r);
    }
    double *rho = rd_chance(r, 24) ? NULL : &w->rho;
    API(w, emb_spearman(rd_chance(r, 24) ? NULL : x, rd_chance(r, 24) ? NULL : y, n, rho));
}

/* ---------------------------------------------------------------------------------------
 * The table of operations. Append new API here (one decoder function per line).
 * ------------------------------------------------------------------------------------- */

/* ---------------------------------------------------------------------------------------
 * Reduced-precision tables (quant.h)
 * ------------------------------------------------------------------------------------- */

static void qslot_release(world *w, qslot *s) {
    if (!s->q) return;
    emb_qtable_free(s->q);
    if (s->wrapped_slot >= 0) w->t[s->wrapped_slot].pins--;
    s->q = NULL;
    s->wrapped_slot = -1;
}

static emb_qtype rd_qtype(rd *r) {
    return (emb_qtype)(rd_chance(r, 16) ? (int)rd_i64(r, -2) : rd_u8(r) % 5);
}

static void op_q_create(world *w, rd *r) {
    int k = rd_u8(r) % NQ;
    emb_qtable *sentinel = (emb_qtable *)w, *q = sentinel;
    emb_qtable **out = rd_chance(r, 24) ? NULL : &q;
    emb_qtype qt = rd_qtype(r);
    int wrapped = -1;
    emb_status st;
    if (rd_bool(r)) {
        int64_t sh[2] = {rd_u8(r) % 9, 1 + rd_u8(r) % 9};
        emb_tensor *src = arg_f32(w, r, 2, sh);
        st = API(w, emb_qtable_quantize(src, qt, out));
    } else { /* a wrap over a tensor slot's memory, mostly of the size the shape needs */
        tslot *t = pick_t(w, r);
        int64_t dim = rd_chance(r, 16) ? rd_i64(r, -1) : 1 + rd_u8(r) % 9, rb = 0;
        if (emb_qtype_row_nbytes(qt, dim, &rb) != EMB_OK || rb <= 0) rb = 1;
        int64_t rows = rd_chance(r, 16) ? rd_i64(r, -1) : (int64_t)(t->bytes / (size_t)rb);
        size_t nbytes = rd_chance(r, 8) ? t->bytes : (size_t)(rows > 0 ? rows : 0) * (size_t)rb;
        if (nbytes > t->bytes) nbytes = t->bytes;
        emb_storage stg = {.read_only = rd_bool(r), .release = NULL, .release_ctx = NULL};
        st = API(w, emb_qtable_wrap(qt, rows, dim, t->buf, nbytes, rd_bool(r) ? &stg : NULL, out));
        wrapped = (int)(t - w->t);
    }
    if (st) {
        if (q != sentinel) FAIL("emb_qtable_quantize/wrap wrote *out on error");
        return;
    }
    qslot_release(w, &w->q[k]);
    w->q[k].q = q;
    w->q[k].wrapped_slot = -1;
    if (wrapped >= 0) {
        w->q[k].wrapped_slot = wrapped;
        w->t[wrapped].pins++;
    }
}

static emb_qtable *arg_q(world *w, rd *r) {
    if (rd_chance(r, 32)) return NULL;
    int start = rd_u8(r);
    for (int i = 0; i < NQ; i++)
        if (w->q[(start + i) % NQ].q) return w->q[(start + i) % NQ].q;
    /* none yet: quantize a small table (harness side) so that the calls get going */
    float v[8 * 4];
    for (int i = 0; i < 32; i++) v[i] = (float)(rd_u8(r) % 16) - 7.5f;
    emb_tensor t;
    int64_t rows = 1 + rd_u8(r) % 8, dim = 1 + rd_u8(r) % 4;
    if (emb_tensor_init(&t, EMB_FLOAT32, v, 2, (int64_t[]){rows, dim}) != EMB_OK) return NULL;
    emb_qtable *q = NULL;
    if (emb_qtable_quantize(&t, (emb_qtype)(rd_u8(r) % 5), &q) != EMB_OK) return NULL;
    qslot *s = &w->q[start % NQ];
    s->q = q;
    s->wrapped_slot = -1;
    return q;
}

/* A successful lookup gives each index's dequantized row. */
static void check_qlookup(const emb_qtable *q, const emb_tensor *idx, const emb_tensor *out) {
    const int64_t n = emb_tensor_numel(idx), d = emb_qtable_dim(q);
    if (n <= 0 || d <= 0 || d > 4096) return;
    /* out may be the wrapped table's own memory (not refused: the rows read are then
     * unspecified) */
    const char *qd = emb_qtable_data(q);
    if ((const char *)out->data < qd + emb_qtable_nbytes(q) &&
        qd < (const char *)out->data + emb_tensor_nbytes(out))
        return;
    float row[4096];
    for (int64_t i = 0; i < n; i++) {
        int64_t rr = index_at(idx, i);
        if (emb_qtable_dequantize(q, rr, 1, row) != EMB_OK)
            FAIL("dequantize of row %" PRId64 " failed", rr);
        if (memcmp((const float *)out->data + i * d, row, (size_t)d * 4) != 0)
            FAIL("qtable lookup: output row %" PRId64 " is not the dequantized row %" PRId64, i,
                 rr);
    }
}

static void op_q_forward(world *w, rd *r) {
    emb_qtable *q = arg_q(w, r);
    emb_tensor *idx = arg_idx(w, r, emb_qtable_num_rows(q), -1, NULL);
    int64_t sh[EMB_MAX_DIMS + 1];
    int nd = lookup_shape(idx, q ? emb_qtable_dim(q) : rd_dim(r), sh);
    int o = out_slot(w, r, EMB_FLOAT32, nd, sh);
    if (rd_chance(r, 4)) {
        API(w, emb_qtable_prefetch(q, idx));
        return;
    }
    if (API(w, emb_qtable_forward(q, idx, slot_t(w, o))) == EMB_OK)
        check_qlookup(q, idx, slot_t(w, o));
}

static void op_q_bag(world *w, rd *r) {
    emb_qtable *q = arg_q(w, r);
    bag_args a = rd_bag_args(w, r, emb_qtable_num_rows(q), true);
    emb_bag_options o = rd_bag_opts(w, r);
    const emb_bag_options *po = rd_chance(r, 8) ? NULL : &o;
    int64_t sh[2] = {rd_u8(r) % 6, q ? emb_qtable_dim(q) : rd_dim(r)};
    if (a.input && a.input->ndim == 2)
        sh[0] = a.input->shape[0];
    else if (a.offsets && a.offsets->ndim == 1)
        sh[0] = po && po->include_last_offset && a.offsets->shape[0] > INT64_MIN
                    ? a.offsets->shape[0] - 1 /* a fuzzed shape may be INT64_MIN */
                    : a.offsets->shape[0];
    int out = out_slot(w, r, EMB_FLOAT32, 2, sh);
    uint8_t which = rd_u8(r) % 4;
    if (which == 0) {
        int mi = rd_bool(r) ? out_slot(w, r, EMB_INT64, 2, sh) : -1;
        API(w, emb_qtable_bag_forward(q, a.input, a.offsets, a.psw, po, slot_t(w, out),
                                      slot_t(w, mi)));
    } else if (which == 1) {
        emb_sparse_grad *g = q && rd_bool(r)
                                 ? fresh_s(w, r, emb_qtable_num_rows(q), emb_qtable_dim(q))
                                 : arg_s(w, r);
        API(w, emb_qtable_bag_backward_sparse(q, a.input, a.offsets, a.psw, po, slot_t(w, out), g));
    } else if (which == 2) {
        API(w, emb_qtable_sgd_step_bag(q, a.input, a.offsets, a.psw, po, slot_t(w, out), rd_f32(r),
                                       (emb_qround)(rd_u8(r) % 3), arg_g(w, r)));
    } else {
        API(w, emb_qtable_sgd_step(q, arg_s(w, r), rd_f32(r), (emb_qround)(rd_u8(r) % 3),
                                   arg_g(w, r)));
    }
}

static void op_q_misc(world *w, rd *r) {
    emb_qtable *q = arg_q(w, r);
    uint8_t which = rd_u8(r) % 4;
    if (which == 0) {
        int k = rd_u8(r) % NQ;
        qslot_release(w, &w->q[k]);
    } else if (which == 1) {
        int64_t first = rd_chance(r, 8) ? rd_i64(r, -2) : rd_u8(r) % 9;
        int64_t n = rd_chance(r, 8) ? rd_i64(r, -2) : rd_u8(r) % 9;
        int64_t sh[2] = {n > 0 && n < 64 ? n : 1, q ? emb_qtable_dim(q) : 1};
        int o = out_slot(w, r, EMB_FLOAT32, 2, sh);
        /* the buffer must hold n rows: only slots of that size are passed */
        emb_tensor *t = slot_t(w, o);
        if (t && t->dtype == EMB_FLOAT32 && t->ndim == 2 && t->shape[0] == n && q &&
            t->shape[1] == emb_qtable_dim(q))
            API(w, emb_qtable_dequantize(q, first, n, t->data));
        else if (!t || n <= 0)
            API(w, emb_qtable_dequantize(q, first, n, NULL));
    } else if (which == 2) {
        int64_t sh[2] = {q ? emb_qtable_num_rows(q) : 1, q ? emb_qtable_dim(q) : 1};
        emb_qerror e;
        emb_tensor *src = arg_f32(w, r, 2, sh);
        API(w, emb_qtable_error(q, src, rd_chance(r, 24) ? NULL : &e));
    } else {
        (void)emb_qtable_is_read_only(q), (void)emb_qtable_qtype(q), (void)emb_qtable_row_nbytes(q);
    }
}

typedef struct op {
    const char *name;
    void (*fn)(world *w, rd *r);
} op;

static const op ops[] = {
    {"tensor_new", op_tensor_new},
    {"tensor_indices", op_tensor_indices},
    {"tensor_core", op_tensor_core},
    {"emb_create", op_emb_create},
    {"emb_from_pretrained", op_emb_from_pretrained},
    {"emb_wrap", op_emb_wrap},
    {"emb_free", op_emb_free},
    {"emb_forward", op_emb_forward},
    {"emb_lookup", op_emb_lookup},
    {"emb_renorm", op_emb_renorm},
    {"emb_output_shape", op_emb_output_shape},
    {"emb_misc", op_emb_misc},
    {"emb_backward", op_emb_backward},
    {"emb_backward_sparse", op_emb_backward_sparse},
    {"sparse", op_sparse},
    {"linear_create", op_linear_create},
    {"linear_forward", op_linear_forward},
    {"linear_backward", op_linear_backward},
    {"one_hot", op_one_hot},
    {"loss", op_loss},
    {"optim_create", op_optim_create},
    {"optim_add_param", op_optim_add_param},
    {"optim_step", op_optim_step},
    {"optim_free", op_optim_free},
    {"optim_setup", op_optim_setup},
    {"optim_state", op_optim_state},
    {"optim_trainer", op_optim_trainer},
    {"gen", op_gen},
    {"print", op_print},
    {"bag_create", op_bag_create},
    {"bag_forward", op_bag_forward},
    {"bag_backward", op_bag_backward},
    {"bag_free", op_bag_free},
    {"knn_create", op_knn_create},
    {"knn_search", op_knn_search},
    {"knn_analogy", op_knn_analogy},
    {"spearman", op_spearman},
    {"q_create", op_q_create},
    {"q_forward", op_q_forward},
    {"q_bag", op_q_bag},
    {"q_misc", op_q_misc},
    {"emb_backward_sparse_view", op_emb_backward_sparse_view}, /* last: seeds keep their ops */
};
#define NOPS (sizeof ops / sizeof *ops)

/* ---------------------------------------------------------------------------------------
 * Driver
 * ------------------------------------------------------------------------------------- */

static void world_free(world *w) {
    for (int k = 0; k < NK; k++) kslot_free(w, &w->k[k]);
    for (int k = 0; k < NO; k++) oslot_free(w, &w->o[k]);
    for (int k = 0; k < NB; k++) bslot_release(w, &w->b[k]);
    for (int k = 0; k < NQ; k++) qslot_release(w, &w->q[k]);
    for (int k = 0; k < NE; k++) {
        eslot_release(w, &w->e[k]);
        free(w->e[k].release_count);
    }
    for (int k = 0; k < NL; k++) emb_linear_free(w->l[k].l);
    for (int k = 0; k < NS; k++)
        if (w->s_init[k]) emb_sparse_grad_release(&w->s[k]);
    for (int k = 0; k < NG; k++) emb_generator_free(w->g[k]);
    for (int k = 0; k < NT; k++) free(w->t[k].buf);
    for (int k = 0; k <= NG; k++) free(w->g_raw[k]);
    free(w->ostate);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerInitialize(int *argc, char ***argv);

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc, (void)argv;
    if (getenv("EMB_FUZZ_STATS")) atexit(print_stats);
    verbose = getenv("EMB_FUZZ_VERBOSE");
    return 0;
}

/* The two snapshot buffers, kept from one input to the next: a snapshot of a world with a
 * few tables is megabytes, and growing fresh buffers to that size at every input (pages
 * mapped and faulted in) cost a fifth of the time. Nothing carries over: serialise()
 * rewrites a buffer from its start, and only the bytes it wrote are compared. */
static unsigned char *kept_snap[2];
static size_t kept_cap[2];

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    rd r = {data, size, 0};
    world w;
    memset(&w, 0, sizeof w);
    w.snap = kept_snap[0], w.snap_cap = kept_cap[0];
    w.snap2 = kept_snap[1], w.snap2_cap = kept_cap[1];
    for (int k = 0; k < NE; k++) w.e[k].wrapped_slot = -1;
    for (int k = 0; k < NB; k++) w.b[k].wrapped_slot = -1;
    for (int k = 0; k < NQ; k++) w.q[k].wrapped_slot = -1;
    /* Each input starts from the same process state. */
    emb_manual_seed(0);
    emb_set_num_threads(0);
    emb_set_kernel_mode(EMB_KERNELS_AUTO);
    if (emb_generator_get_state(NULL, w.state, sizeof w.state) != EMB_OK) abort();
    w.state_len = emb_generator_state_nbytes();
    for (int steps = 0; steps < 64 && !rd_done(&r); steps++) {
        const op *o = &ops[rd_u8(&r) % NOPS];
        cur_op = o->name;
        o->fn(&w, &r);
    }
    cur_op = "cleanup";
    world_free(&w);
    kept_snap[0] = w.snap, kept_cap[0] = w.snap_cap;
    kept_snap[1] = w.snap2, kept_cap[1] = w.snap2_cap;
    return 0;
}
