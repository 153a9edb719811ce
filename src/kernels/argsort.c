/* src/kernels/argsort.c: the permutation of torch.sort(stable=False) on CPU.
 *
 * PyTorch 1.13 sorts (key, original position) pairs with libstdc++'s std::sort, comparing
 * keys only, so the order of equal keys is whatever that introsort leaves behind. This file
 * replays the same algorithm step by step (docs/semantics.md §6.5):
 *   - introsort loop while a range has more than 16 elements, depth limit 2*floor(log2 n);
 *   - pivot: median of (first+1, mid, last-1) swapped into `first`;
 *   - unguarded Hoare partition of [first+1, last) around *first;
 *   - heapsort (make_heap + sort_heap with libstdc++'s hole-moving adjust_heap) when the depth
 *     limit is exhausted;
 *   - a final insertion sort: guarded over the first 16 elements, unguarded for the rest.
 * Every comparison and every move is the one libstdc++ makes, so equal keys end up in the
 * same places. O(n log n) worst case; no allocation (the pairs live in `scratch`).
 *
 * The pairs are stored interleaved in scratch: scratch[2*i] is a key, scratch[2*i+1] its
 * original position. */
#include "argsort.h"

#include <string.h>

#define EMB__THRESHOLD 16

typedef struct {
    int64_t key, pos;
} pair_val;

static inline pair_val get(const int64_t *s, int64_t i) {
    pair_val v = {s[2 * i], s[2 * i + 1]};
    return v;
}

static inline void put(int64_t *s, int64_t i, pair_val v) {
    s[2 * i] = v.key;
    s[2 * i + 1] = v.pos;
}

/* *i = *j (a move of one pair) */
static inline void move_to(int64_t *s, int64_t i, int64_t j) {
    s[2 * i] = s[2 * j];
    s[2 * i + 1] = s[2 * j + 1];
}

static inline void swap_pairs(int64_t *s, int64_t i, int64_t j) {
    pair_val a = get(s, i);
    move_to(s, i, j);
    put(s, j, a);
}

/* comp(i, j): key at i < key at j */
static inline int less_at(const int64_t *s, int64_t i, int64_t j) { return s[2 * i] < s[2 * j]; }

/* std::__move_median_to_first(result, a, b, c) */
static void median_to_first(int64_t *s, int64_t result, int64_t a, int64_t b, int64_t c) {
    if (less_at(s, a, b)) {
        if (less_at(s, b, c))
            swap_pairs(s, result, b);
        else if (less_at(s, a, c))
            swap_pairs(s, result, c);
        else
            swap_pairs(s, result, a);
    } else if (less_at(s, a, c)) {
        swap_pairs(s, result, a);
    } else if (less_at(s, b, c)) {
        swap_pairs(s, result, c);
    } else {
        swap_pairs(s, result, b);
    }
}

/* std::__unguarded_partition(first, last, pivot): the sentinels guaranteed by the median
 * choice keep both scans inside [first-1, last). */
static int64_t unguarded_partition(int64_t *s, int64_t first, int64_t last, int64_t pivot) {
    for (;;) {
        while (less_at(s, first, pivot)) first++;
        last--;
        while (less_at(s, pivot, last)) last--;
        if (!(first < last)) return first;
        swap_pairs(s, first, last);
        first++;
    }
}

/* std::__adjust_heap on the heap starting at `base`, followed by std::__push_heap. */
static void adjust_heap(int64_t *s, int64_t base, int64_t hole, int64_t len, pair_val value) {
    const int64_t top = hole;
    int64_t child = hole;
    while (child < (len - 1) / 2) {
        child = 2 * (child + 1);
        if (less_at(s, base + child, base + child - 1)) child--;
        move_to(s, base + hole, base + child);
        hole = child;
    }
    if ((len & 1) == 0 && child == (len - 2) / 2) {
        child = 2 * (child + 1);
        move_to(s, base + hole, base + child - 1);
        hole = child - 1;
    }
    int64_t parent = (hole - 1) / 2;
    while (hole > top && s[2 * (base + parent)] < value.key) {
        move_to(s, base + hole, base + parent);
        hole = parent;
        parent = (hole - 1) / 2;
    }
    put(s, base + hole, value);
}

/* std::__partial_sort(first, last, last): make_heap, then sort_heap. */
static void heap_sort(int64_t *s, int64_t first, int64_t last) {
    int64_t len = last - first;
    if (len >= 2) {
        for (int64_t parent = (len - 2) / 2;; parent--) {
            adjust_heap(s, first, parent, len, get(s, first + parent));
            if (parent == 0) break;
        }
    }
    while (last - first > 1) {
        last--;
        pair_val v = get(s, last);
        move_to(s, last, first);
        adjust_heap(s, first, 0, last - first, v);
    }
}

/* std::__introsort_loop. Recursion depth is bounded by the depth limit (< 128). */
static void introsort_loop(int64_t *s, int64_t first, int64_t last, int64_t depth) {
    while (last - first > EMB__THRESHOLD) {
        if (depth == 0) {
            heap_sort(s, first, last);
            return;
        }
        depth--;
        int64_t mid = first + (last - first) / 2;
        median_to_first(s, first, first + 1, mid, last - 1);
        int64_t cut = unguarded_partition(s, first + 1, last, first);
        introsort_loop(s, cut, last, depth);
        last = cut;
    }
}

/* std::__unguarded_linear_insert(pos) */
static void linear_insert(int64_t *s, int64_t pos) {
    pair_val v = get(s, pos);
    int64_t next = pos - 1;
    while (v.key < s[2 * next]) {
        move_to(s, pos, next);
        pos = next;
        next--;
    }
    put(s, pos, v);
}

/* std::__insertion_sort(first, last) */
static void insertion_sort(int64_t *s, int64_t first, int64_t last) {
    for (int64_t i = first + 1; i < last; i++) {
        if (less_at(s, i, first)) {
            pair_val v = get(s, i);
            memmove(s + 2 * (first + 1), s + 2 * first, (size_t)(i - first) * 2 * sizeof *s);
            put(s, first, v);
        } else {
            linear_insert(s, i);
        }
    }
}

static int64_t floor_log2(int64_t n) { return 63 - __builtin_clzll((unsigned long long)n); }

void emb__argsort_unstable_i64(const int64_t *keys, int64_t n, int64_t *perm, int64_t *scratch) {
    if (n <= 0) return;
    int64_t *s = scratch;
    for (int64_t i = 0; i < n; i++) {
        s[2 * i] = keys[i];
        s[2 * i + 1] = i;
    }
    introsort_loop(s, 0, n, 2 * floor_log2(n));
    if (n > EMB__THRESHOLD) {
        insertion_sort(s, 0, EMB__THRESHOLD);
        for (int64_t i = EMB__THRESHOLD; i < n; i++) linear_insert(s, i);
    } else {
        insertion_sort(s, 0, n);
    }
    for (int64_t i = 0; i < n; i++) perm[i] = s[2 * i + 1];
}
