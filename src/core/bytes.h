/* src/core/bytes.h: the one byte codec and the one checksum of emb's binary formats
 * (docs/file-formats.md). Every number a format stores is little-endian, whatever the host:
 * integers as their bits (a signed value as its two's complement), floats as their IEEE-754
 * bits. The checksum is 64-bit FNV-1a.
 *
 * Two ways to use the codec:
 *   - at a known offset: emb__put_u32le(p, v) / emb__get_u32le(p), the caller has checked
 *     that the bytes are there;
 *   - through a cursor (emb__bytes_out / emb__bytes_in) that checks the room before every
 *     field: past the end it writes nothing, reads zero, and stays `bad`, so a parser reads
 *     its fields one after the other and tests `bad` once. */
#ifndef EMB_BYTES_H
#define EMB_BYTES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#if defined(__BYTE_ORDER__) && defined(__ORDER_BIG_ENDIAN__) &&                                    \
    __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
#define EMB__HOST_LE 0
#else
#define EMB__HOST_LE 1
#endif

/* ---- at a known offset ---------------------------------------------------------------- */

static inline void emb__put_u16le(unsigned char *p, uint16_t v) {
    p[0] = (unsigned char)v;
    p[1] = (unsigned char)(v >> 8);
}
static inline void emb__put_u32le(unsigned char *p, uint32_t v) {
    for (int i = 0; i < 4; i++) p[i] = (unsigned char)(v >> (8 * i));
}
static inline void emb__put_u64le(unsigned char *p, uint64_t v) {
    for (int i = 0; i < 8; i++) p[i] = (unsigned char)(v >> (8 * i));
}
static inline void emb__put_f32le(unsigned char *p, float v) {
    uint32_t u;
    memcpy(&u, &v, 4);
    emb__put_u32le(p, u);
}
static inline void emb__put_f64le(unsigned char *p, double v) {
    uint64_t u;
    memcpy(&u, &v, 8);
    emb__put_u64le(p, u);
}

static inline uint16_t emb__get_u16le(const unsigned char *p) {
    return (uint16_t)(p[0] | (unsigned)p[1] << 8);
}
static inline uint32_t emb__get_u32le(const unsigned char *p) {
    uint32_t v = 0;
    for (int i = 0; i < 4; i++) v |= (uint32_t)p[i] << (8 * i);
    return v;
}
static inline uint64_t emb__get_u64le(const unsigned char *p) {
    uint64_t v = 0;
    for (int i = 0; i < 8; i++) v |= (uint64_t)p[i] << (8 * i);
    return v;
}
static inline float emb__get_f32le(const unsigned char *p) {
    uint32_t u = emb__get_u32le(p);
    float v;
    memcpy(&v, &u, 4);
    return v;
}
static inline double emb__get_f64le(const unsigned char *p) {
    uint64_t u = emb__get_u64le(p);
    double v;
    memcpy(&v, &u, 8);
    return v;
}

/* n float32 values to and from 4n little-endian bytes (a copy on a little-endian host). */
static inline void emb__f32le_encode(unsigned char *dst, const float *src, size_t n) {
    if (EMB__HOST_LE) {
        if (n) memcpy(dst, src, n * 4);
    } else {
        for (size_t i = 0; i < n; i++) emb__put_f32le(dst + 4 * i, src[i]);
    }
}
static inline void emb__f32le_decode(float *dst, const unsigned char *src, size_t n) {
    if (EMB__HOST_LE) {
        if (n) memcpy(dst, src, n * 4);
    } else {
        for (size_t i = 0; i < n; i++) dst[i] = emb__get_f32le(src + 4 * i);
    }
}

/* ---- through a bounded cursor ----------------------------------------------------------- */

typedef struct emb__bytes_out {
    unsigned char *p;
    size_t size, pos;
    bool bad; /* a put did not fit: nothing more is written */
} emb__bytes_out;

typedef struct emb__bytes_in {
    const unsigned char *p;
    size_t size, pos;
    bool bad; /* a get ran past the end: it and every later get read zero */
} emb__bytes_in;

static inline emb__bytes_out emb__bytes_out_at(void *p, size_t size) {
    emb__bytes_out o = {(unsigned char *)p, size, 0, false};
    return o;
}
static inline emb__bytes_in emb__bytes_in_at(const void *p, size_t size) {
    emb__bytes_in i = {(const unsigned char *)p, size, 0, false};
    return i;
}

/* Room for n more bytes at the cursor (then advanced past them), or NULL (cursor bad). */
static inline unsigned char *emb__bytes_take(emb__bytes_out *o, size_t n) {
    if (o->bad || o->size - o->pos < n) {
        o->bad = true;
        return NULL;
    }
    unsigned char *q = o->p + o->pos;
    o->pos += n;
    return q;
}
static inline const unsigned char *emb__bytes_next(emb__bytes_in *in, size_t n) {
    if (in->bad || in->size - in->pos < n) {
        in->bad = true;
        return NULL;
    }
    const unsigned char *q = in->p + in->pos;
    in->pos += n;
    return q;
}

static inline void emb__out_raw(emb__bytes_out *o, const void *src, size_t n) {
    unsigned char *q = emb__bytes_take(o, n);
    if (q && n) memcpy(q, src, n);
}
static inline void emb__out_u32(emb__bytes_out *o, uint32_t v) {
    unsigned char *q = emb__bytes_take(o, 4);
    if (q) emb__put_u32le(q, v);
}
static inline void emb__out_u64(emb__bytes_out *o, uint64_t v) {
    unsigned char *q = emb__bytes_take(o, 8);
    if (q) emb__put_u64le(q, v);
}
static inline void emb__out_f64(emb__bytes_out *o, double v) {
    unsigned char *q = emb__bytes_take(o, 8);
    if (q) emb__put_f64le(q, v);
}

static inline bool emb__in_raw(emb__bytes_in *in, void *dst, size_t n) {
    const unsigned char *q = emb__bytes_next(in, n);
    if (q && n) memcpy(dst, q, n);
    return q != NULL;
}
static inline uint32_t emb__in_u32(emb__bytes_in *in) {
    const unsigned char *q = emb__bytes_next(in, 4);
    return q ? emb__get_u32le(q) : 0;
}
static inline uint64_t emb__in_u64(emb__bytes_in *in) {
    const unsigned char *q = emb__bytes_next(in, 8);
    return q ? emb__get_u64le(q) : 0;
}
static inline double emb__in_f64(emb__bytes_in *in) {
    const unsigned char *q = emb__bytes_next(in, 8);
    return q ? emb__get_f64le(q) : 0.0;
}

/* ---- the checksum: 64-bit FNV-1a --------------------------------------------------------- */

#define EMB__FNV64_INIT 0xcbf29ce484222325ull

/* The checksum h continued over n more bytes (start from EMB__FNV64_INIT). */
static inline uint64_t emb__fnv64_update(uint64_t h, const void *data, size_t n) {
    const unsigned char *p = (const unsigned char *)data;
    for (size_t i = 0; i < n; i++) h = (h ^ p[i]) * 0x100000001b3ull;
    return h;
}
static inline uint64_t emb__fnv64(const void *data, size_t n) {
    return emb__fnv64_update(EMB__FNV64_INIT, data, n);
}

#endif
