/* argsort_driver.c: the private unstable argsort of src/kernels/argsort.c as a filter, for
 * tests/parity/test_backward.py (which compiles it with argsort.c and parallel.c and
 * compares its permutations with torch.sort). Requests on stdin, one after the other:
 * int64 n, int64 threads (0: the single-threaded entry point), n int64 keys. Answer on
 * stdout: n int64 positions, then int64 1 if the keys were left unchanged, else 0. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "argsort.h"

int main(void) {
    int64_t head[2];
    while (fread(head, sizeof head, 1, stdin) == 1) {
        int64_t n = head[0];
        size_t bytes = (size_t)(n > 0 ? n : 1) * sizeof(int64_t);
        int64_t *keys = malloc(bytes), *copy = malloc(bytes), *perm = malloc(bytes);
        int64_t *scratch = malloc(2 * bytes + sizeof(int64_t));
        if (!keys || !copy || !perm || !scratch) return 2;
        if (n > 0 && fread(keys, sizeof(int64_t), (size_t)n, stdin) != (size_t)n) return 3;
        memcpy(copy, keys, bytes);
        for (int64_t i = 0; i < n; i++) perm[i] = -1;
        if (head[1])
            emb__argsort_unstable_i64_mt(keys, n, perm, scratch, (int)head[1]);
        else
            emb__argsort_unstable_i64(keys, n, perm, scratch);
        int64_t same = n <= 0 || memcmp(keys, copy, bytes) == 0;
        if (n > 0) fwrite(perm, sizeof(int64_t), (size_t)n, stdout);
        fwrite(&same, sizeof same, 1, stdout);
        fflush(stdout);
        free(keys);
        free(copy);
        free(perm);
        free(scratch);
    }
    return 0;
}
