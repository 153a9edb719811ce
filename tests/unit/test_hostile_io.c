/* Hostile input to the readers and writers of files: empty and zero-width tables, sizes that
 * overflow, a file replaced between its header and its values, pipes and endless devices,
 * symbolic links and FIFOs as destinations, an .npy replaced with its words, temporary files
 * left by killed writers and removed on a signal. Run under AddressSanitizer and
 * UndefinedBehaviorSanitizer by `make test`. */
#include "emb_test.h"
#include "emb_test_files.h"

#include "io/io_internal.h"

#include <dirent.h>
#include <fcntl.h>
#include <pthread.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

/* A safetensors file: an 8-byte length, the JSON header padded to 8, the data. */
static void put_st(const char *path, const char *json, const void *data, size_t n) {
    size_t hl = strlen(json), padded = (hl + 7) / 8 * 8;
    unsigned char *b = calloc(1, 8 + padded + n + 1);
    for (int k = 0; k < 8; k++) b[k] = (unsigned char)((uint64_t)padded >> (8 * k));
    memcpy(b + 8, json, hl);
    memset(b + 8 + hl, ' ', padded - hl);
    if (n) memcpy(b + 8 + padded, data, n);
    put(path, b, 8 + padded + n);
    free(b);
}

/* An .npy v1.0 file with the given header dict. */
static void put_npy(const char *path, const char *dict, const void *data, size_t n) {
    char h[256];
    int hl = snprintf(h, sizeof h, "%s", dict);
    while ((10 + hl + 1) % 64) h[hl++] = ' ';
    h[hl++] = '\n';
    unsigned char *b = malloc(10 + (size_t)hl + n + 1);
    memcpy(b, "\x93NUMPY\x01\x00", 8);
    b[8] = (unsigned char)(hl & 0xff), b[9] = (unsigned char)(hl >> 8);
    memcpy(b + 10, h, (size_t)hl);
    if (n) memcpy(b + 10 + hl, data, n);
    put(path, b, 10 + (size_t)hl + n);
    free(b);
}

static size_t temporaries(void) {
    DIR *d = opendir(tmpdir);
    size_t n = 0;
    for (struct dirent *e; (e = readdir(d));) n += strstr(e->d_name, ".tmp.") != NULL;
    closedir(d);
    return n;
}

/* ---- empty and zero-width tables ---- */

/* Shapes with a zero read, written back and looked up: memcpy(NULL, p, 0) in the float32
 * conversion was undefined behaviour (the sanitizer build aborted). */
static void test_empty_tables(void **state) {
    (void)state;
    static const char *dtypes[] = {"F32", "F16", "BF16", "F64"};
    static const int64_t shapes[][2] = {{3, 0}, {0, 3}, {0, 0}};
    for (int d = 0; d < 4; d++)
        for (int s = 0; s < 3; s++) {
            char json[256];
            snprintf(json, sizeof json,
                     "{\"__metadata__\":{\"emb.vocab\":\"%s\"},\"weight\":{\"dtype\":\"%s\","
                     "\"shape\":[%lld,%lld],"
                     "\"data_offsets\":[0,0]}}",
                     shapes[s][0] ? "a\\nb\\nc" : "", dtypes[d], (long long)shapes[s][0],
                     (long long)shapes[s][1]);
            put_st(tmp("e.safetensors"), json, NULL, 0);
            emb_vectors v;
            EMB_OK_OR_FAIL(emb_vectors_read(tmp("e.safetensors"), NULL, &v));
            assert_int_equal(v.weight.shape[0], shapes[s][0]);
            assert_int_equal(v.weight.shape[1], shapes[s][1]);
            assert_int_equal(emb_vocab_num_words(v.vocab), shapes[s][0]);
            emb_vectors_write_options wo = emb_vectors_write_options_default();
            EMB_OK_OR_FAIL(emb_vectors_write(tmp("o.safetensors"), &v.weight, v.vocab, &wo));
            EMB_OK_OR_FAIL(emb_vectors_write(tmp("o.npy"), &v.weight, v.vocab, &wo));
            wo.dtype = EMB_FLOAT16;
            EMB_OK_OR_FAIL(emb_vectors_write(tmp("h.safetensors"), &v.weight, v.vocab, &wo));
            EMB_OK_OR_FAIL(emb_vectors_write(tmp("h.npy"), &v.weight, v.vocab, &wo));
            const char *back[] = {"o.safetensors", "o.npy", "h.safetensors", "h.npy"};
            for (int b = 0; b < 4; b++) {
                emb_vectors r;
                EMB_OK_OR_FAIL(emb_vectors_read(tmp(back[b]), NULL, &r));
                assert_int_equal(r.weight.shape[0], shapes[s][0]);
                assert_int_equal(r.weight.shape[1], shapes[s][1]);
                emb_vectors_release(&r);
            }
            /* word formats cannot hold a row without values */
            if (shapes[s][1] == 0)
                EMB_EXPECT_ERR(emb_vectors_write(tmp("o.vec"), &v.weight, v.vocab, NULL),
                               EMB_ERR_SHAPE, "dimension 0");
            if (shapes[s][0] > 0) {
                int64_t idx[2] = {2, 0}, n = 2, oshape[2] = {2, shapes[s][1]};
                emb_tensor ti, to;
                EMB_OK_OR_FAIL(emb_tensor_init(&ti, EMB_INT64, idx, 1, &n));
                EMB_OK_OR_FAIL(emb_tensor_alloc(&to, EMB_FLOAT32, 2, oshape));
                EMB_OK_OR_FAIL(emb_embedding_lookup(&v.weight, &ti, &to));
                emb_tensor_release(&to);
            }
            emb_vectors_release(&v);
        }
    /* the same shapes as .npy, through the low-level reader too */
    put_npy(tmp("z.npy"), "{'descr': '<f4', 'fortran_order': False, 'shape': (3, 0), }", NULL, 0);
    emb_tensor t;
    EMB_OK_OR_FAIL(emb_npy_read(tmp("z.npy"), &t));
    emb_tensor_release(&t);
    emb_vectors v;
    EMB_OK_OR_FAIL(emb_vectors_read(tmp("z.npy"), NULL, &v));
    emb_vectors_release(&v);
    put_npy(tmp("z.npy"), "{'descr': '<f2', 'fortran_order': True, 'shape': (0, 5), }", NULL, 0);
    EMB_OK_OR_FAIL(emb_vectors_read(tmp("z.npy"), NULL, &v));
    emb_vectors_release(&v);
}

/* 2^58 rows of dimension 0 in under 100 bytes: read, written in every storage type and read
 * back without any work per row (a [2^59, 0] F16 table used to be written, then refused:
 * its byte size was computed as if the zero came last). */
static void test_zero_width_tables(void **state) {
    (void)state;
    const int64_t huge = (int64_t)1 << 59;
    put_st(
        tmp("z.safetensors"),
        "{\"weight\":{\"dtype\":\"F16\",\"shape\":[576460752303423488,0],\"data_offsets\":[0,0]}}",
        NULL, 0);
    emb_vectors v;
    EMB_OK_OR_FAIL(emb_vectors_read(tmp("z.safetensors"), NULL, &v));
    assert_int_equal(v.weight.shape[0], huge);
    assert_int_equal(v.weight.shape[1], 0);
    emb_vectors_write_options wo = emb_vectors_write_options_default();
    const emb_dtype dts[] = {EMB_FLOAT32, EMB_FLOAT16, EMB_BFLOAT16, EMB_FLOAT64};
    for (int k = 0; k < 4; k++) {
        wo.dtype = dts[k];
        EMB_OK_OR_FAIL(emb_vectors_write(tmp("o.safetensors"), &v.weight, NULL, &wo));
        emb_vectors r;
        EMB_OK_OR_FAIL(emb_vectors_read(tmp("o.safetensors"), NULL, &r));
        assert_int_equal(r.weight.shape[0], huge);
        emb_vectors_release(&r);
    }
    const emb_qtype qts[] = {EMB_QTYPE_F32, EMB_QTYPE_F16, EMB_QTYPE_BF16};
    for (int k = 0; k < 3; k++) {
        emb_qtable_writer *w;
        EMB_OK_OR_FAIL(emb_qtable_writer_open(tmp("q.safetensors"), qts[k], huge, 0, NULL, &w));
        EMB_OK_OR_FAIL(emb_qtable_writer_append(w, v.weight.data, huge)); /* no work per row */
        EMB_OK_OR_FAIL(emb_qtable_writer_commit(w, NULL));
        emb_qtable_writer_free(w);
        emb_vectors r;
        EMB_OK_OR_FAIL(emb_vectors_read(tmp("q.safetensors"), NULL, &r));
        assert_int_equal(r.weight.shape[0], huge);
        emb_vectors_release(&r);
        emb_qtable *q;
        EMB_OK_OR_FAIL(emb_qtable_map(tmp("q.safetensors"), &q, NULL));
        assert_int_equal(emb_qtable_num_rows(q), huge);
        emb_qtable_free(q);
    }
    emb_vectors_release(&v);
    /* a shape whose entries overflow before a zero still holds nothing */
    put_st(tmp("z.safetensors"),
           "{\"weight\":{\"dtype\":\"F64\",\"shape\":[4611686018427387904,4611686018427387904,0],"
           "\"data_offsets\":[0,0]}}",
           NULL, 0);
    emb_safetensors *st;
    EMB_OK_OR_FAIL(emb_safetensors_open(tmp("z.safetensors"), &st));
    int nd = 0;
    const int64_t *shape = emb_safetensors_shape(st, 0, &nd);
    assert_int_equal(nd, 3);
    assert_int_equal(shape[1], (int64_t)1 << 62);
    assert_null(emb_safetensors_shape(st, 1, &nd));
    emb_safetensors_free(st);
}

/* 0 rows with a dimension of 2^40: the writer sized a batch buffer from the dimension (a
 * terabyte), though there is nothing to convert. */
static void test_quantized_writer_without_rows(void **state) {
    (void)state;
    const emb_qtype qts[] = {EMB_QTYPE_INT8, EMB_QTYPE_INT4, EMB_QTYPE_F16};
    for (int k = 0; k < 3; k++) {
        emb_qtable_writer *w;
        EMB_OK_OR_FAIL(
            emb_qtable_writer_open(tmp("q0.safetensors"), qts[k], 0, (int64_t)1 << 40, NULL, &w));
        EMB_OK_OR_FAIL(emb_qtable_writer_commit(w, NULL));
        emb_qtable_writer_free(w);
        emb_qtable *q;
        EMB_OK_OR_FAIL(emb_qtable_load(tmp("q0.safetensors"), &q, NULL));
        assert_int_equal(emb_qtable_num_rows(q), 0);
        assert_int_equal(emb_qtable_dim(q), (int64_t)1 << 40);
        emb_qtable_free(q);
    }
    /* emb.dim beyond int64 is not a dimension (it saturated to INT64_MAX) */
    put_st(tmp("qd.safetensors"),
           "{\"__metadata__\":{\"emb.qtype\":\"int8\",\"emb.dim\":\"99999999999999999999\"},"
           "\"weight\":{\"dtype\":\"U8\",\"shape\":[0,9],\"data_offsets\":[0,0]}}",
           NULL, 0);
    emb_qtable *q;
    EMB_EXPECT_ERR(emb_qtable_load(tmp("qd.safetensors"), &q, NULL), EMB_ERR_FORMAT,
                   "not a dimension");
}

/* ---- one open file ---- */

static const char *swap_with;

static void replace_file(const char *path) {
    if (swap_with) assert_int_equal(rename(swap_with, path), 0);
}

/* The file is replaced (rename) after its header and words were read: the values must come
 * from the same file (they were read by opening the path again). */
static void test_no_torn_reads(void **state) {
    (void)state;
    float a[8], b[8];
    for (int i = 0; i < 8; i++) a[i] = (float)i + 0.25f, b[i] = (float)i + 0.75f;
    const char *ja = "{\"__metadata__\":{\"emb.vocab\":\"a0\\na1\"},\"weight\":{\"dtype\":\"F32\","
                     "\"shape\":[2,4],"
                     "\"data_offsets\":[0,32]}}";
    const char *jb = "{\"__metadata__\":{\"emb.vocab\":\"b0\\nb1\"},\"weight\":{\"dtype\":\"F32\","
                     "\"shape\":[2,4],"
                     "\"data_offsets\":[0,32]}}";
    for (int fmt = 0; fmt < 2; fmt++) {
        const char *x = fmt ? tmp("x.npy") : tmp("x.safetensors");
        if (fmt) {
            put_npy(x, "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 4), }", a, 32);
            put_npy(tmp("y"), "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 4), }", b, 32);
        } else {
            put_st(x, ja, a, 32);
            put_st(tmp("y"), jb, b, 32);
        }
        swap_with = tmp("y");
        emb__io_test_hook = replace_file;
        emb_vectors v;
        emb_status st = emb_vectors_read(x, NULL, &v);
        emb__io_test_hook = NULL;
        EMB_OK_OR_FAIL(st);
        emb_assert_close_f32(v.weight.data, a, 8, 1, 0, 0,
                             fmt ? "npy values" : "safetensors values");
        if (!fmt) assert_string_equal(emb_vocab_word(v.vocab, 0, NULL), "a0");
        emb_vectors_release(&v);
        /* the path now holds B, whole */
        EMB_OK_OR_FAIL(emb_vectors_read(x, NULL, &v));
        emb_assert_close_f32(v.weight.data, b, 8, 1, 0, 0, "the replacement");
        emb_vectors_release(&v);
    }
}

typedef struct {
    int fd;
    const void *data;
    size_t n;
} feeder;

static void *feed(void *arg) {
    feeder *f = arg;
    const char *p = f->data;
    size_t done = 0;
    while (done < f->n) {
        ssize_t r = write(f->fd, p + done, f->n - done);
        if (r <= 0) break;
        done += (size_t)r;
    }
    close(f->fd);
    return NULL;
}

/* Reads `data` through a pipe, as `cat file | emb info /dev/stdin` does. */
static emb_status read_pipe(const void *data, size_t n, emb_vectors *v) {
    int p[2];
    assert_int_equal(pipe(p), 0);
    feeder f = {p[1], data, n};
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, feed, &f), 0);
    char path[64];
    snprintf(path, sizeof path, "/proc/self/fd/%d", p[0]);
    emb_status st = emb_vectors_read(path, NULL, v);
    char sink[4096];
    while (read(p[0], sink, sizeof sink) > 0) {
    }
    pthread_join(th, NULL);
    close(p[0]);
    return st;
}

/* Format detection read the pipe to its end and the reader then found it empty. */
static void test_pipes_and_devices(void **state) {
    (void)state;
    const char text[] = "2 3\nalpha 1 2 3\nbeta 4 5 6\n";
    emb_vectors v;
    EMB_OK_OR_FAIL(read_pipe(text, sizeof text - 1, &v));
    assert_int_equal(v.format, EMB_FORMAT_W2V_TEXT);
    assert_int_equal(v.weight.shape[0], 2);
    assert_string_equal(emb_vocab_word(v.vocab, 1, NULL), "beta");
    /* the same table as safetensors and .npy through a pipe */
    EMB_OK_OR_FAIL(emb_vectors_write(tmp("p.safetensors"), &v.weight, v.vocab, NULL));
    EMB_OK_OR_FAIL(emb_vectors_write(tmp("p.npy"), &v.weight, NULL, NULL));
    const char *names[] = {"p.safetensors", "p.npy"};
    for (int k = 0; k < 2; k++) {
        size_t n;
        char *d = slurp(tmp(names[k]), &n);
        emb_vectors r;
        EMB_OK_OR_FAIL(read_pipe(d, n, &r));
        emb_assert_close_f32(r.weight.data, v.weight.data, 6, 1, 0, 0, names[k]);
        emb_vectors_release(&r);
        free(d);
    }
    emb_vectors_release(&v);
    /* a pipe that brings more than the limit */
    emb__stream_limit = 16;
    EMB_EXPECT_ERR(read_pipe(text, sizeof text - 1, &v), EMB_ERR_IO,
                   "more than 16 bytes from a pipe");
    emb__stream_limit = 0;
    /* an endless device is refused at once */
    EMB_EXPECT_ERR(emb_vectors_read("/dev/zero", NULL, &v), EMB_ERR_IO, "character device");
    EMB_EXPECT_ERR(emb_format_sniff("/dev/urandom", &(emb_format){0}), EMB_ERR_IO,
                   "character device");
}

/* ---- destinations ---- */

static void test_symlinks_and_fifos(void **state) {
    (void)state;
    float vals[6] = {1, 2, 3, 4, 5, 6};
    emb_tensor w = emb_test_view(EMB_FLOAT32, vals, 2, SHP(2, 3));
    /* a link to a file: the file is replaced, the link stays */
    assert_int_equal(mkdir(tmp("d"), 0755), 0);
    put(tmp("d/t.npy"), "old", 3);
    assert_int_equal(symlink("d/t.npy", tmp("l.npy")), 0);
    EMB_OK_OR_FAIL(emb_npy_write(tmp("l.npy"), &w));
    struct stat sb;
    assert_int_equal(lstat(tmp("l.npy"), &sb), 0);
    assert_true(S_ISLNK(sb.st_mode));
    emb_tensor r;
    EMB_OK_OR_FAIL(emb_npy_read(tmp("d/t.npy"), &r));
    emb_assert_close_f32(r.data, vals, 6, 1, 0, 0, "through the link");
    emb_tensor_release(&r);
    /* a dangling link is not written through */
    assert_int_equal(symlink("nowhere/x.npy", tmp("dangling.npy")), 0);
    EMB_EXPECT_ERR(emb_npy_write(tmp("dangling.npy"), &w), EMB_ERR_IO,
                   "symbolic link to a file that does not exist");
    /* a folder is not replaced */
    EMB_EXPECT_ERR(emb_npy_write(tmp("d"), &w), EMB_ERR_IO, "is a directory");
    /* a FIFO is written through: a reader receives the bytes, the FIFO stays */
    assert_int_equal(mkfifo(tmp("f"), 0600), 0);
    int rd = open(tmp("f"), O_RDONLY | O_NONBLOCK);
    assert_true(rd >= 0);
    EMB_OK_OR_FAIL(emb_npy_write(tmp("f"), &w));
    unsigned char got[256];
    ssize_t n = read(rd, got, sizeof got);
    close(rd);
    size_t want_n;
    char *want = slurp(tmp("d/t.npy"), &want_n);
    assert_int_equal(n, (ssize_t)want_n);
    assert_memory_equal(got, want, want_n);
    free(want);
    assert_int_equal(lstat(tmp("f"), &sb), 0);
    assert_true(S_ISFIFO(sb.st_mode));
    assert_int_equal(temporaries(), 0);
}

/* The words of an .npy are replaced with it, or not at all: a failure writing the table
 * (a full disk) left the new words next to the old table. */
static void test_npy_and_words_together(void **state) {
    (void)state;
    const int64_t rows = 300, dim = 50;
    emb_tensor w;
    EMB_OK_OR_FAIL(emb_tensor_alloc(&w, EMB_FLOAT32, 2, SHP(rows, dim)));
    for (int64_t i = 0; i < rows * dim; i++) ((float *)w.data)[i] = (float)i;
    emb_vocab *v1, *v2;
    EMB_OK_OR_FAIL(emb_vocab_create(&v1));
    EMB_OK_OR_FAIL(emb_vocab_create(&v2));
    char word[32];
    for (int64_t i = 0; i < rows; i++) {
        snprintf(word, sizeof word, "old%lld", (long long)i);
        EMB_OK_OR_FAIL(emb_vocab_add(v1, word, strlen(word), i + 1, NULL, NULL));
        snprintf(word, sizeof word, "new%lld", (long long)i);
        EMB_OK_OR_FAIL(emb_vocab_add(v2, word, strlen(word), i + 1, NULL, NULL));
    }
    EMB_OK_OR_FAIL(emb_vectors_write(tmp("t.npy"), &w, v1, NULL));
    size_t n0, n1, m0, m1;
    char *table0 = slurp(tmp("t.npy"), &n0), *words0 = slurp(tmp("t.vocab"), &m0);
    emb__io_fail_after = 1000; /* the table (60 KB) fails; its words (3 KB) would not */
    ((float *)w.data)[0] = -1;
    EMB_EXPECT_ERR(emb_vectors_write(tmp("t.npy"), &w, v2, NULL), EMB_ERR_IO, "injected failure");
    emb__io_fail_after = UINT64_MAX;
    char *table1 = slurp(tmp("t.npy"), &n1), *words1 = slurp(tmp("t.vocab"), &m1);
    assert_int_equal(n0, n1);
    assert_memory_equal(table0, table1, n0);
    assert_int_equal(m0, m1);
    assert_memory_equal(words0, words1, m0);
    assert_int_equal(temporaries(), 0);
    /* both replaced */
    EMB_OK_OR_FAIL(emb_vectors_write(tmp("t.npy"), &w, v2, NULL));
    emb_vectors r;
    EMB_OK_OR_FAIL(emb_vectors_read(tmp("t.npy"), NULL, &r));
    assert_string_equal(emb_vocab_word(r.vocab, 7, NULL), "new7");
    assert_true(((float *)r.weight.data)[0] == -1);
    emb_vectors_release(&r);
    /* a table without words takes the place of one with words: the words go */
    EMB_OK_OR_FAIL(emb_vectors_write(tmp("t.npy"), &w, NULL, NULL));
    assert_int_equal(access(tmp("t.vocab"), F_OK), -1);
    free(table0), free(table1), free(words0), free(words1);
    emb_vocab_free(v1);
    emb_vocab_free(v2);
    emb_tensor_release(&w);
}

/* ---- temporary files ---- */

static void test_temporaries(void **state) {
    (void)state;
    float vals[2] = {1, 2};
    emb_tensor w = emb_test_view(EMB_FLOAT32, vals, 2, SHP(1, 2));
    /* left by a killed writer (nobody holds its lock): removed by the next write */
    put(tmp(".k.npy.tmp.Ab12Cd"), "stale", 5);
    put(tmp(".k.npy.tmp.Zz99Yy"), "alive", 5);
    put(tmp(".k.npy.tmp.short"), "not the scheme", 14);
    put(tmp(".other.npy.tmp.Ab12Cd"), "another file's", 14);
    int held = open(tmp(".k.npy.tmp.Zz99Yy"), O_RDONLY);
    assert_int_equal(flock(held, LOCK_EX), 0); /* a live writer */
    EMB_OK_OR_FAIL(emb_npy_write(tmp("k.npy"), &w));
    assert_int_equal(access(tmp(".k.npy.tmp.Ab12Cd"), F_OK), -1);
    assert_int_equal(access(tmp(".k.npy.tmp.Zz99Yy"), F_OK), 0);
    assert_int_equal(access(tmp(".k.npy.tmp.short"), F_OK), 0);
    assert_int_equal(access(tmp(".other.npy.tmp.Ab12Cd"), F_OK), 0);
    close(held);
    EMB_OK_OR_FAIL(emb_npy_write(tmp("k.npy"), &w));
    assert_int_equal(access(tmp(".k.npy.tmp.Zz99Yy"), F_OK), -1);
    unlink(tmp(".k.npy.tmp.short"));
    unlink(tmp(".other.npy.tmp.Ab12Cd"));
    /* a write in progress: its temporary follows the scheme; emb_remove_temp_files (what a
     * signal handler calls) removes it, and the write then fails */
    emb__writer wr;
    EMB_OK_OR_FAIL(emb__writer_open(&wr, tmp("s.npy")));
    assert_int_equal(temporaries(), 1);
    assert_non_null(strstr(wr.tmp, "/.s.npy.tmp."));
    emb_remove_temp_files();
    assert_int_equal(temporaries(), 0);
    emb__writer_put(&wr, "x", 1);
    EMB_EXPECT_ERR(emb__writer_commit(&wr), EMB_ERR_IO, "cannot rename");
    assert_int_equal(access(tmp("s.npy"), F_OK), -1);
    assert_int_equal(temporaries(), 0);
}

/* The hostile edge cases of tests/data/bad (also fuzz seeds): each is read as expected. */
static void test_hostile_files(void **state) {
    (void)state;
    static const struct {
        const char *file;
        emb_status st;
        int64_t rows, dim;  /* when read */
        const char *needle; /* when refused */
    } cases[] = {
        {"st_zero_width_huge.safetensors", EMB_OK, (int64_t)1 << 58, 0, NULL},
        {"st_zero_width_f16.safetensors", EMB_OK, (int64_t)1 << 59, 0, NULL},
        {"st_zero_dim.safetensors", EMB_OK, 3, 0, NULL},
        {"st_zero_rows.safetensors", EMB_OK, 0, 3, NULL},
        {"st_unaligned.safetensors", EMB_OK, 2, 3, NULL},
        {"npy_zero_width_huge.npy", EMB_OK, (int64_t)1 << 58, 0, NULL},
        {"npy_zero_dim.npy", EMB_OK, 3, 0, NULL},
        {"npy_repeated_key.npy", EMB_OK, 2, 3, NULL}, /* numpy keeps the last */
        {"q_no_rows_huge_dim.safetensors", EMB_OK, 0, (int64_t)1 << 40, NULL},
        {"st_overflow_then_zero.safetensors", EMB_ERR_SHAPE, 0, 0,
         "has 3 dimensions; a table has 2"},
        {"st_lying_offsets.safetensors", EMB_ERR_FORMAT, 0, 0,
         "tensor data extends to byte 1099511627784"},
        {"st_huge_count.safetensors", EMB_ERR_FORMAT, 0, 0,
         "\"emb.counts\": entry 1 is not a count"},
        {"st_truncated_named.bin", EMB_ERR_FORMAT, 0, 0,
         "invalid safetensors file: the header length"},
        {"q_dim_beyond_int64.safetensors", EMB_ERR_FORMAT, 0, 0, "not a dimension"},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        char path[1024];
        const char *d = getenv("EMB_TEST_DATA");
        snprintf(path, sizeof path, "%s/bad/%s", d ? d : "tests/data", cases[k].file);
        emb_vectors v;
        emb_clear_error();
        emb_status st = emb_vectors_read(path, NULL, &v);
        if (st != cases[k].st)
            fail_msg("%s: status %d, expected %d: %s", cases[k].file, st, cases[k].st,
                     emb_errmsg());
        if (st) {
            if (!strstr(emb_errmsg(), cases[k].needle))
                fail_msg("%s: message \"%s\" lacks \"%s\"", cases[k].file, emb_errmsg(),
                         cases[k].needle);
            continue;
        }
        assert_int_equal(v.weight.shape[0], cases[k].rows);
        assert_int_equal(v.weight.shape[1], cases[k].dim);
        if (!strcmp(cases[k].file, "npy_repeated_key.npy") ||
            !strcmp(cases[k].file, "st_unaligned.safetensors"))
            for (int i = 0; i < 6; i++) assert_true(((float *)v.weight.data)[i] == (float)i);
        emb_vectors_release(&v);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_empty_tables),
        cmocka_unit_test(test_zero_width_tables),
        cmocka_unit_test(test_quantized_writer_without_rows),
        cmocka_unit_test(test_no_torn_reads),
        cmocka_unit_test(test_pipes_and_devices),
        cmocka_unit_test(test_symlinks_and_fifos),
        cmocka_unit_test(test_npy_and_words_together),
        cmocka_unit_test(test_temporaries),
        cmocka_unit_test(test_hostile_files),
    };
    return cmocka_run_group_tests(tests, tmp_setup, tmp_teardown);
}
