/* src/optim/optim_state.c: emb_optimizer_state_nbytes, save_state and load_state, the binary
 * layout of docs/optimizer-state.md (version 1).
 *
 * The layout is described once, by the tables below: the header's fields, a parameter
 * record's fixed fields, and the sections that follow them in a record (each with the rule
 * of its size and the condition of its presence). The size computation, the writer and the
 * reader all walk these tables; nothing else knows an offset.
 *
 * Loading checks everything before anything changes, in three passes over the bytes:
 *   1. the layout: walk the records (the fixed fields' layout bounds, the shape, the size
 *      of each record) to find where the checksum is, then the checksum itself;
 *   2. the contents against this optimizer: kind, options, number of parameters, each
 *      parameter's shape, step count, state and momentum buffer, sparse rows in range;
 *   3. allocate the new state of every parameter, then swap it in. */
#include "optim_internal.h"

#include <inttypes.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define STATE_MAGIC   "EMBOPTST"
#define STATE_VERSION 1u

/* ---------------------------------------------------------------------------------------
 * The layout
 * ------------------------------------------------------------------------------------- */

/* Stored types, all little-endian (src/core/bytes.h): the 8 magic bytes, u32, u64 (also i64, as its
 * two's complement bits), f64 and f32 (IEEE-754 bits). */
typedef enum { T_MAGIC, T_U32, T_U64, T_F64, T_F32 } state_type;

static size_t type_size(state_type t) {
    return t == T_U32 || t == T_F32 ? 4 : 8;
}

/* What loading checks of a field:
 *   V_MAGIC     the bytes STATE_MAGIC;
 *   V_VERSION   STATE_VERSION;
 *   V_LAYOUT    at most `max`, checked while the layout is walked (pass 1): a larger value
 *               leaves the layout unreadable ("corrupt record of parameter i");
 *   V_MAX       at most `max`, checked against the optimizer (pass 2) with a message of its
 *               own;
 *   V_OPTIMIZER the optimizer's own value (kind, number of parameters; pass 2);
 *   V_OPTIONS   the options pass emb_optimizer_create's checks (pass 2). */
typedef enum { V_MAGIC, V_VERSION, V_LAYOUT, V_MAX, V_OPTIMIZER, V_OPTIONS } validation;

/* A fixed-size field. The fields of a table follow each other without padding, in table
 * order; `member` is where the value lives in state_header / state_record. */
typedef struct state_field {
    const char *name;
    state_type type;
    size_t member;
    validation check;
    uint64_t max;
} state_field;

typedef struct state_header {
    uint32_t version, kind;
    emb_optimizer_options o; /* the nine doubles; kind and the flags are stored apart */
    uint32_t flags;          /* bit 0 nesterov, bit 1 amsgrad, bit 2 maximize */
    uint32_t nparams;
} state_header;

typedef struct state_record {
    uint32_t ndim;
    uint32_t flags; /* bit 0: the dense state is allocated */
    uint64_t steps;
    uint32_t buf_kind, reserved;
    uint64_t sp_nnz;
} state_record;

#define H(m) offsetof(state_header, m)
enum { H_MAGIC, H_VERSION, H_KIND, H_OPTIONS, H_FLAGS = H_OPTIONS + 9, H_NPARAMS, H_COUNT };
static const state_field HEADER[H_COUNT] = {
    {"magic", T_MAGIC, 0, V_MAGIC, 0},
    {"version", T_U32, H(version), V_VERSION, 0},
    {"kind", T_U32, H(kind), V_OPTIMIZER, 0},
    {"lr", T_F64, H(o.lr), V_OPTIONS, 0},
    {"momentum", T_F64, H(o.momentum), V_OPTIONS, 0},
    {"dampening", T_F64, H(o.dampening), V_OPTIONS, 0},
    {"weight_decay", T_F64, H(o.weight_decay), V_OPTIONS, 0},
    {"lr_decay", T_F64, H(o.lr_decay), V_OPTIONS, 0},
    {"initial_accumulator_value", T_F64, H(o.initial_accumulator_value), V_OPTIONS, 0},
    {"eps", T_F64, H(o.eps), V_OPTIONS, 0},
    {"beta1", T_F64, H(o.beta1), V_OPTIONS, 0},
    {"beta2", T_F64, H(o.beta2), V_OPTIONS, 0},
    {"flags", T_U32, H(flags), V_MAX, 7},
    {"nparams", T_U32, H(nparams), V_OPTIMIZER, 0},
};
#undef H

#define R(m) offsetof(state_record, m)
enum { R_NDIM, R_FLAGS, R_STEPS, R_BUF_KIND, R_RESERVED, R_SP_NNZ, R_COUNT };
static const state_field RECORD[R_COUNT] = {
    {"ndim", T_U32, R(ndim), V_LAYOUT, EMB_MAX_DIMS},
    {"flags", T_U32, R(flags), V_LAYOUT, 1},
    {"steps", T_U64, R(steps), V_MAX, INT64_MAX}, /* an i64 >= 0 */
    {"buf_kind", T_U32, R(buf_kind), V_LAYOUT, EMB__BUF_SPARSE},
    {"reserved", T_U32, R(reserved), V_LAYOUT, 0},
    /* also 0 unless buf_kind is EMB__BUF_SPARSE (pass 1) */
    {"sp_nnz", T_U64, R(sp_nnz), V_LAYOUT, INT64_MAX},
};
#undef R

/* The sections of a record after its fixed fields, in order. A section is present when its
 * condition holds and then holds count elements of its type:
 *   shape            always, ndim u64 (i64 >= 0 whose product fits an i64: pass 1; the
 *                    parameter's shape: pass 2)
 *   state 0, 1, 2    when the dense state is allocated and the kind has that many buffers
 *                    (emb__optim_state_buffers): numel f32 each (s1, s2, s3)
 *   momentum         when buf_kind is EMB__BUF_DENSE: numel f32 (s1)
 *   sparse rows      when buf_kind is EMB__BUF_SPARSE (a 2-D parameter, pass 1): sp_nnz
 *                    u64, each a row of the parameter (pass 2)
 *   sparse values    when buf_kind is EMB__BUF_SPARSE: sp_nnz x dim f32 */
typedef enum { W_ALWAYS, W_STATE, W_DENSE_BUF, W_SPARSE_BUF } section_when;
typedef enum { C_NDIM, C_NUMEL, C_NNZ, C_NNZ_DIM } section_count;
typedef enum { M_SHAPE, M_S1, M_S2, M_S3, M_SP_ROWS, M_SP_VALS } section_member;

typedef struct state_section {
    const char *name; /* also the name of its allocation in messages */
    state_type type;
    section_when when;
    int buffer; /* W_STATE: which of the kind's dense buffers */
    section_count count;
    section_member member;
} state_section;

enum { S_SHAPE }; /* the first section */
static const state_section SECTIONS[] = {
    {"shape", T_U64, W_ALWAYS, 0, C_NDIM, M_SHAPE},
    {"optimizer state", T_F32, W_STATE, 0, C_NUMEL, M_S1},
    {"optimizer state", T_F32, W_STATE, 1, C_NUMEL, M_S2},
    {"optimizer state", T_F32, W_STATE, 2, C_NUMEL, M_S3},
    {"momentum buffer", T_F32, W_DENSE_BUF, 0, C_NUMEL, M_S1},
    {"momentum buffer", T_U64, W_SPARSE_BUF, 0, C_NNZ, M_SP_ROWS},
    {"momentum buffer", T_F32, W_SPARSE_BUF, 0, C_NNZ_DIM, M_SP_VALS},
};
#define S_COUNT ((int)(sizeof SECTIONS / sizeof SECTIONS[0]))

/* ---- the fields' and sections' values -------------------------------------------------- */

static size_t fields_size(const state_field *f, int n) {
    size_t s = 0;
    for (int i = 0; i < n; i++) s += type_size(f[i].type);
    return s;
}

/* Writes the fields of `values` (a state_header or state_record) at p; returns the end. */
static unsigned char *put_fields(unsigned char *p, const state_field *f, int n,
                                 const void *values) {
    for (int i = 0; i < n; i++) {
        const char *v = (const char *)values + f[i].member;
        uint32_t u32;
        uint64_t u64;
        switch (f[i].type) {
        case T_MAGIC:
            memcpy(p, STATE_MAGIC, 8);
            break;
        case T_U32:
        case T_F32:
            memcpy(&u32, v, 4);
            emb__put_u32le(p, u32);
            break;
        case T_U64:
        case T_F64:
            memcpy(&u64, v, 8);
            emb__put_u64le(p, u64);
            break;
        }
        p += type_size(f[i].type);
    }
    return p;
}

/* Reads the fields at p into `values` (the magic is not stored); no checks. */
static void get_fields(const unsigned char *p, const state_field *f, int n, void *values) {
    for (int i = 0; i < n; i++) {
        char *v = (char *)values + f[i].member;
        if (f[i].type == T_U32 || f[i].type == T_F32) {
            uint32_t u32 = emb__get_u32le(p);
            memcpy(v, &u32, 4);
        } else if (f[i].type != T_MAGIC) {
            uint64_t u64 = emb__get_u64le(p);
            memcpy(v, &u64, 8);
        }
        p += type_size(f[i].type);
    }
}

/* The value of an integer field of `values`. */
static uint64_t field_value(const state_field *f, const void *values) {
    const char *v = (const char *)values + f->member;
    if (f->type == T_U32) {
        uint32_t u32;
        memcpy(&u32, v, 4);
        return u32;
    }
    uint64_t u64;
    memcpy(&u64, v, 8);
    return u64;
}

/* Whether section s is present in the record of a parameter in state ps (nbuf: the kind's
 * number of dense buffers). */
static bool section_present(const state_section *s, const emb__param_state *ps, int nbuf) {
    switch (s->when) {
    case W_ALWAYS:
        return true;
    case W_STATE:
        return ps->initialized && s->buffer < nbuf;
    case W_DENSE_BUF:
        return ps->buf_kind == EMB__BUF_DENSE;
    case W_SPARSE_BUF:
        return ps->buf_kind == EMB__BUF_SPARSE;
    }
    return false;
}

/* The number of elements of section s as (a, b): a * b elements. */
static void section_count_of(const state_section *s, const emb__param_state *ps, int64_t *a,
                             int64_t *b) {
    *a = s->count == C_NDIM ? ps->ndim : s->count == C_NUMEL ? ps->numel : ps->sp_nnz;
    *b = s->count == C_NNZ_DIM ? ps->shape[1] : 1;
}

/* Where a section's elements live in a parameter's state. */
static float **f32_member(emb__param_state *ps, section_member m) {
    switch (m) {
    case M_S1:
        return &ps->s1;
    case M_S2:
        return &ps->s2;
    case M_S3:
        return &ps->s3;
    default:
        return &ps->sp_vals;
    }
}

/* Bytes of one parameter's record (fixed fields and present sections); false on
 * overflow. */
static bool record_size(const emb__param_state *ps, int nbuf, uint64_t *out) {
    uint64_t n = fields_size(RECORD, R_COUNT);
    for (int i = 0; i < S_COUNT; i++) {
        const state_section *s = &SECTIONS[i];
        if (!section_present(s, ps, nbuf)) continue;
        int64_t a, b;
        section_count_of(s, ps, &a, &b);
        uint64_t bytes;
        if (__builtin_mul_overflow((uint64_t)a, (uint64_t)b, &bytes) ||
            __builtin_mul_overflow(bytes, (uint64_t)type_size(s->type), &bytes) ||
            __builtin_add_overflow(n, bytes, &n))
            return false;
    }
    *out = n;
    return true;
}

/* ---------------------------------------------------------------------------------------
 * Save
 * ------------------------------------------------------------------------------------- */

size_t emb_optimizer_state_nbytes(const emb_optimizer *opt) {
    if (!opt) return 0;
    uint64_t n = fields_size(HEADER, H_COUNT) + 8; /* + checksum */
    const int nbuf = emb__optim_state_buffers(&opt->o);
    for (int i = 0; i < opt->nparams; i++) {
        uint64_t r;
        if (!record_size(&opt->ps[i], nbuf, &r) || __builtin_add_overflow(n, r, &n)) return 0;
    }
    return n > SIZE_MAX ? 0 : (size_t)n;
}

static state_header header_of(const emb_optimizer *opt) {
    const emb_optimizer_options *o = &opt->o;
    state_header h;
    memset(&h, 0, sizeof h);
    h.version = STATE_VERSION;
    h.kind = (uint32_t)o->kind;
    h.o = *o;
    h.flags = (uint32_t)(o->nesterov | o->amsgrad << 1 | o->maximize << 2);
    h.nparams = (uint32_t)opt->nparams;
    return h;
}

/* Writes the elements of a present section of ps at p; returns the end. */
static unsigned char *put_section(unsigned char *p, const state_section *s,
                                  const emb__param_state *ps) {
    int64_t a, b;
    section_count_of(s, ps, &a, &b);
    const int64_t n = a * b;
    if (s->member == M_SHAPE || s->member == M_SP_ROWS) {
        const int64_t *x = s->member == M_SHAPE ? ps->shape : ps->sp_rows;
        for (int64_t i = 0; i < n; i++, p += 8) emb__put_u64le(p, (uint64_t)x[i]);
        return p;
    }
    /* read only: the cast is for the one accessor of the float members */
    const float *x = *f32_member((emb__param_state *)ps, s->member);
    emb__f32le_encode(p, x, (size_t)n);
    return p + 4 * n;
}

emb_status emb_optimizer_save_state(const emb_optimizer *opt, void *buf, size_t n) {
    if (!opt) return emb__null("opt");
    if (!buf) return emb__null("buf");
    const size_t need = emb_optimizer_state_nbytes(opt);
    if (need == 0) return emb__error(EMB_ERR_OVERFLOW, "the optimizer state is too large");
    if (n < need)
        return emb__error(EMB_ERR_INVALID,
                          "buf holds %zu bytes; the optimizer state needs %zu "
                          "(emb_optimizer_state_nbytes)",
                          n, need);
    const int nbuf = emb__optim_state_buffers(&opt->o);
    const state_header h = header_of(opt);
    unsigned char *p = put_fields(buf, HEADER, H_COUNT, &h);
    for (int i = 0; i < opt->nparams; i++) {
        const emb__param_state *ps = &opt->ps[i];
        const state_record r = {(uint32_t)ps->ndim,
                                ps->initialized ? 1u : 0u,
                                (uint64_t)ps->steps,
                                (uint32_t)ps->buf_kind,
                                0,
                                (uint64_t)(ps->buf_kind == EMB__BUF_SPARSE ? ps->sp_nnz : 0)};
        p = put_fields(p, RECORD, R_COUNT, &r);
        for (int k = 0; k < S_COUNT; k++)
            if (section_present(&SECTIONS[k], ps, nbuf)) p = put_section(p, &SECTIONS[k], ps);
    }
    emb__put_u64le(p, emb__fnv64(buf, need - 8));
    return EMB_OK;
}

/* ---------------------------------------------------------------------------------------
 * Load
 * ------------------------------------------------------------------------------------- */

static emb_status bad_state(const char *fmt, ...) EMB__PRINTF(1, 2);
static emb_status bad_state(const char *fmt, ...) {
    char msg[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return emb__error(EMB_ERR_FORMAT, "optimizer state: %s", msg);
}

static const char *kind_name(uint32_t k) {
    static const char *names[] = {"SGD", "Adagrad", "Adam", "AdamW", "SparseAdam"};
    return k < 5 ? names[k] : "unknown";
}

/* A record as the passes read it: the fixed fields, and the parameter state they describe
 * (ndim, shape, numel, initialized, buf_kind, sp_nnz; no buffers). */
typedef struct record_view {
    state_record f;
    emb__param_state ps;
    const unsigned char *data; /* the first section after the shape */
} record_view;

/* Pass 1 for the record at b + off of a buffer of n bytes (the checksum excluded: end =
 * n - 8): bounds, layout checks and shape; *size is the record's size. */
static emb_status walk_record(const unsigned char *b, uint64_t end, uint64_t off, uint32_t i,
                              int nbuf, record_view *r, uint64_t *size) {
    const uint64_t fixed = fields_size(RECORD, R_COUNT);
    if (end < off || end - off < fixed)
        return bad_state("truncated: %" PRIu64 " bytes end inside parameter %" PRIu32 "", end + 8,
                         i);
    memset(r, 0, sizeof *r);
    get_fields(b + off, RECORD, R_COUNT, &r->f);
    for (int k = 0; k < R_COUNT; k++)
        if (RECORD[k].check == V_LAYOUT && field_value(&RECORD[k], &r->f) > RECORD[k].max)
            return bad_state("corrupt record of parameter %" PRIu32, i);
    if (r->f.buf_kind != EMB__BUF_SPARSE && r->f.sp_nnz != 0)
        return bad_state("corrupt record of parameter %" PRIu32, i);
    if (end - off - fixed < 8u * r->f.ndim)
        return bad_state("truncated: %" PRIu64 " bytes end inside parameter %" PRIu32 "", end + 8,
                         i);
    const unsigned char *shape = b + off + fixed;
    uint64_t numel = 1;
    for (uint32_t d = 0; d < r->f.ndim; d++) {
        uint64_t s = emb__get_u64le(shape + 8 * d);
        if (s > (uint64_t)INT64_MAX || __builtin_mul_overflow(numel, s, &numel) ||
            numel > (uint64_t)INT64_MAX)
            return bad_state("corrupt shape of parameter %" PRIu32, i);
        r->ps.shape[d] = (int64_t)s;
    }
    if (r->f.buf_kind == EMB__BUF_SPARSE && r->f.ndim != 2)
        return bad_state("corrupt record of parameter %" PRIu32, i);
    r->ps.ndim = (int)r->f.ndim;
    r->ps.numel = (int64_t)numel;
    r->ps.initialized = r->f.flags & 1;
    r->ps.buf_kind = (int)r->f.buf_kind;
    r->ps.sp_nnz = (int64_t)r->f.sp_nnz;
    r->data = shape + 8u * r->f.ndim;
    if (!record_size(&r->ps, nbuf, size) || end - off < *size)
        return bad_state("truncated: %" PRIu64 " bytes end inside parameter %" PRIu32 "", end + 8,
                         i);
    return EMB_OK;
}

/* Pass 1: the header's magic and version, every record's layout, the total size and the
 * checksum. */
static emb_status check_layout(const unsigned char *b, size_t n, state_header *h) {
    const uint64_t hsize = fields_size(HEADER, H_COUNT);
    if (n < hsize + 8)
        return bad_state("truncated: %zu bytes, a state has at least %d", n, (int)hsize + 8);
    if (memcmp(b, STATE_MAGIC, 8))
        return bad_state("not an emb optimizer state (magic \"%s\" missing)", STATE_MAGIC);
    memset(h, 0, sizeof *h);
    get_fields(b, HEADER, H_COUNT, h);
    if (h->version != STATE_VERSION)
        return bad_state("version %" PRIu32 " is not supported (this build reads version %u)",
                         h->version, STATE_VERSION);
    /* The records' sizes depend on the kind and amsgrad, checked in pass 2 (an unknown
     * kind has no dense state here). */
    emb_optimizer_options lo;
    memset(&lo, 0, sizeof lo);
    lo.kind = (emb_optimizer_kind)h->kind;
    lo.amsgrad = (h->flags >> 1) & 1;
    const int nbuf = emb__optim_state_buffers(&lo);
    uint64_t off = hsize;
    for (uint32_t i = 0; i < h->nparams; i++) {
        record_view r;
        uint64_t size;
        emb_status st = walk_record(b, n - 8, off, i, nbuf, &r, &size);
        if (st) return st;
        off += size;
    }
    if (off + 8 != n)
        return bad_state("%zu bytes, but the layout ends after %" PRIu64 " (trailing or missing "
                         "bytes)",
                         n, off + 8);
    if (emb__get_u64le(b + off) != emb__fnv64(b, (size_t)off))
        return bad_state("checksum mismatch: the state is corrupt");
    return EMB_OK;
}

/* Pass 2, header: kind, option values and flags, number of parameters; *lo the options. */
static emb_status check_header(const emb_optimizer *opt, const state_header *h,
                               emb_optimizer_options *lo) {
    if (h->kind != (uint32_t)opt->o.kind)
        return bad_state("saved from a %s optimizer (kind %" PRIu32 "), this one is %s",
                         kind_name(h->kind), h->kind, kind_name((uint32_t)opt->o.kind));
    *lo = h->o; /* the nine doubles, the rest zero */
    lo->kind = opt->o.kind;
    if (h->flags > HEADER[H_FLAGS].max)
        return bad_state("corrupt option flags 0x%" PRIx32, h->flags);
    lo->nesterov = h->flags & 1;
    lo->amsgrad = (h->flags >> 1) & 1;
    lo->maximize = (h->flags >> 2) & 1;
    if (emb__optim_check_options(lo)) return bad_state("invalid options (%s)", emb_errmsg());
    if (h->nparams != (uint32_t)opt->nparams)
        return bad_state("%" PRIu32 " parameters saved, this optimizer has %d", h->nparams,
                         opt->nparams);
    return EMB_OK;
}

/* Pass 2, parameter i against the optimizer's parameter ps (options lo). */
static emb_status check_record(const record_view *r, int i, const emb__param_state *ps,
                               const emb_optimizer_options *lo) {
    bool same = r->ps.ndim == ps->ndim;
    for (int d = 0; d < r->ps.ndim; d++)
        same = same && d < ps->ndim && r->ps.shape[d] == ps->shape[d];
    if (!same) {
        char g[300], w[300];
        return bad_state("parameter %d was saved with shape %s, it has shape %s", i,
                         emb__shape_fmt(g, sizeof g, r->ps.ndim, r->ps.shape),
                         emb__shape_fmt(w, sizeof w, ps->ndim, ps->shape));
    }
    if (r->f.steps > RECORD[R_STEPS].max)
        return bad_state("parameter %d has a negative step count", i);
    if (r->ps.initialized && emb__optim_state_buffers(lo) == 0)
        return bad_state("parameter %d: SGD has no dense state to restore", i);
    const bool momentum = lo->kind == EMB_OPTIMIZER_SGD && lo->momentum != 0.0;
    if (r->ps.buf_kind != EMB__BUF_NONE && !momentum)
        return bad_state("parameter %d has a momentum buffer, but the options have no "
                         "SGD momentum",
                         i);
    if (r->ps.buf_kind == EMB__BUF_SPARSE) {
        /* the first section after the shape: SGD keeps no dense state (checked above) */
        const unsigned char *rows = r->data;
        for (int64_t k = 0; k < r->ps.sp_nnz; k++) {
            uint64_t row = emb__get_u64le(rows + 8 * k);
            if (row >= (uint64_t)ps->shape[0])
                return bad_state("parameter %d: momentum buffer entry %" PRId64 " has row %" PRIu64
                                 ", out of range [0, %" PRId64 ")",
                                 i, k, row, ps->shape[0]);
        }
    }
    return EMB_OK;
}

/* Pass 3: q (a copy of the parameter's registration) gets the record's step count and
 * freshly allocated buffers holding its sections. On failure the buffers allocated so far
 * stay in q for the caller to free. */
static emb_status read_record(const record_view *r, int nbuf, emb__param_state *q) {
    q->s1 = q->s2 = q->s3 = NULL;
    q->sp_rows = NULL;
    q->sp_vals = NULL;
    q->steps = (int64_t)r->f.steps;
    q->initialized = r->ps.initialized;
    q->buf_kind = r->ps.buf_kind;
    q->sp_nnz = r->ps.sp_nnz;
    const unsigned char *d = r->data;
    for (int k = S_SHAPE + 1; k < S_COUNT; k++) {
        const state_section *s = &SECTIONS[k];
        if (!section_present(s, q, nbuf)) continue;
        int64_t a, b;
        section_count_of(s, q, &a, &b);
        if (s->type == T_U64) { /* the sparse rows, the only u64 section after the shape */
            emb_status st = emb__optim_alloc_i64(a, &q->sp_rows, s->name);
            if (st) return st;
            for (int64_t i = 0; i < a; i++) q->sp_rows[i] = (int64_t)emb__get_u64le(d + 8 * i);
            d += 8 * (size_t)a;
        } else {
            float **x = f32_member(q, s->member);
            emb_status st = emb__optim_alloc_f32(a, b, x, s->name);
            if (st) return st;
            emb__f32le_decode(*x, d, (size_t)(a * b));
            d += 4 * (size_t)(a * b);
        }
    }
    return EMB_OK;
}

emb_status emb_optimizer_load_state(emb_optimizer *opt, const void *buf, size_t n) {
    if (!opt) return emb__null("opt");
    if (!buf) return emb__null("buf");
    const unsigned char *b = buf;
    state_header h;
    emb_status st = check_layout(b, n, &h); /* pass 1 */
    if (st) return st;

    /* Pass 2. The saved options replace the optimizer's (as load_state_dict restores
     * param_groups). */
    emb_optimizer_options lo;
    st = check_header(opt, &h, &lo);
    if (st) return st;
    const int nbuf = emb__optim_state_buffers(&lo);
    const uint64_t hsize = fields_size(HEADER, H_COUNT);
    uint64_t off = hsize, size;
    record_view r;
    for (int i = 0; i < opt->nparams; i++) {
        walk_record(b, n - 8, off, (uint32_t)i, nbuf, &r, &size); /* passed in pass 1 */
        st = check_record(&r, i, &opt->ps[i], &lo);
        if (st) return st;
        off += size;
    }

    /* Pass 3: allocate everything, then swap: nothing changes on failure. */
    emb__param_state *nst = calloc((size_t)(opt->nparams ? opt->nparams : 1), sizeof *nst);
    if (!nst) return emb__error(EMB_ERR_NOMEM, "cannot allocate the optimizer state");
    off = hsize;
    for (int i = 0; i < opt->nparams && !st; i++) {
        walk_record(b, n - 8, off, (uint32_t)i, nbuf, &r, &size);
        nst[i] = opt->ps[i];
        st = read_record(&r, nbuf, &nst[i]);
        off += size;
    }
    if (st) {
        for (int i = 0; i < opt->nparams; i++) emb__optim_free_state(&nst[i]);
        free(nst);
        return st;
    }
    for (int i = 0; i < opt->nparams; i++) {
        emb__optim_free_state(&opt->ps[i]);
        opt->ps[i] = nst[i];
    }
    free(nst);
    opt->o = lo;
    return EMB_OK;
}
