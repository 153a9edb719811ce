/* File formats: round trips, variants of each format, the float parser, half/bfloat16,
 * atomic writes, and every known-bad file in tests/data/bad with its error. */
#include "emb_test.h"
#include "emb_test_files.h"

#include "io/io_internal.h"

#include <dirent.h>
#include <errno.h>
#include <sys/stat.h>
#include <unistd.h>

static const char *data(const char *name) {
    static char buf[1024];
    const char *d = getenv("EMB_TEST_DATA");
    snprintf(buf, sizeof buf, "%s/%s", d ? d : "tests/data", name);
    return buf;
}

static const char *bad_path(const char *name) {
    static char buf[600];
    snprintf(buf, sizeof buf, "bad/%s", name);
    return data(buf);
}

/* A small table with words, deterministic values incl. awkward floats. */
static void make_table(emb_tensor *w, emb_vocab **v, int64_t rows, int64_t dim) {
    int64_t shape[2] = {rows, dim};
    EMB_OK_OR_FAIL(emb_tensor_alloc(w, EMB_FLOAT32, 2, shape));
    float *d = w->data;
    uint32_t s = 12345;
    for (int64_t i = 0; i < rows * dim; i++) {
        s = s * 1664525u + 1013904223u;
        d[i] = ((float)(s >> 8) / 16777216.0f - 0.5f) * 3.0f;
    }
    if (rows * dim > 3) d[0] = 1e-30f, d[1] = -0.0f, d[2] = 3.4e38f, d[3] = 1.0000001f;
    EMB_OK_OR_FAIL(emb_vocab_create(v));
    const char *ws[] = {"</s>", "the", "кот", "naïve", "a.b", "x"};
    char buf[32];
    for (int64_t i = 0; i < rows; i++) {
        const char *word = i < 6 ? ws[i] : (snprintf(buf, sizeof buf, "w%lld", (long long)i), buf);
        EMB_OK_OR_FAIL(emb_vocab_add(*v, word, strlen(word), 1000 - i, NULL, NULL));
    }
}

static void expect_same(const emb_vectors *got, const emb_tensor *w, const emb_vocab *v) {
    assert_int_equal(got->weight.ndim, 2);
    assert_int_equal(got->weight.shape[0], w->shape[0]);
    assert_int_equal(got->weight.shape[1], w->shape[1]);
    emb_assert_close_f32(got->weight.data, w->data, emb_tensor_numel(w), 1, 0, 0, "values");
    if (v) {
        assert_non_null(got->vocab);
        assert_int_equal(emb_vocab_num_words(got->vocab), emb_vocab_num_words(v));
        for (int64_t i = 0; i < emb_vocab_num_words(v); i++)
            assert_string_equal(emb_vocab_word(got->vocab, i, NULL), emb_vocab_word(v, i, NULL));
    }
}

static void test_roundtrip_all_formats(void **state) {
    (void)state;
    emb_tensor w;
    emb_vocab *v;
    make_table(&w, &v, 40, 7);
    const char *names[] = {"t.safetensors", "t.npy", "t.bin", "t.vec", "t.txt", "t.glove"};
    emb_format fmts[] = {EMB_FORMAT_SAFETENSORS, EMB_FORMAT_NPY,      EMB_FORMAT_W2V_BINARY,
                         EMB_FORMAT_W2V_TEXT,    EMB_FORMAT_W2V_TEXT, EMB_FORMAT_GLOVE};
    for (int k = 0; k < 6; k++) {
        emb_vectors_write_options wo = emb_vectors_write_options_default();
        if (k == 5) wo.format = EMB_FORMAT_GLOVE;
        if (k == 4) wo.trailing_space = true;
        EMB_OK_OR_FAIL(emb_vectors_write(tmp(names[k]), &w, v, &wo));
        emb_format sniffed;
        EMB_OK_OR_FAIL(emb_format_sniff(tmp(names[k]), &sniffed));
        assert_int_equal(sniffed, fmts[k]);
        emb_vectors got;
        EMB_OK_OR_FAIL(emb_vectors_read(tmp(names[k]), NULL, &got));
        assert_int_equal(got.format, fmts[k]);
        expect_same(&got, &w, v);
        if (k == 0) assert_int_equal(emb_vocab_count(got.vocab, 3), 997); /* counts kept */
        emb_vectors_release(&got);
        /* limit */
        emb_vectors_read_options ro = emb_vectors_read_options_default();
        ro.limit = 5;
        EMB_OK_OR_FAIL(emb_vectors_read(tmp(names[k]), &ro, &got));
        assert_int_equal(got.weight.shape[0], 5);
        assert_int_equal(emb_vocab_num_words(got.vocab), 5);
        emb_assert_close_f32(got.weight.data, w.data, 5 * 7, 1, 0, 0, "limited");
        emb_vectors_release(&got);
    }
    emb_tensor_release(&w);
    emb_vocab_free(v);
}

static void test_dtypes(void **state) {
    (void)state;
    emb_tensor w;
    emb_vocab *v;
    make_table(&w, &v, 8, 5);
    float *d = w.data;
    d[2] = 1.5f; /* keep in half range */
    emb_dtype dts[] = {EMB_FLOAT16, EMB_BFLOAT16, EMB_FLOAT64};
    for (int k = 0; k < 3; k++) {
        emb_vectors_write_options wo = emb_vectors_write_options_default();
        wo.dtype = dts[k];
        EMB_OK_OR_FAIL(emb_vectors_write(tmp("d.safetensors"), &w, NULL, &wo));
        emb_vectors got;
        EMB_OK_OR_FAIL(emb_vectors_read(tmp("d.safetensors"), NULL, &got));
        assert_int_equal(got.file_dtype, dts[k]);
        assert_null(got.vocab);
        const float *g = got.weight.data;
        for (int i = 0; i < 40; i++) {
            float want = dts[k] == EMB_FLOAT16    ? emb_f16_to_f32(emb_f32_to_f16(d[i]))
                         : dts[k] == EMB_BFLOAT16 ? emb_bf16_to_f32(emb_f32_to_bf16(d[i]))
                                                  : d[i];
            assert_memory_equal(&g[i], &want, 4);
        }
        emb_vectors_release(&got);
    }
    emb_vectors_write_options wo = emb_vectors_write_options_default();
    wo.dtype = EMB_BFLOAT16;
    EMB_EXPECT_ERR(emb_vectors_write(tmp("d.npy"), &w, NULL, &wo), EMB_ERR_INVALID,
                   "float32, float16 or float64");
    EMB_EXPECT_ERR(emb_vectors_write(tmp("d.vec"), &w, v, &wo), EMB_ERR_INVALID, "stores float32");
    wo.dtype = EMB_FLOAT16;
    EMB_OK_OR_FAIL(emb_vectors_write(tmp("d.npy"), &w, NULL, &wo));
    emb_tensor t;
    EMB_OK_OR_FAIL(emb_npy_read(tmp("d.npy"), &t));
    assert_int_equal(t.dtype, EMB_FLOAT16);
    emb_tensor_release(&t);
    emb_tensor_release(&w);
    emb_vocab_free(v);
}

static void test_safetensors_known_answer(void **state) {
    (void)state;
    /* The reference test vector (file-formats.md 1.1.4), but with our "format":"pt"
     * metadata absent: write through the low-level call with explicit metadata instead. */
    float vals[6] = {0, 1, 2, 3, 4, 5};
    emb_tensor t;
    EMB_OK_OR_FAIL(emb_tensor_init(&t, EMB_FLOAT32, vals, 3, (int64_t[]){1, 2, 3}));
    const char *name = "attn.0";
    EMB_OK_OR_FAIL(emb_safetensors_write(tmp("ka.safetensors"), 1, &name, &t, 0, NULL, NULL));
    size_t n;
    char *b = slurp(tmp("ka.safetensors"), &n);
    const char *hdr =
        "{\"__metadata__\":{\"format\":\"pt\"},\"attn.0\":{\"dtype\":\"F32\",\"shape\":[1,2,3],"
        "\"data_offsets\":[0,24]}}";
    size_t hl = strlen(hdr), padded = (hl + 7) / 8 * 8;
    assert_int_equal(n, 8 + padded + 24);
    assert_int_equal((unsigned char)b[0], padded);
    assert_memory_equal(b + 8, hdr, hl);
    for (size_t k = hl; k < padded; k++) assert_int_equal(b[8 + k], ' ');
    assert_memory_equal(b + 8 + padded, vals, 24);
    free(b);
    /* several tensors: int64 first (alignment order), names sorted, all views aligned */
    int64_t idx[3] = {7, 8, 9};
    int32_t i32[2] = {1, 2};
    emb_tensor ts[3];
    EMB_OK_OR_FAIL(emb_tensor_init(&ts[0], EMB_INT32, i32, 1, (int64_t[]){2}));
    EMB_OK_OR_FAIL(emb_tensor_init(&ts[1], EMB_FLOAT32, vals, 2, (int64_t[]){2, 3}));
    EMB_OK_OR_FAIL(emb_tensor_init(&ts[2], EMB_INT64, idx, 1, (int64_t[]){3}));
    const char *names[3] = {"b.ids32", "embedding.weight", "a.ids"};
    const char *mk[1] = {"note"}, *mv[1] = {"hello \"quoted\" \xc3\xa9"};
    EMB_OK_OR_FAIL(emb_safetensors_write(tmp("multi.safetensors"), 3, names, ts, 1, mk, mv));
    emb_safetensors *st;
    EMB_OK_OR_FAIL(emb_safetensors_open(tmp("multi.safetensors"), &st));
    assert_int_equal(emb_safetensors_num_tensors(st), 3);
    assert_string_equal(emb_safetensors_name(st, 0), "a.ids");
    assert_string_equal(emb_safetensors_dtype(st, 0), "I64");
    assert_string_equal(emb_safetensors_name(st, 1), "embedding.weight");
    assert_string_equal(emb_safetensors_name(st, 2), "b.ids32");
    assert_string_equal(emb_safetensors_metadata(st, "note"), mv[0]);
    assert_string_equal(emb_safetensors_metadata(st, "format"), "pt");
    assert_int_equal(emb_safetensors_num_metadata(st), 2);
    assert_null(emb_safetensors_metadata(st, "nope"));
    emb_tensor view;
    EMB_OK_OR_FAIL(emb_safetensors_view(st, 0, &view));
    assert_int_equal(view.dtype, EMB_INT64);
    assert_memory_equal(view.data, idx, 24);
    EMB_OK_OR_FAIL(emb_safetensors_view(st, emb_safetensors_find(st, "b.ids32"), &view));
    assert_memory_equal(view.data, i32, 8);
    EMB_OK_OR_FAIL(emb_safetensors_read(st, 1, &view));
    assert_memory_equal(view.data, vals, 24);
    emb_tensor_release(&view);
    EMB_EXPECT_ERR(emb_safetensors_view(st, 3, &view), EMB_ERR_INDEX, "out of range");
    emb_safetensors_free(st);
    /* emb_vectors_read finds "embedding.weight" */
    emb_vectors got;
    EMB_OK_OR_FAIL(emb_vectors_read(tmp("multi.safetensors"), NULL, &got));
    assert_int_equal(got.weight.shape[0], 2);
    emb_vectors_release(&got);
    /* writer argument errors: the destination is not created */
    const char *dup[2] = {"x", "x"};
    EMB_EXPECT_ERR(emb_safetensors_write(tmp("no.safetensors"), 2, dup, ts, 0, NULL, NULL),
                   EMB_ERR_INVALID, "given twice");
    const char *meta[1] = {"__metadata__"};
    EMB_EXPECT_ERR(emb_safetensors_write(tmp("no.safetensors"), 1, meta, ts, 0, NULL, NULL),
                   EMB_ERR_INVALID, "reserved");
    assert_int_not_equal(access(tmp("no.safetensors"), F_OK), 0);
}

static void test_w2v_variants(void **state) {
    (void)state;
    /* text: trailing spaces, CRLF, tabs, runs of spaces, blank lines, nan/inf, duplicates */
    const char *txt = "4 3\r\n"
                      "</s> 0.1 -0.2 0.3 \r\n"
                      "the\t1e-05  2.5E+2 -0 \n"
                      "\n"
                      "the 9 9 9\n"
                      "nan nan inf -inf\n";
    put(tmp("v.txt"), txt, strlen(txt));
    emb_vectors got;
    EMB_OK_OR_FAIL(emb_vectors_read(tmp("v.txt"), NULL, &got));
    assert_int_equal(got.format, EMB_FORMAT_W2V_TEXT);
    assert_int_equal(got.weight.shape[0], 3);
    assert_int_equal(got.file_rows, 4);
    assert_int_equal(got.duplicates, 1);
    assert_int_equal(got.nonfinite, 3);
    const float *g = got.weight.data;
    float want[6] = {0.1f, -0.2f, 0.3f, 1e-05f, 250.0f, -0.0f};
    assert_memory_equal(g, want, sizeof want);
    assert_true(isnan(g[6]) && isinf(g[7]) && g[8] < 0);
    assert_int_equal(emb_vocab_find(got.vocab, "nan", 3), 2);
    emb_vectors_release(&got);
    /* binary, gensim style: no newline after rows; and C style with newlines */
    float a[2] = {1.5f, -2.25f}, b[2] = {3e-3f, 4e10f};
    for (int nl = 0; nl < 2; nl++) {
        char buf[128];
        size_t n = (size_t)sprintf(buf, "2 2\n");
        memcpy(buf + n, "ab ", 3), n += 3;
        memcpy(buf + n, a, 8), n += 8;
        if (nl) buf[n++] = '\n';
        memcpy(buf + n, "\xd0\xba ", 3), n += 3;
        memcpy(buf + n, b, 8), n += 8;
        if (nl) buf[n++] = '\n';
        put(tmp("v.bin"), buf, n);
        EMB_OK_OR_FAIL(emb_vectors_read(tmp("v.bin"), NULL, &got));
        assert_int_equal(got.format, EMB_FORMAT_W2V_BINARY);
        assert_memory_equal(got.weight.data, a, 8);
        assert_memory_equal((float *)got.weight.data + 2, b, 8);
        assert_string_equal(emb_vocab_word(got.vocab, 1, NULL), "\xd0\xba");
        emb_vectors_release(&got);
    }
    /* GloVe: no header, words with spaces (parsed from the right) */
    const char *gl = ". . . 1 2\nthe 3 4\nend 5 6";
    put(tmp("g.txt"), gl, strlen(gl));
    EMB_OK_OR_FAIL(emb_vectors_read(tmp("g.txt"), NULL, &got));
    assert_int_equal(got.format, EMB_FORMAT_GLOVE);
    assert_int_equal(got.weight.shape[0], 3);
    assert_int_equal(got.weight.shape[1], 2);
    assert_string_equal(emb_vocab_word(got.vocab, 0, NULL), ". . .");
    assert_true(((float *)got.weight.data)[5] == 6.0f);
    emb_vectors_release(&got);
    /* GloVe: a line with more numbers than the table's dimension is an error, not a word
     * "of 0.4"; too few fields are counted right in the message */
    {
        const char *more = "the 0.1 0.2\nof 0.4 0.1 0.2\n", *fewer = "the 0.1 0.2\nof 0.4\n";
        put(tmp("g_more.txt"), more, strlen(more));
        EMB_EXPECT_ERR(emb_vectors_read(tmp("g_more.txt"), NULL, &got), EMB_ERR_FORMAT,
                       "line 2 (byte offset 12): expected a word and 2 numbers, found 4 fields");
        put(tmp("g_fewer.txt"), fewer, strlen(fewer));
        EMB_EXPECT_ERR(emb_vectors_read(tmp("g_fewer.txt"), NULL, &got), EMB_ERR_FORMAT,
                       "line 2 (byte offset 12): expected a word and 2 numbers, found 2 fields");
    }
    /* negative counts in a header are errors, not a GloVe word "-3" */
    {
        const char *neg_rows = "-3 2\na 1 2\n", *neg_dim = "3 -2\na 1 2\n";
        put(tmp("neg_rows.txt"), neg_rows, strlen(neg_rows));
        EMB_EXPECT_ERR(emb_vectors_read(tmp("neg_rows.txt"), NULL, &got), EMB_ERR_FORMAT,
                       "line 1 (byte offset 0): the header's row count is negative");
        put(tmp("neg_dim.txt"), neg_dim, strlen(neg_dim));
        EMB_EXPECT_ERR(emb_vectors_read(tmp("neg_dim.txt"), NULL, &got), EMB_ERR_FORMAT,
                       "the header's dimension is negative");
    }
    /* small text files are text: a tab after the word, a leading blank, the wrong number
     * of fields (reported by the text reader), a word with a non-number field */
    {
        const struct {
            const char *text;
            const char *needle;
        } cases[] = {
            {"1 2\na\t1 2\n", NULL},
            {"1 2\n a 1 2\n", NULL},
            {"1 2\na 1 2", NULL},
            {"1 3\na 1 2\n", "line 2 (byte offset 9): expected 3 numbers after the word, found 2"},
            {"1 1\nab 1 2\n", "line 2 (byte offset 9): more than 1 numbers"},
        };
        for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
            put(tmp("small.txt"), cases[k].text, strlen(cases[k].text));
            emb_format f;
            EMB_OK_OR_FAIL(emb_format_sniff(tmp("small.txt"), &f));
            if (f != EMB_FORMAT_W2V_TEXT) fail_msg("case %zu sniffed as %s", k, emb_format_name(f));
            if (cases[k].needle)
                EMB_EXPECT_ERR(emb_vectors_read(tmp("small.txt"), NULL, &got), EMB_ERR_FORMAT,
                               cases[k].needle);
        }
        /* a text file whose first row is short with a field that is not a number, and
         * printable lines after it, stays text */
        put(tmp("small.txt"), "1 4\nab x\ncd 1 2 3 4\n", 20);
        emb_format f;
        EMB_OK_OR_FAIL(emb_format_sniff(tmp("small.txt"), &f));
        assert_int_equal(f, EMB_FORMAT_W2V_TEXT);
        /* and binary stays binary: a first value whose first byte is a newline, a row of
         * printable bytes that is not numbers, a row whose first raw bytes are printable and
         * a newline (a vector trained with seed 5 began "})" 0x0a and was read as text) */
        const unsigned char bin1[] = {'1', ' ', '1', '\n', 'a', ' ', '\n', 0, 0, 0x3f, '\n'};
        const char *bin2 = "1 1\nab xy z\n"; /* "xy z" is 4 raw bytes: 1 float */
        const unsigned char bin3[] = {'1', ' ',  '2',  '\n', 't',  'h',  'e',  ' ', '}',
                                      ')', '\n', 0x3e, 0x9a, 0x01, 0x3f, 0xbd, '\n'};
        put(tmp("b1.bin"), bin1, sizeof bin1);
        put(tmp("b2.bin"), bin2, strlen(bin2));
        put(tmp("b3.bin"), bin3, sizeof bin3);
        EMB_OK_OR_FAIL(emb_format_sniff(tmp("b3.bin"), &f));
        assert_int_equal(f, EMB_FORMAT_W2V_BINARY);
        EMB_OK_OR_FAIL(emb_vectors_read(tmp("b3.bin"), NULL, &got));
        assert_int_equal(emb_vocab_num_words(got.vocab), 1);
        emb_vectors_release(&got);
        EMB_OK_OR_FAIL(emb_format_sniff(tmp("b1.bin"), &f));
        assert_int_equal(f, EMB_FORMAT_W2V_BINARY);
        EMB_OK_OR_FAIL(emb_format_sniff(tmp("b2.bin"), &f));
        assert_int_equal(f, EMB_FORMAT_W2V_BINARY);
    }
    /* hostile GloVe: a first line of 2000 numbers, then 500000 one-word lines. The table
     * must not be allocated for 500000 x 2000 floats (4 GB; ASan would abort). */
    {
        FILE *f = fopen(tmp("wide.txt"), "wb");
        assert_non_null(f);
        fputs("w", f);
        for (int k = 0; k < 2000; k++) fputs(" 1", f);
        fputs("\n", f);
        for (int k = 0; k < 500000; k++) fputs("x\n", f);
        fclose(f);
        EMB_EXPECT_ERR(
            emb_vectors_read(tmp("wide.txt"), NULL, &got), EMB_ERR_FORMAT,
            "line 2 (byte offset 4002): expected a word and 2000 numbers, found 1 field");
    }
    /* non-UTF-8 words are accepted as bytes when asked */
    emb_vectors_read_options ro = emb_vectors_read_options_default();
    ro.check_utf8 = false;
    EMB_OK_OR_FAIL(emb_vectors_read(data("bad/w2v_bad_utf8.txt"), &ro, &got));
    assert_int_equal(emb_vocab_find(got.vocab, "\xff\xfe", 2), 0);
    emb_vectors_release(&got);
    /* writer: C-tool style trailing space and precision */
    emb_vocab *v;
    EMB_OK_OR_FAIL(emb_vocab_create(&v));
    EMB_OK_OR_FAIL(emb_vocab_add(v, "w", 1, 0, NULL, NULL));
    float one[2] = {0.5f, 1.0f / 3.0f};
    emb_tensor t;
    EMB_OK_OR_FAIL(emb_tensor_init(&t, EMB_FLOAT32, one, 2, (int64_t[]){1, 2}));
    emb_vectors_write_options wo = emb_vectors_write_options_default();
    wo.trailing_space = true;
    wo.precision = 6;
    EMB_OK_OR_FAIL(emb_vectors_write(tmp("p.vec"), &t, v, &wo));
    size_t n;
    char *s = slurp(tmp("p.vec"), &n);
    assert_string_equal(s, "1 2\nw 0.5 0.333333 \n");
    free(s);
    EMB_OK_OR_FAIL(emb_vectors_write(tmp("p.vec"), &t, v, NULL));
    s = slurp(tmp("p.vec"), &n);
    assert_string_equal(s, "1 2\nw 0.5 0.33333334\n");
    free(s);
    EMB_OK_OR_FAIL(emb_vectors_write(tmp("p.bin"), &t, v, NULL));
    s = slurp(tmp("p.bin"), &n);
    assert_int_equal(n, 4 + 2 + 8 + 1);
    assert_memory_equal(s + 6, one, 8);
    assert_int_equal(s[14], '\n');
    free(s);
    /* words the format cannot hold */
    emb_vocab *bad;
    EMB_OK_OR_FAIL(emb_vocab_create(&bad));
    EMB_OK_OR_FAIL(emb_vocab_add(bad, "a b", 3, 0, NULL, NULL));
    EMB_EXPECT_ERR(emb_vectors_write(tmp("p.vec"), &t, bad, NULL), EMB_ERR_INVALID,
                   "contains a space");
    EMB_EXPECT_ERR(emb_vectors_write(tmp("p.vec"), &t, NULL, NULL), EMB_ERR_INVALID,
                   "needs the words");
    EMB_EXPECT_ERR(emb_vectors_write(tmp("p.unknown"), &t, v, NULL), EMB_ERR_INVALID,
                   "cannot tell the format");
    s = slurp(tmp("p.vec"), &n); /* unchanged by the failed writes */
    assert_string_equal(s, "1 2\nw 0.5 0.33333334\n");
    free(s);
    emb_vocab_free(bad);
    emb_vocab_free(v);
}

static void test_npy_variants(void **state) {
    (void)state;
    /* Fortran order, big-endian, v2 and v3 headers, other key order, double quotes */
    float f[6] = {0, 1, 2, 3, 4, 5};  /* C-order 2x3 */
    float fo[6] = {0, 3, 1, 4, 2, 5}; /* the same in Fortran order */
    const char *hdrs[] = {"{'descr': '<f4', 'fortran_order': True, 'shape': (2, 3), }",
                          "{\"shape\": (2,3), \"fortran_order\": False, \"descr\": \">f4\"}",
                          "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3)}"};
    int versions[] = {1, 2, 3};
    for (int k = 0; k < 3; k++) {
        unsigned char buf[512];
        size_t hl = strlen(hdrs[k]) + 1, n = 0;
        memcpy(buf, "\x93NUMPY", 6);
        buf[6] = (unsigned char)versions[k];
        buf[7] = 0;
        n = 8;
        if (versions[k] == 1)
            buf[n++] = (unsigned char)hl, buf[n++] = 0;
        else
            buf[n++] = (unsigned char)hl, buf[n++] = 0, buf[n++] = 0, buf[n++] = 0;
        memcpy(buf + n, hdrs[k], hl - 1);
        n += hl - 1;
        buf[n++] = '\n';
        for (int i = 0; i < 6; i++) {
            float x = k == 0 ? fo[i] : f[i];
            unsigned char *p = (unsigned char *)&x;
            if (k == 1) {
                unsigned char r[4] = {p[3], p[2], p[1], p[0]};
                memcpy(buf + n, r, 4);
            } else {
                memcpy(buf + n, p, 4);
            }
            n += 4;
        }
        put(tmp("v.npy"), buf, n);
        emb_tensor t;
        EMB_OK_OR_FAIL(emb_npy_read(tmp("v.npy"), &t));
        assert_int_equal(t.ndim, 2);
        assert_int_equal(t.shape[0], 2);
        assert_memory_equal(t.data, f, 24);
        emb_tensor_release(&t);
        emb_vectors got;
        EMB_OK_OR_FAIL(emb_vectors_read(tmp("v.npy"), NULL, &got));
        assert_memory_equal(got.weight.data, f, 24);
        emb_vectors_release(&got);
    }
    /* np.save's exact header bytes */
    emb_tensor t;
    EMB_OK_OR_FAIL(emb_tensor_init(&t, EMB_FLOAT32, f, 2, (int64_t[]){3, 2}));
    EMB_OK_OR_FAIL(emb_npy_write(tmp("w.npy"), &t));
    size_t n;
    char *s = slurp(tmp("w.npy"), &n);
    assert_int_equal(n, 128 + 24);
    assert_memory_equal(s + 10, "{'descr': '<f4', 'fortran_order': False, 'shape': (3, 2), }", 59);
    assert_int_equal(s[127], '\n');
    free(s);
    bool bits[3] = {true, false, true};
    EMB_OK_OR_FAIL(emb_tensor_init(&t, EMB_BOOL, bits, 1, (int64_t[]){3}));
    EMB_OK_OR_FAIL(emb_npy_write(tmp("b.npy"), &t));
    EMB_OK_OR_FAIL(emb_npy_read(tmp("b.npy"), &t));
    assert_int_equal(t.dtype, EMB_BOOL);
    assert_memory_equal(t.data, bits, 3);
    emb_tensor_release(&t);
    EMB_OK_OR_FAIL(emb_tensor_init(&t, EMB_BFLOAT16, f, 1, (int64_t[]){2}));
    EMB_EXPECT_ERR(emb_npy_write(tmp("bf.npy"), &t), EMB_ERR_DTYPE, "NumPy has no bfloat16");
}

/* Every known-bad file: status, a message naming the file and the problem, *out untouched. */
static void test_bad_files(void **state) {
    (void)state;
    static const struct {
        const char *file;
        emb_status st;
        const char *needle;
    } cases[] = {
        {"st_short.safetensors", EMB_ERR_FORMAT, "shorter than the 8-byte header length"},
        {"st_header_too_long.safetensors", EMB_ERR_FORMAT, "exceeds the limit"},
        {"st_header_past_end.safetensors", EMB_ERR_FORMAT, "exceeds the 7 bytes after"},
        {"st_not_json.safetensors", EMB_ERR_FORMAT, "header JSON"},
        {"st_not_object.safetensors", EMB_ERR_FORMAT, "does not start with '{'"},
        {"st_duplicate.safetensors", EMB_ERR_FORMAT, "duplicate"},
        {"st_bad_dtype.safetensors", EMB_ERR_FORMAT, "unknown dtype \"F33\""},
        {"st_unsupported_dtype.safetensors", EMB_ERR_DTYPE, "F8_E4M3"},
        {"st_size_mismatch.safetensors", EMB_ERR_FORMAT,
         "hold 20 bytes but F32 of its shape needs 24"},
        {"st_truncated.safetensors", EMB_ERR_FORMAT, "truncated file or out-of-range offsets"},
        {"st_trailing.safetensors", EMB_ERR_FORMAT, "2 bytes after the last tensor"},
        {"st_overlap.safetensors", EMB_ERR_FORMAT, "overlaps the previous tensor"},
        {"st_hole.safetensors", EMB_ERR_FORMAT, "a hole in the data buffer"},
        {"st_out_of_range.safetensors", EMB_ERR_FORMAT,
         "a hole in the data buffer: bytes [0, 4096)"},
        {"st_negative.safetensors", EMB_ERR_FORMAT, "shape entry 0 is not a non-negative integer"},
        {"st_float_offset.safetensors", EMB_ERR_FORMAT,
         "data_offsets must be two non-negative integers"},
        {"st_huge_shape.safetensors", EMB_ERR_FORMAT, "overflows"},
        {"st_big_number.safetensors", EMB_ERR_FORMAT, "header JSON"},
        {"st_meta_not_string.safetensors", EMB_ERR_FORMAT, "value of \"format\" is not a string"},
        {"st_bad_utf8.safetensors", EMB_ERR_FORMAT, "header JSON"},
        {"st_vocab_short.safetensors", EMB_ERR_FORMAT, "holds fewer words than the table's 2 rows"},
        {"st_no_table.safetensors", EMB_ERR_INVALID, "not exactly one 2-D floating-point tensor"},
        {"st_int_table.safetensors", EMB_ERR_DTYPE, "a table must be F32, F16, BF16 or F64"},
        {"st_sub_byte.safetensors", EMB_ERR_FORMAT, "not a whole number of bytes"},
        {"npy_bad_magic.npy", EMB_ERR_FORMAT, "no \\x93NUMPY magic"},
        {"npy_bad_version.npy", EMB_ERR_FORMAT, "unsupported .npy version 9.0"},
        {"npy_header_past_end.npy", EMB_ERR_FORMAT, "header length 32767 exceeds"},
        {"npy_object.npy", EMB_ERR_DTYPE, "Python objects"},
        {"npy_truncated.npy", EMB_ERR_FORMAT, "truncated: the header's shape needs 24 bytes"},
        {"npy_trailing.npy", EMB_ERR_FORMAT, "2 bytes after the array data"},
        {"npy_shape_list.npy", EMB_ERR_FORMAT, "shape must be a tuple"},
        {"npy_huge_shape.npy", EMB_ERR_FORMAT, "overflows"},
        {"npy_missing_key.npy", EMB_ERR_FORMAT, "must have 'descr', 'fortran_order' and 'shape'"},
        {"npy_bad_descr.npy", EMB_ERR_DTYPE, "unsupported .npy descr '<c8'"},
        {"npy_too_many_dims.npy", EMB_ERR_SHAPE, "more than 9 dimensions"},
        {"npy_1d_table.npy", EMB_ERR_SHAPE, "a table has 2"},
        {"w2v_truncated.bin", EMB_ERR_FORMAT, "truncated: row 2 of 2 needs 8 bytes"},
        {"w2v_fewer_rows.bin", EMB_ERR_FORMAT,
         "the header claims 3 rows of dimension 2, which need at least 30 bytes, but only 22"},
        {"w2v_huge_header.bin", EMB_ERR_FORMAT, "the header claims 100000000000 rows"},
        {"w2v_absurd_dim.txt", EMB_ERR_FORMAT, "absurd"},
        {"w2v_zero_dim.txt", EMB_ERR_FORMAT, "dimension 0"},
        {"w2v_bad_header.txt", EMB_ERR_FORMAT,
         "line 1 (byte offset 4): \"three\" is not a number"}, /* read as GloVe */
        {"w2v_fewer_rows.txt", EMB_ERR_FORMAT, "header says 3 rows but the file ends after 2"},
        {"w2v_more_rows.txt", EMB_ERR_FORMAT, "more rows than the 1 the header declares"},
        {"w2v_short_row.txt", EMB_ERR_FORMAT,
         "line 3 (byte offset 17): expected 3 numbers after the word, found 2"},
        {"w2v_long_row.txt", EMB_ERR_FORMAT, "line 3 (byte offset 20): more than 3 numbers"},
        {"w2v_not_number.txt", EMB_ERR_FORMAT, "\"x2\" is not a number (value 2 of the row)"},
        {"w2v_bad_utf8.txt", EMB_ERR_FORMAT, "line 2 (byte offset 4): word is not valid UTF-8"},
        {"w2v_bad_utf8.bin", EMB_ERR_FORMAT, "row 1 (byte offset 4): word is not valid UTF-8"},
        {"glove_ragged.txt", EMB_ERR_FORMAT,
         "line 2 (byte offset 8): expected a word and 3 numbers, found 3 fields"},
        {"glove_one_field.txt", EMB_ERR_FORMAT, "expected a word and numbers, found 1 field"},
        {"empty.txt", EMB_ERR_FORMAT, "empty file"},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        emb_vectors out;
        memset(&out, 0x5a, sizeof out);
        emb_vectors before = out;
        emb_clear_error();
        emb_status st = emb_vectors_read(bad_path(cases[k].file), NULL, &out);
        if (st != cases[k].st)
            fail_msg("%s: status %d, expected %d: %s", cases[k].file, st, cases[k].st,
                     emb_errmsg());
        if (!strstr(emb_errmsg(), cases[k].needle))
            fail_msg("%s: message \"%s\" lacks \"%s\"", cases[k].file, emb_errmsg(),
                     cases[k].needle);
        if (!strstr(emb_errmsg(), cases[k].file))
            fail_msg("%s: message \"%s\" lacks the file name", cases[k].file, emb_errmsg());
        assert_memory_equal(&out, &before, sizeof out);
    }
    /* the low-level readers too */
    emb_tensor t;
    memset(&t, 0x5a, sizeof t);
    EMB_EXPECT_ERR(emb_npy_read(data("bad/npy_bad_magic.npy"), &t), EMB_ERR_FORMAT,
                   "no \\x93NUMPY magic");
    emb_safetensors *st = (emb_safetensors *)&t;
    EMB_EXPECT_ERR(emb_safetensors_open(data("bad/st_overlap.safetensors"), &st), EMB_ERR_FORMAT,
                   "overlaps");
    assert_ptr_equal(st, (emb_safetensors *)&t);
    EMB_EXPECT_ERR(emb_vectors_read(data("bad/does-not-exist.vec"), NULL, NULL), EMB_ERR_NULL,
                   "out");
    emb_vectors out;
    EMB_EXPECT_ERR(emb_vectors_read(data("bad/does-not-exist.vec"), NULL, &out), EMB_ERR_IO,
                   "cannot open");
    EMB_EXPECT_ERR(emb_vectors_read(data("bad"), NULL, &out), EMB_ERR_IO, "is a directory");
    emb_vectors_read_options ro = emb_vectors_read_options_default();
    ro.tensor = "nope";
    EMB_EXPECT_ERR(emb_vectors_read(data("bad/st_no_table.safetensors"), &ro, &out),
                   EMB_ERR_INVALID, "no tensor named \"nope\"; the file has: \"a\" F32, \"b\" F32");
    ro.tensor = "a";
    EMB_OK_OR_FAIL(emb_vectors_read(data("bad/st_no_table.safetensors"), &ro, &out));
    emb_vectors_release(&out);
    ro = emb_vectors_read_options_default();
    ro.limit = -1;
    EMB_EXPECT_ERR(emb_vectors_read(data("bad/empty.txt"), &ro, &out), EMB_ERR_INVALID, "negative");
    ro.limit = 0;
    ro.format = EMB_FORMAT_W2V_BINARY;
    put(tmp("ft.bin"), "\xba\x16\x4f\x2f\x0c\x00\x00\x00", 8);
    EMB_EXPECT_ERR(emb_vectors_read(tmp("ft.bin"), NULL, &out), EMB_ERR_FORMAT,
                   "offset 8: the file ends inside the arguments block");
    /* fuzzer finding: an empty file read as binary did pointer arithmetic on NULL */
    EMB_EXPECT_ERR(emb_vectors_read(data("bad/empty.txt"), &ro, &out), EMB_ERR_FORMAT,
                   "empty file");
    EMB_EXPECT_ERR(emb_vectors_read(data("bad/w2v_long_row.txt"), &ro, &out), EMB_ERR_FORMAT,
                   "the header claims 2 rows");
}

static size_t count_dir_entries(void) {
    DIR *d = opendir(tmpdir);
    size_t n = 0;
    for (struct dirent *e; (e = readdir(d));)
        n += e->d_name[0] != '.' || strstr(e->d_name, ".tmp.");
    closedir(d);
    return n;
}

static void test_atomic_write(void **state) {
    (void)state;
    emb_tensor w;
    emb_vocab *v;
    make_table(&w, &v, 300, 50);
    const char *names[] = {"a.safetensors", "a.npy", "a.bin", "a.vec"};
    for (int k = 0; k < 4; k++) {
        EMB_OK_OR_FAIL(emb_vectors_write(tmp(names[k]), &w, v, NULL));
        size_t n0, n1;
        char *before = slurp(tmp(names[k]), &n0);
        size_t entries = count_dir_entries();
        /* fail after 1000 bytes (the writes are larger than that) */
        float *d = w.data;
        d[0] += 1;
        emb__io_fail_after = 1000;
        EMB_EXPECT_ERR(emb_vectors_write(tmp(names[k]), &w, v, NULL), EMB_ERR_IO,
                       "injected failure");
        emb__io_fail_after = UINT64_MAX;
        d[0] -= 1;
        char *after = slurp(tmp(names[k]), &n1);
        assert_int_equal(n0, n1);
        assert_memory_equal(before, after, n0);
        assert_int_equal(count_dir_entries(), entries); /* no temporary file left */
        free(before);
        free(after);
    }
    EMB_EXPECT_ERR(emb_vectors_write(tmp("no/such/dir/x.npy"), &w, NULL, NULL), EMB_ERR_IO,
                   "cannot create a temporary file in its folder");
    EMB_EXPECT_ERR(emb_vectors_write("/proc/x.npy", &w, NULL, NULL), EMB_ERR_IO, "/proc/x.npy");
    /* the mode of an existing file is kept */
    chmod(tmp("a.npy"), 0640);
    EMB_OK_OR_FAIL(emb_vectors_write(tmp("a.npy"), &w, NULL, NULL));
    struct stat sb;
    assert_int_equal(stat(tmp("a.npy"), &sb), 0);
    assert_int_equal(sb.st_mode & 0777, 0640);
    emb_tensor_release(&w);
    emb_vocab_free(v);
}

static void test_parse_float(void **state) {
    (void)state;
    /* Against strtof: printed floats at every precision, random digit strings, edge cases. */
    uint64_t s = 88172645463325252ull;
    char buf[64];
    long fast_checked = 0;
    for (int i = 0; i < 300000; i++) {
        s ^= s << 13, s ^= s >> 7, s ^= s << 17;
        int n;
        switch (i % 4) {
        case 0: {
            uint32_t bits = (uint32_t)s;
            float f;
            memcpy(&f, &bits, 4);
            n = snprintf(buf, sizeof buf, "%.*g", (int)(s >> 40) % 12 + 1, (double)f);
            break;
        }
        case 1: {
            float f = (float)((double)(int64_t)(s >> 11) / 9007199254740992.0 * 8);
            n = snprintf(buf, sizeof buf, "%.*f", (int)(s >> 50) % 10, (double)f);
            break;
        }
        case 2: { /* random mantissa digits and exponents near the fast path's edges */
            n = snprintf(buf, sizeof buf, "%s%llu.%llue%d", (s & 1) ? "-" : "",
                         (unsigned long long)(s >> 44), (unsigned long long)((s >> 20) & 0xffffff),
                         (int)((s >> 8) % 60) - 30);
            break;
        }
        default: { /* halfway cases between adjacent floats */
            uint32_t bits = (uint32_t)(s >> 3) & 0x7effffffu;
            float f, g;
            memcpy(&f, &bits, 4);
            g = nextafterf(f, INFINITY);
            n = snprintf(buf, sizeof buf, "%.17g", ((double)f + (double)g) / 2);
            break;
        }
        }
        float got, want = strtof(buf, NULL);
        if (!emb__parse_float(buf, (size_t)n, &got)) fail_msg("not parsed: %s", buf);
        if (memcmp(&got, &want, 4) && !(isnan(got) && isnan(want)))
            fail_msg("%s: got %.9g want %.9g", buf, (double)got, (double)want);
        fast_checked++;
    }
    assert_true(fast_checked == 300000);
    const char *good[] = {"0",
                          "-0",
                          "+1",
                          "1.",
                          ".5",
                          "1e5",
                          "1E-5",
                          "nan",
                          "-inf",
                          "Infinity",
                          "0x1p-3",
                          "123456789012345678901234567890",
                          "0.000000000000000000000000000000000000000000001"};
    for (size_t k = 0; k < sizeof good / sizeof good[0]; k++) {
        float got, want = strtof(good[k], NULL);
        assert_true(emb__parse_float(good[k], strlen(good[k]), &got));
        assert_true(!memcmp(&got, &want, 4) || (isnan(got) && isnan(want)));
    }
    const char *bad[] = {"",    "-",  ".",  "e5", "1e",  "1e+", "1.2.3",
                         "1,5", " 1", "1 ", "0x", "abc", "--1"};
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
        float got = 42;
        if (emb__parse_float(bad[k], strlen(bad[k]), &got)) fail_msg("accepted \"%s\"", bad[k]);
        assert_true(got == 42);
    }
    /* the shortest text that reads back */
    for (int i = 0; i < 100000; i++) {
        s ^= s << 13, s ^= s >> 7, s ^= s << 17;
        uint32_t bits = (uint32_t)s;
        float f, back;
        memcpy(&f, &bits, 4);
        if (isnan(f)) continue;
        int n = emb__format_float(buf, f, 0);
        assert_true(emb__parse_float(buf, (size_t)n, &back));
        assert_memory_equal(&back, &f, 4);
    }
}

static void test_half(void **state) {
    (void)state;
    /* every half and bfloat16 value survives f32 and back */
    for (uint32_t h = 0; h < 65536; h++) {
        float f = emb_f16_to_f32((uint16_t)h);
        if (isnan(f)) continue;
        assert_int_equal(emb_f32_to_f16(f), h);
        float b = emb_bf16_to_f32((uint16_t)h);
        if (!isnan(b)) assert_int_equal(emb_f32_to_bf16(b), h);
    }
    assert_int_equal(emb_f32_to_f16(65504.0f), 0x7bff);
    assert_int_equal(emb_f32_to_f16(65520.0f), 0x7c00);
    assert_int_equal(emb_f32_to_f16(65519.99f), 0x7bff);
    assert_int_equal(emb_f32_to_f16(0x1p-25f), 0);             /* tie to even: 0 */
    assert_int_equal(emb_f32_to_f16(0x1.000002p-25f), 1);      /* just above: smallest subnormal */
    assert_int_equal(emb_f32_to_f16(1.0f + 0x1p-11f), 0x3c00); /* tie to even, down */
    assert_int_equal(emb_f32_to_f16(1.0f + 0x3p-11f), 0x3c02); /* tie to even, up */
    assert_int_equal(emb_f32_to_f16(NAN), 0x7e00);
    assert_int_equal(emb_f32_to_bf16(1.0f + 0x1p-8f), 0x3f80);
    assert_int_equal(emb_f32_to_bf16(1.0f + 0x3p-8f), 0x3f82);
    assert_int_equal(emb_f32_to_bf16(NAN), 0x7fc0);
}

static void test_mmap_embedding(void **state) {
    (void)state;
    emb_tensor w;
    emb_vocab *v;
    make_table(&w, &v, 64, 16);
    EMB_OK_OR_FAIL(emb_vectors_write(tmp("m.safetensors"), &w, v, NULL));
    emb_embedding *e = NULL;
    emb_status st = emb_embedding_map_safetensors(tmp("m.safetensors"), NULL, NULL, &e);
    EMB_OK_OR_FAIL(st);
    assert_true(emb_embedding_is_read_only(e));
    assert_int_equal(emb_embedding_num_embeddings(e), 64);
    int64_t idx[2] = {63, 5};
    float out[32];
    emb_tensor ti, to;
    EMB_OK_OR_FAIL(emb_tensor_init(&ti, EMB_INT64, idx, 1, (int64_t[]){2}));
    EMB_OK_OR_FAIL(emb_tensor_init(&to, EMB_FLOAT32, out, 2, (int64_t[]){2, 16}));
    EMB_OK_OR_FAIL(emb_embedding_forward(e, &ti, &to));
    assert_memory_equal(out, (float *)w.data + 63 * 16, 64);
    assert_memory_equal(out + 16, (float *)w.data + 5 * 16, 64);
    emb_tensor wv;
    EMB_EXPECT_ERR(emb_embedding_weight(e, &wv), EMB_ERR_READ_ONLY, "read-only");
    emb_embedding_free(e); /* unmaps (ASan/valgrind would report a leaked mapping otherwise) */
    emb_vectors_write_options wo = emb_vectors_write_options_default();
    wo.dtype = EMB_FLOAT16;
    EMB_OK_OR_FAIL(emb_vectors_write(tmp("m16.safetensors"), &w, NULL, &wo));
    EMB_EXPECT_ERR(emb_embedding_map_safetensors(tmp("m16.safetensors"), NULL, NULL, &e),
                   EMB_ERR_DTYPE, "a mapped table must be F32");
    emb_tensor_release(&w);
    emb_vocab_free(v);
}

static void test_gensim_fixtures(void **state) {
    (void)state;
    /* Data kept outside the repository (tests/shared_data.py): missing data fails the test. */
    const char *shared = getenv("EMB_SHARED_DIR");
    if (!shared || !*shared)
        fail_msg("missing test data: EMB_SHARED_DIR is not set (ctest sets it to the CMake "
                 "cache variable EMB_SHARED_DIR, the folder of the data kept outside the "
                 "repository)");
    char path[1024];
    snprintf(path, sizeof path, "%s/fixtures/gensim/lee_fasttext.vec", shared);
    if (access(path, R_OK) != 0)
        fail_msg("missing test data: %s cannot be read (%s). EMB_SHARED_DIR must name a copy "
                 "of the folder of data kept outside the repository",
                 path, strerror(errno));
    emb_vectors got;
    EMB_OK_OR_FAIL(emb_vectors_read(path, NULL, &got));
    assert_int_equal(got.format, EMB_FORMAT_W2V_TEXT);
    assert_int_equal(got.weight.shape[0], 1762);
    assert_int_equal(got.weight.shape[1], 10);
    assert_string_equal(emb_vocab_word(got.vocab, 0, NULL), "the");
    float want0 = strtof("-0.65992", NULL);
    assert_memory_equal(got.weight.data, &want0, 4);
    emb_vectors_release(&got);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_roundtrip_all_formats),
        cmocka_unit_test(test_dtypes),
        cmocka_unit_test(test_safetensors_known_answer),
        cmocka_unit_test(test_w2v_variants),
        cmocka_unit_test(test_npy_variants),
        cmocka_unit_test(test_bad_files),
        cmocka_unit_test(test_atomic_write),
        cmocka_unit_test(test_parse_float),
        cmocka_unit_test(test_half),
        cmocka_unit_test(test_mmap_embedding),
        cmocka_unit_test(test_gensim_fixtures),
    };
    return cmocka_run_group_tests(tests, tmp_setup, tmp_teardown);
}
