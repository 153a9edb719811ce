/* emb info: what a vector file holds — format, rows, dimension, dtype, words, norms. */
#include "cli.h"

#include <emb/emb.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* One line per tensor: name, dtype, shape. */
static void list_tensors(FILE *out, const emb_safetensors *st) {
    for (int64_t i = 0; i < emb_safetensors_num_tensors(st); i++) {
        int nd;
        const int64_t *sh = emb_safetensors_shape(st, i, &nd);
        char shape[256];
        emb_shape_repr(nd, sh, shape, sizeof shape);
        fprintf(out, "  %-24s %-5s %s\n", emb_safetensors_name(st, i), emb_safetensors_dtype(st, i),
                shape);
    }
}

static int run(const emb_cli_command *cmd, int argc, char **argv) {
    const char *from = NULL, *tensor = NULL;
    int64_t limit = 0;
    bool no_utf8 = false;
    const emb_cli_option opts[] = {
        {"from", 0, "format", EMB_CLI_STRING, &from, 0, 0, 0, 0},
        {"tensor", 0, NULL, EMB_CLI_STRING, &tensor, 0, 0, 0, 0},
        {"limit", 0, NULL, EMB_CLI_INT, &limit, 0, INT64_MAX, 0, 0},
        {"no-utf8-check", 0, NULL, EMB_CLI_FLAG, &no_utf8, 0, 0, 0, 0},
        {NULL, 0, NULL, EMB_CLI_FLAG, NULL, 0, 0, 0, 0},
    };
    emb_cli_args args;
    int rc = emb_cli_parse(cmd, argc, argv, opts, &args);
    if (rc >= 0) return rc;
    if ((rc = emb_cli_operands(cmd, &args, 1, 1, "FILE")) >= 0) return rc;
    emb_vectors_read_options ro = emb_vectors_read_options_default();
    if (from && emb_format_parse(from, &ro.format))
        return emb_cli_usage_error(cmd, "%s", emb_errmsg());
    ro.limit = limit;
    ro.tensor = tensor;
    ro.check_utf8 = !no_utf8;
    const char *path = args.v[0];
    emb_vectors v;
    emb_cli_watch_input(cmd, path);
    if (emb_vectors_read(path, &ro, &v)) {
        /* A safetensors file whose table cannot be picked: say what it holds. */
        rc = emb_cli_fail(cmd, "%s", emb_errmsg());
        emb_safetensors *st;
        if (!tensor && ro.format != EMB_FORMAT_NPY && !emb_safetensors_open(path, &st)) {
            fprintf(stderr, "%s holds these tensors (pick one with --tensor NAME):\n", path);
            list_tensors(stderr, st);
            emb_safetensors_free(st);
        }
        return rc;
    }
    int64_t rows = v.weight.shape[0], dim = v.weight.shape[1];
    printf("file:       %s\n", path);
    printf("format:     %s\n", emb_format_name(v.format));
    printf("rows:       %lld", (long long)rows);
    if (v.file_rows != rows)
        printf(" (the file declares %lld%s)", (long long)v.file_rows,
               limit && limit < v.file_rows ? "; --limit applied" : "");
    printf("\ndim:        %lld\n", (long long)dim);
    printf("dtype:      %s\n", emb_dtype_name(v.file_dtype));
    if (v.vocab)
        printf("words:      %lld%s\n", (long long)emb_vocab_num_words(v.vocab),
               emb_vocab_has_counts(v.vocab) ? " (with counts)" : "");
    else
        printf("words:      none (rows are looked up by id)\n");
    if (v.duplicates)
        printf("duplicates: %lld rows skipped (repeated words; the first is kept)\n",
               (long long)v.duplicates);
    if (v.nonfinite) printf("non-finite: %lld values (NaN or infinite)\n", (long long)v.nonfinite);
    if (rows > 0) {
        const float *w = v.weight.data;
        double mn = INFINITY, mx = -INFINITY, sum = 0;
        int64_t zero = 0, amin = 0, amax = 0;
        if (dim == 0) /* every row is empty: norm 0 (and no work per row) */
            mn = mx = 0, zero = rows;
        for (int64_t i = 0; i < rows && dim > 0; i++) {
            double s = 0;
            for (int64_t k = 0; k < dim; k++) s += (double)w[i * dim + k] * w[i * dim + k];
            double n = sqrt(s);
            if (n == 0) zero++;
            if (n < mn) mn = n, amin = i;
            if (n > mx) mx = n, amax = i;
            sum += n;
        }
        printf("norms:      min %.6g, mean %.6g, max %.6g (L2, over %lld rows)\n", mn,
               sum / (double)rows, mx, (long long)rows);
        if (v.vocab) {
            printf("smallest norm: %s\n", emb_vocab_word(v.vocab, amin, NULL));
            printf("largest norm:  %s\n", emb_vocab_word(v.vocab, amax, NULL));
        } else {
            printf("smallest norm: row %lld\nlargest norm:  row %lld\n", (long long)amin,
                   (long long)amax);
        }
        if (zero) printf("zero rows:  %lld\n", (long long)zero);
    }
    if (v.format == EMB_FORMAT_SAFETENSORS) {
        emb_safetensors *st;
        if (!emb_safetensors_open(path, &st)) {
            const char *qt = emb_safetensors_metadata(st, "emb.qtype");
            emb_qtype q;
            int64_t rb;
            if (qt && !emb_qtype_parse(qt, &q) && !emb_qtype_row_nbytes(q, dim, &rb)) {
                static const char *layout[] = {
                    "float32 values", "float16 values", "bfloat16 values",
                    "uint8 codes, float32 scale and bias", "4-bit codes, float16 scale and bias"};
                printf("storage:    %s, %lld bytes per row (%s; %.2f GB)\n", qt, (long long)rb,
                       layout[q], (double)rb * (double)v.file_rows / 1e9);
            }
            const char *e1 = emb_safetensors_metadata(st, "emb.error.max_abs");
            const char *e2 = emb_safetensors_metadata(st, "emb.error.mean_abs");
            const char *e3 = emb_safetensors_metadata(st, "emb.error.mean_cosine");
            if (e1 && e2 && e3)
                printf("error:      against the float32 source: max abs %s, mean abs %s, mean "
                       "cosine %s\n",
                       e1, e2, e3);
            printf("tensors:\n");
            list_tensors(stdout, st);
            emb_safetensors_free(st);
        }
    }
    emb_vectors_release(&v);
    return EMB_CLI_OK;
}

const emb_cli_command emb_cli_cmd_info = {
    "info",
    "describe a vector file: format, rows, dimension, dtype, words, norms",
    "usage: emb info [--from FORMAT] [--tensor NAME] [--limit N] FILE\n"
    "\n"
    "Reads FILE and prints what it holds, one \"key: value\" line each: the format, the\n"
    "number of rows, the dimension, the element type stored in the file, whether it carries\n"
    "words (and counts), rows skipped because their word repeats an earlier one, NaN or\n"
    "infinite values, and a summary of the rows' L2 norms (min, mean, max, and the words or\n"
    "rows with the smallest and largest norm: \"smallest norm:\", \"largest norm:\"). For\n"
    "safetensors it also lists every tensor, and for reduced-precision and quantized tables\n"
    "(emb convert --dtype f16|bf16|int8|int4) the storage type, its bytes per row and its\n"
    "error against the float32 source.\n"
    "\n"
    "The format is recognised from the content: safetensors, .npy, word2vec text (also\n"
    "fastText .vec), word2vec binary, GloVe text (no header line).\n"
    "\n"
    "options:\n"
    "  --from FORMAT     read FILE as FORMAT instead of recognising it: safetensors, npy,\n"
    "                    word2vec-text (txt, vec), word2vec-binary (bin), glove\n"
    "  --tensor NAME     safetensors: the table to read (default: \"weight\", else\n"
    "                    \"embedding.weight\", else the only 2-D floating-point tensor;\n"
    "                    when none can be picked, the error lists the tensors)\n"
    "  --limit N         read only the first N rows (default 0: all), like gensim's limit\n"
    "  --no-utf8-check   accept words that are not valid UTF-8 (as raw bytes)\n"
    "\n"
    "exit status: 0 on success, 1 when FILE cannot be read or is malformed (the message\n"
    "names the file, the line or byte offset, and what is wrong), 2 on a usage error.\n"
    "\n"
    "example:\n"
    "  emb info vectors.bin\n",
    run,
};
