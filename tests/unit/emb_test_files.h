/* tests/unit/emb_test_files.h: a private scratch folder per test program and small file
 * helpers, for the tests that read and write files (include after emb_test.h). The helpers
 * are static inline: a test program that does not call one of them is not warned about it. */
#ifndef EMB_TEST_FILES_H
#define EMB_TEST_FILES_H

#include "emb_test.h"

static char tmpdir[256];

/* cmocka group setup and teardown: create and remove the folder. */
static inline int tmp_setup(void **state) {
    (void)state;
    snprintf(tmpdir, sizeof tmpdir, "/tmp/emb_test.XXXXXX");
    return mkdtemp(tmpdir) ? 0 : -1;
}

static inline int tmp_teardown(void **state) {
    (void)state;
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    return system(cmd) == 0 ? 0 : -1;
}

/* A path in the folder (four rotating buffers). */
static inline const char *tmp(const char *name) {
    static char buf[4][512];
    static int k;
    k = (k + 1) % 4;
    snprintf(buf[k], sizeof buf[k], "%s/%s", tmpdir, name);
    return buf[k];
}

static inline void put(const char *path, const void *d, size_t n) {
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    if (n) assert_int_equal(fwrite(d, 1, n, f), n);
    fclose(f);
}

/* The whole file, NUL-terminated (free it), or NULL (and *n = 0) when it cannot be opened. */
static inline char *slurp(const char *path, size_t *n) {
    *n = 0;
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long sz = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *b = malloc((size_t)sz + 1);
    assert_int_equal(fread(b, 1, (size_t)sz, f), (size_t)sz);
    b[sz] = 0;
    fclose(f);
    *n = (size_t)sz;
    return b;
}

#endif /* EMB_TEST_FILES_H */
