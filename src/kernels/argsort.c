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
 * Every swap is one libstdc++ makes (the partition finds them a block at a time, and the final
 * pass and the ranges between cuts may run separately: see the comments there), so equal keys
 * end up in the same places. O(n log n) worst case; no allocation (the pairs live in `scratch`).
 *
 * The pairs are stored interleaved in scratch: scratch[2*i] is a key, scratch[2*i+1] its
 * original position. */
#include "argsort.h"
#include "parallel.h"

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
static inline int less_at(const int64_t *s, int64_t i, int64_t j) {
    return s[2 * i] < s[2 * j];
}

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

/* std::__unguarded_partition(first, last, pivot), classic form: the sentinels guaranteed by
 * the median choice keep both scans inside [first-1, last). */
static int64_t unguarded_partition_scalar(int64_t *s, int64_t first, int64_t last, int64_t pivot) {
    for (;;) {
        while (less_at(s, first, pivot)) first++;
        last--;
        while (less_at(s, pivot, last)) last--;
        if (!(first < last)) return first;
        swap_pairs(s, first, last);
        first++;
    }
}

/* The same partition, same swaps, found a block at a time without data-dependent branches.
 *
 * Why the swaps are the same: a position is written only when it is swapped, and the left scan
 * never revisits a position, nor does the right one; so as long as every left stop found lies
 * below every right stop found, the k-th left stop (a position whose key is not below the
 * pivot, in ascending order) is swapped with the k-th right stop (a key not above the pivot,
 * in descending order), exactly as the classic loop pairs them, and those swaps touch disjoint
 * positions, so their order does not matter. Blocks are scanned only while the unscanned range
 * holds two whole blocks, which keeps every left block below every right block. The classic
 * loop then resumes from the state it would have after the last pair swapped here (first just
 * past that pair's left position, last at its right position), rescanning at most the two
 * partly consumed blocks, and decides the cut exactly as before. */
#define EMB__BLOCK 64

static int64_t unguarded_partition(int64_t *s, int64_t first, int64_t last, int64_t pivot) {
    const int64_t pk = s[2 * pivot];
    unsigned char offl[EMB__BLOCK], offr[EMB__BLOCK];
    int nl = 0, nr = 0, il = 0, ir = 0; /* offsets found; offsets consumed */
    int64_t lb = first, rb = last;      /* left block start; right block end (exclusive) */
    int64_t f = first, l = last;        /* unscanned range [f, l) */
    int64_t resume_first = first, resume_last = last;
    while (l - f >= 2 * EMB__BLOCK) {
        if (il == nl) {
            lb = f;
            nl = il = 0;
            for (int i = 0; i < EMB__BLOCK; i++) {
                offl[nl] = (unsigned char)i;
                nl += !(s[2 * (f + i)] < pk);
            }
            f += EMB__BLOCK;
        }
        if (ir == nr) {
            rb = l;
            nr = ir = 0;
            for (int i = 0; i < EMB__BLOCK; i++) {
                offr[nr] = (unsigned char)i;
                nr += !(pk < s[2 * (l - 1 - i)]);
            }
            l -= EMB__BLOCK;
        }
        int m = nl - il < nr - ir ? nl - il : nr - ir;
        for (int k = 0; k < m; k++) {
            int64_t a = lb + offl[il + k], b = rb - 1 - offr[ir + k];
            swap_pairs(s, a, b);
        }
        if (m > 0) {
            resume_first = lb + offl[il + m - 1] + 1;
            resume_last = rb - 1 - offr[ir + m - 1];
        }
        il += m;
        ir += m;
    }
    return unguarded_partition_scalar(s, resume_first, resume_last, pivot);
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

/* The final pass of std::sort, restricted to [first, last).
 *
 * libstdc++ ends with one insertion sort over the whole array (guarded over its first 16
 * elements, unguarded after). Insertion sort is stable, so that pass leaves the stable sort of
 * what the introsort loop left behind. Every cut the loop made has no key on its left greater
 * than a key on its right, so no element crosses a cut, and the same result comes from
 * insertion-sorting the ranges between cuts separately, in any order: the range at position 0
 * as libstdc++ starts (guarded), any other range unguarded (the element before it is a
 * sentinel no greater than its keys). */
static void final_insertion(int64_t *s, int64_t first, int64_t last) {
    if (first == 0) {
        int64_t g = last < EMB__THRESHOLD ? last : EMB__THRESHOLD;
        insertion_sort(s, 0, g);
        first = g;
    }
    for (int64_t i = first; i < last; i++) linear_insert(s, i);
}

/* Ranges at least this long are handed to another thread as a task (emb__spawn). */
#define EMB__TASK_MIN ((int64_t)1 << 15)

static void sort_task(const emb__task_arg *a);

/* std::__introsort_loop over [first, last) followed by the final pass over the same range;
 * the range must be bounded by cuts (or the array's ends). The right part of each cut is
 * sorted the same way (recursion depth is bounded by the depth limit, < 128), as a task when
 * `tasks` is set and it holds at least EMB__TASK_MIN elements. Ranges are disjoint, so the
 * result does not depend on which thread sorts which. */
static void sort_range(int64_t *s, int64_t first, int64_t last, int64_t depth, int tasks) {
    while (last - first > EMB__THRESHOLD) {
        if (depth == 0) {
            heap_sort(s, first, last);
            break;
        }
        depth--;
        int64_t mid = first + (last - first) / 2;
        median_to_first(s, first, first + 1, mid, last - 1);
        int64_t cut = unguarded_partition(s, first + 1, last, first);
        if (tasks && last - cut >= EMB__TASK_MIN) {
            const emb__task_arg a = {s, {cut, last, depth, tasks}};
            emb__spawn(sort_task, &a);
        } else {
            sort_range(s, cut, last, depth, tasks);
        }
        last = cut;
    }
    final_insertion(s, first, last);
}

/* a: the pairs, then first, last, depth and the tasks flag of sort_range */
static void sort_task(const emb__task_arg *a) {
    sort_range(a->p, a->v[0], a->v[1], a->v[2], (int)a->v[3]);
}

static int64_t floor_log2(int64_t n) {
    return 63 - __builtin_clzll((unsigned long long)n);
}

typedef struct fill_ctx {
    const int64_t *keys;
    int64_t *s;
} fill_ctx;

/* The pairs (keys[i], i) for i in [lo, hi). */
static void fill_pairs(void *p, int64_t lo, int64_t hi, int ith) {
    (void)ith;
    const fill_ctx *f = p;
    for (int64_t i = lo; i < hi; i++) {
        f->s[2 * i] = f->keys[i];
        f->s[2 * i + 1] = i;
    }
}

void emb__argsort_pairs_i64_mt(const int64_t *keys, int64_t n, int64_t *pairs, int threads) {
    if (n <= 0) return;
    if (threads < 1 || n < 2 * EMB__TASK_MIN) threads = 1;
    fill_ctx f = {keys, pairs};
    emb__parallel_for(threads, n, fill_pairs, &f);
    const emb__task_arg root = {pairs, {0, n, 2 * floor_log2(n), threads > 1}};
    emb__tasks(threads, sort_task, &root);
}

void emb__argsort_unstable_i64_mt(const int64_t *keys, int64_t n, int64_t *perm, int64_t *scratch,
                                  int threads) {
    if (n <= 0) return;
    emb__argsort_pairs_i64_mt(keys, n, scratch, threads);
    for (int64_t i = 0; i < n; i++) perm[i] = scratch[2 * i + 1];
}

void emb__argsort_unstable_i64(const int64_t *keys, int64_t n, int64_t *perm, int64_t *scratch) {
    emb__argsort_unstable_i64_mt(keys, n, perm, scratch, 1);
}
