/* emb_vocab: words in an arena, parallel arrays per id, an open-addressing hash table of ids. */
#include "internal.h"

#include <emb/vocab.h>

#include <stdlib.h>
#include <string.h>

struct emb_vocab {
    int64_t size, cap; /* words, allocated entries of the per-word arrays */
    int64_t *off;      /* [cap] offset of the word in arena */
    uint32_t *len;     /* [cap] bytes */
    uint64_t *hash;    /* [cap] */
    int64_t *count;    /* [cap] */
    char *arena;       /* words, each followed by a NUL */
    size_t arena_len, arena_cap;
    int64_t *slots;  /* [nslots] id, or -1 */
    size_t nslots;   /* power of two, >= 2 * size */
    int64_t nonzero; /* words with a non-zero count */
};

static uint64_t vocab_hash(const char *s, size_t n) {
    /* FNV-1a 64, then a final mix so that the low bits used by the table are well spread. */
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++) h = (h ^ (unsigned char)s[i]) * 1099511628211ull;
    h ^= h >> 33;
    h *= 0xff51afd7ed558ccdull;
    h ^= h >> 33;
    return h;
}

emb_status emb_vocab_create(emb_vocab **out) {
    if (!out) return emb__null("out");
    emb_vocab *v = calloc(1, sizeof *v);
    if (!v) return emb__error(EMB_ERR_NOMEM, "emb_vocab_create: out of memory");
    v->nslots = 64;
    v->slots = malloc(v->nslots * sizeof *v->slots);
    if (!v->slots) {
        free(v);
        return emb__error(EMB_ERR_NOMEM, "emb_vocab_create: out of memory");
    }
    memset(v->slots, 0xff, v->nslots * sizeof *v->slots);
    *out = v;
    return EMB_OK;
}

void emb_vocab_free(emb_vocab *v) {
    if (!v) return;
    free(v->off);
    free(v->len);
    free(v->hash);
    free(v->count);
    free(v->arena);
    free(v->slots);
    free(v);
}

int64_t emb_vocab_num_words(const emb_vocab *v) {
    return v ? v->size : 0;
}

static int64_t vocab_lookup(const emb_vocab *v, const char *w, size_t n, uint64_t h, size_t *slot) {
    size_t mask = v->nslots - 1, i = (size_t)h & mask;
    for (;;) {
        int64_t id = v->slots[i];
        if (id < 0) {
            if (slot) *slot = i;
            return -1;
        }
        if (v->hash[id] == h && v->len[id] == n && memcmp(v->arena + v->off[id], w, n) == 0) {
            if (slot) *slot = i;
            return id;
        }
        i = (i + 1) & mask;
    }
}

/* Rebuilds the hash table with at least 2 * want slots. */
static emb_status vocab_rehash(emb_vocab *v, int64_t want) {
    size_t n = 64;
    while (n < (size_t)want * 2) {
        if (n > SIZE_MAX / 4 / sizeof(int64_t))
            return emb__error(EMB_ERR_OVERFLOW, "vocabulary too large");
        n *= 2;
    }
    int64_t *s = malloc(n * sizeof *s);
    if (!s) return emb__error(EMB_ERR_NOMEM, "vocabulary: out of memory for %zu hash slots", n);
    memset(s, 0xff, n * sizeof *s);
    for (int64_t id = 0; id < v->size; id++) {
        size_t i = (size_t)v->hash[id] & (n - 1);
        while (s[i] >= 0) i = (i + 1) & (n - 1);
        s[i] = id;
    }
    free(v->slots);
    v->slots = s;
    v->nslots = n;
    return EMB_OK;
}

int64_t emb_vocab_find(const emb_vocab *v, const char *word, size_t len) {
    if (!v || (!word && len) || len == 0 || len > EMB_VOCAB_MAX_WORD) return -1;
    return vocab_lookup(v, word, len, vocab_hash(word, len), NULL);
}

static emb_status vocab_grow(emb_vocab *v, int64_t need) {
    if (need <= v->cap) return EMB_OK;
    int64_t cap = v->cap ? v->cap : 64;
    while (cap < need) cap *= 2;
    int64_t *off = realloc(v->off, (size_t)cap * sizeof *off);
    if (off) v->off = off;
    uint32_t *len = realloc(v->len, (size_t)cap * sizeof *len);
    if (len) v->len = len;
    uint64_t *hash = realloc(v->hash, (size_t)cap * sizeof *hash);
    if (hash) v->hash = hash;
    int64_t *count = realloc(v->count, (size_t)cap * sizeof *count);
    if (count) v->count = count;
    if (!off || !len || !hash || !count)
        return emb__error(EMB_ERR_NOMEM, "vocabulary: out of memory for %lld words",
                          (long long)cap);
    v->cap = cap;
    return EMB_OK;
}

emb_status emb_vocab_reserve(emb_vocab *v, int64_t n) {
    if (!v) return emb__null("vocab");
    if (n < 0)
        return emb__error(EMB_ERR_INVALID, "emb_vocab_reserve: %lld words is negative",
                          (long long)n);
    if (n > (INT64_MAX / 64))
        return emb__error(EMB_ERR_OVERFLOW, "emb_vocab_reserve: %lld words is too many",
                          (long long)n);
    emb_status st = vocab_grow(v, n);
    if (!st && (size_t)n * 2 > v->nslots) st = vocab_rehash(v, n);
    return st;
}

emb_status emb_vocab_add(emb_vocab *v, const char *word, size_t len, int64_t count, int64_t *id,
                         bool *added) {
    if (!v) return emb__null("vocab");
    if (!word && len) return emb__null("word");
    if (len == 0) return emb__error(EMB_ERR_INVALID, "emb_vocab_add: empty word");
    if (len > EMB_VOCAB_MAX_WORD)
        return emb__error(EMB_ERR_INVALID, "emb_vocab_add: word of %zu bytes is longer than %d",
                          len, EMB_VOCAB_MAX_WORD);
    if (count < 0)
        return emb__error(EMB_ERR_INVALID, "emb_vocab_add: count %lld is negative",
                          (long long)count);
    uint64_t h = vocab_hash(word, len);
    size_t slot;
    int64_t found = vocab_lookup(v, word, len, h, &slot);
    if (found >= 0) {
        int64_t c = v->count[found], nc;
        if (__builtin_add_overflow(c, count, &nc)) nc = INT64_MAX;
        if (c == 0 && nc != 0) v->nonzero++;
        v->count[found] = nc;
        if (id) *id = found;
        if (added) *added = false;
        return EMB_OK;
    }
    emb_status st = vocab_grow(v, v->size + 1);
    if (st) return st;
    if (v->arena_len + len + 1 > v->arena_cap) {
        size_t cap = v->arena_cap ? v->arena_cap : 4096;
        while (cap < v->arena_len + len + 1) {
            if (cap > SIZE_MAX / 2) return emb__error(EMB_ERR_OVERFLOW, "vocabulary too large");
            cap *= 2;
        }
        char *a = realloc(v->arena, cap);
        if (!a)
            return emb__error(EMB_ERR_NOMEM, "vocabulary: out of memory for %zu bytes of words",
                              cap);
        v->arena = a;
        v->arena_cap = cap;
    }
    if ((size_t)(v->size + 1) * 2 > v->nslots) {
        st = vocab_rehash(v, v->size + 1);
        if (st) return st;
        vocab_lookup(v, word, len, h, &slot);
    }
    int64_t nid = v->size;
    memcpy(v->arena + v->arena_len, word, len);
    v->arena[v->arena_len + len] = '\0';
    v->off[nid] = (int64_t)v->arena_len;
    v->len[nid] = (uint32_t)len;
    v->hash[nid] = h;
    v->count[nid] = count;
    if (count) v->nonzero++;
    v->arena_len += len + 1;
    v->slots[slot] = nid;
    v->size++;
    if (id) *id = nid;
    if (added) *added = true;
    return EMB_OK;
}

const char *emb_vocab_word(const emb_vocab *v, int64_t id, size_t *len) {
    if (!v || id < 0 || id >= v->size) return NULL;
    if (len) *len = v->len[id];
    return v->arena + v->off[id];
}

int64_t emb_vocab_count(const emb_vocab *v, int64_t id) {
    if (!v || id < 0 || id >= v->size) return -1;
    return v->count[id];
}

emb_status emb_vocab_set_count(emb_vocab *v, int64_t id, int64_t count) {
    if (!v) return emb__null("vocab");
    if (id < 0 || id >= v->size)
        return emb__error(
            EMB_ERR_INDEX,
            "emb_vocab_set_count: id %lld is out of range for a vocabulary of %lld words",
            (long long)id, (long long)v->size);
    if (count < 0)
        return emb__error(EMB_ERR_INVALID, "emb_vocab_set_count: count %lld is negative",
                          (long long)count);
    v->nonzero += (count != 0) - (v->count[id] != 0);
    v->count[id] = count;
    return EMB_OK;
}

bool emb_vocab_has_counts(const emb_vocab *v) {
    return v && v->nonzero > 0;
}

/* Applies a selection/permutation: new id i takes old id src[i], for i < n. Compacts the
 * arena. All allocation happens before anything changes. */
static emb_status vocab_apply(emb_vocab *v, const int64_t *src, int64_t n) {
    size_t bytes = 0;
    for (int64_t i = 0; i < n; i++) bytes += v->len[src[i]] + 1;
    int64_t cap = n > 0 ? n : 1;
    int64_t *off = malloc((size_t)cap * sizeof *off);
    uint32_t *len = malloc((size_t)cap * sizeof *len);
    uint64_t *hash = malloc((size_t)cap * sizeof *hash);
    int64_t *count = malloc((size_t)cap * sizeof *count);
    char *arena = malloc(bytes ? bytes : 1);
    size_t ns = 64;
    while (ns < (size_t)n * 2) ns *= 2;
    int64_t *slots = malloc(ns * sizeof *slots);
    if (!off || !len || !hash || !count || !arena || !slots) {
        free(off), free(len), free(hash), free(count), free(arena), free(slots);
        return emb__error(EMB_ERR_NOMEM, "vocabulary: out of memory reordering %lld words",
                          (long long)n);
    }
    size_t pos = 0;
    int64_t nonzero = 0;
    for (int64_t i = 0; i < n; i++) {
        int64_t o = src[i];
        memcpy(arena + pos, v->arena + v->off[o], v->len[o] + 1);
        off[i] = (int64_t)pos;
        pos += v->len[o] + 1;
        len[i] = v->len[o];
        hash[i] = v->hash[o];
        count[i] = v->count[o];
        nonzero += count[i] != 0;
    }
    free(v->off), free(v->len), free(v->hash), free(v->count), free(v->arena), free(v->slots);
    v->off = off, v->len = len, v->hash = hash, v->count = count, v->arena = arena;
    v->arena_cap = bytes ? bytes : 1;
    v->arena_len = bytes;
    v->cap = cap;
    v->size = n;
    v->nonzero = nonzero;
    memset(slots, 0xff, ns * sizeof *slots);
    for (int64_t id = 0; id < n; id++) {
        size_t i = (size_t)hash[id] & (ns - 1);
        while (slots[i] >= 0) i = (i + 1) & (ns - 1);
        slots[i] = id;
    }
    v->slots = slots;
    v->nslots = ns;
    return EMB_OK;
}

/* Merge sort of ids by descending count, stable, without global state (thread-safe). */
static void vocab_msort(int64_t *a, int64_t *tmp, int64_t n, const int64_t *cnt) {
    if (n < 2) return;
    int64_t h = n / 2;
    vocab_msort(a, tmp, h, cnt);
    vocab_msort(a + h, tmp, n - h, cnt);
    int64_t i = 0, j = h, k = 0;
    while (i < h && j < n) tmp[k++] = cnt[a[j]] > cnt[a[i]] ? a[j++] : a[i++];
    while (i < h) tmp[k++] = a[i++];
    while (j < n) tmp[k++] = a[j++];
    memcpy(a, tmp, (size_t)n * sizeof *a);
}

emb_status emb_vocab_sort_by_count(emb_vocab *v, int64_t keep_first, int64_t *perm) {
    if (!v) return emb__null("vocab");
    if (keep_first < 0)
        return emb__error(EMB_ERR_INVALID, "emb_vocab_sort_by_count: keep_first %lld is negative",
                          (long long)keep_first);
    int64_t n = v->size;
    int64_t *src = malloc((size_t)(n ? n : 1) * sizeof *src);
    int64_t *tmp = malloc((size_t)(n ? n : 1) * sizeof *tmp);
    if (!src || !tmp) {
        free(src), free(tmp);
        return emb__error(EMB_ERR_NOMEM, "vocabulary: out of memory sorting %lld words",
                          (long long)n);
    }
    for (int64_t i = 0; i < n; i++) src[i] = i;
    int64_t k = keep_first < n ? keep_first : n;
    vocab_msort(src + k, tmp, n - k, v->count);
    free(tmp);
    emb_status st = vocab_apply(v, src, n);
    if (!st && perm) memcpy(perm, src, (size_t)n * sizeof *perm);
    free(src);
    return st;
}

emb_status emb_vocab_prune(emb_vocab *v, int64_t keep_first, int64_t min_count, int64_t max_size) {
    if (!v) return emb__null("vocab");
    if (keep_first < 0 || min_count < 0 || max_size < 0)
        return emb__error(
            EMB_ERR_INVALID,
            "emb_vocab_prune: negative argument (keep_first %lld, min_count %lld, max_size %lld)",
            (long long)keep_first, (long long)min_count, (long long)max_size);
    int64_t n = v->size, m = 0;
    int64_t *src = malloc((size_t)(n ? n : 1) * sizeof *src);
    if (!src)
        return emb__error(EMB_ERR_NOMEM, "vocabulary: out of memory pruning %lld words",
                          (long long)n);
    for (int64_t i = 0; i < n; i++)
        if (i < keep_first || v->count[i] >= min_count) src[m++] = i;
    if (max_size > 0 && m > max_size) m = max_size;
    emb_status st = vocab_apply(v, src, m);
    free(src);
    return st;
}
