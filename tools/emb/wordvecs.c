/* Shared by the word-vector commands: see wordvecs.h. */
#include "wordvecs.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* A safetensors file holding a reduced-precision or quantized table (emb.qtype other than
 * f32) is mapped and searched as it is stored: true, with out->q set, or NULL and the error
 * pending. Other files: false. */
static bool open_quantized(const char *path, wordvecs *out) {
    /* only a regular file can be mapped; a pipe must be read once, by emb_vectors_read */
    struct stat sb;
    if (stat(path, &sb) != 0 || !S_ISREG(sb.st_mode)) return false;
    emb_format f;
    if (emb_format_sniff(path, &f) != EMB_OK || f != EMB_FORMAT_SAFETENSORS) {
        emb_clear_error();
        return false;
    }
    emb_safetensors *st;
    if (emb_safetensors_open(path, &st) != EMB_OK) {
        emb_clear_error();
        return false;
    }
    const char *qt = emb_safetensors_metadata(st, "emb.qtype");
    const bool quantized = qt && strcmp(qt, "f32") != 0;
    emb_safetensors_free(st);
    if (!quantized) return false;
    emb_status rc = emb_qtable_map(path, &out->q, &out->v.vocab);
    if (rc == EMB_ERR_UNSUPPORTED) /* data not aligned for mapping: a copy in memory */
        rc = emb_qtable_load(path, &out->q, &out->v.vocab);
    if (rc != EMB_OK) return true;
    out->v.format = EMB_FORMAT_SAFETENSORS;
    out->v.file_rows = emb_qtable_num_rows(out->q);
    /* the shape only: no float32 copy exists */
    out->v.weight.dtype = EMB_FLOAT32;
    out->v.weight.ndim = 2;
    out->v.weight.shape[0] = emb_qtable_num_rows(out->q);
    out->v.weight.shape[1] = emb_qtable_dim(out->q);
    out->v.weight.data = NULL;
    return true;
}

const float *wordvecs_row(const wordvecs *w, int64_t r, float *buf) {
    if (!w->q) return (const float *)w->v.weight.data + r * w->v.weight.shape[1];
    emb_qtable_dequantize(w->q, r, 1, buf);
    return buf;
}

void wordvecs_lower(char *s) {
    for (; *s; s++)
        if (*s >= 'A' && *s <= 'Z') *s = (char)(*s - 'A' + 'a');
}

static int open_table(const emb_cli_command *cmd, const char *path, int64_t limit,
                      int64_t restrict_rows, bool fold_case, bool need_words, wordvecs *out);

emb_status wordvecs_read(const char *path, const emb_vectors_read_options *ro, emb_vectors *v,
                         emb_fasttext **ft) {
    struct stat sb;
    emb_format f = EMB_FORMAT_AUTO;
    const bool regular = stat(path, &sb) == 0 && S_ISREG(sb.st_mode);
    *ft = NULL;
    if (regular && (ro->format == EMB_FORMAT_AUTO || ro->format == EMB_FORMAT_FASTTEXT_BIN) &&
        ro->check_utf8 && emb_format_sniff(path, &f) == EMB_OK && f == EMB_FORMAT_FASTTEXT_BIN) {
        /* the model once, and the table of its words from it */
        emb_status st = emb_fasttext_read(path, ft);
        if (st) return st;
        if ((st = emb_fasttext_vectors(*ft, ro->limit, v)) != EMB_OK) {
            emb_fasttext_free(*ft);
            *ft = NULL;
            return emb_set_error(st, "%s: %s", path, emb_errmsg());
        }
        return EMB_OK;
    }
    emb_clear_error();
    emb_status st = emb_vectors_read(path, ro, v);
    if (st || v->format != EMB_FORMAT_FASTTEXT_BIN || !regular) return st;
    /* a model read without the UTF-8 check: the model is read a second time */
    if ((st = emb_fasttext_read(path, ft)) != EMB_OK) emb_vectors_release(v);
    return st;
}

int wordvecs_open(const emb_cli_command *cmd, const char *path, int64_t limit,
                  int64_t restrict_rows, bool fold_case, wordvecs *out) {
    return open_table(cmd, path, limit, restrict_rows, fold_case, true, out);
}

int wordvecs_open_any(const emb_cli_command *cmd, const char *path, int64_t limit,
                      int64_t restrict_rows, bool fold_case, wordvecs *out) {
    return open_table(cmd, path, limit, restrict_rows, fold_case, false, out);
}

static int open_table(const emb_cli_command *cmd, const char *path, int64_t limit,
                      int64_t restrict_rows, bool fold_case, bool need_words, wordvecs *out) {
    memset(out, 0, sizeof *out);
    emb_cli_watch_input(cmd, path);
    if (limit == 0 && open_quantized(path, out)) {
        if (!out->q) return emb_cli_fail(cmd, "%s", emb_errmsg());
    } else {
        emb_vectors_read_options ro = emb_vectors_read_options_default();
        ro.limit = limit;
        if (wordvecs_read(path, &ro, &out->v, &out->ft) != EMB_OK)
            return emb_cli_fail(cmd, "%s", emb_errmsg());
    }
    if (!out->v.vocab && need_words) {
        wordvecs_close(out);
        return emb_cli_fail(cmd, "%s holds no words (a table without a vocabulary)", path);
    }
    int64_t rows = out->v.weight.shape[0];
    if (restrict_rows > 0 && restrict_rows < rows) rows = restrict_rows;
    out->rows = rows;
    if ((out->q ? emb_knn_create_from_qtable(out->q, rows, &out->knn)
                : emb_knn_create(&out->v.weight, rows, &out->knn)) != EMB_OK) {
        int rc = emb_cli_fail(cmd, "%s: %s", path, emb_errmsg());
        wordvecs_close(out);
        return rc;
    }
    if (fold_case && out->v.vocab && wordvecs_fold(out->v.vocab, rows, &out->fold) != EMB_OK) {
        int rc = emb_cli_fail(cmd, "%s", emb_errmsg());
        wordvecs_close(out);
        return rc;
    }
    return -1;
}

void wordvecs_close(wordvecs *w) {
    emb_knn_free(w->knn);
    emb_qtable_free(w->q);
    if (w->q) w->v.weight.data = NULL;
    emb_vocab_free(w->fold);
    emb_fasttext_free(w->ft);
    emb_vectors_release(&w->v);
    memset(w, 0, sizeof *w);
}

emb_status wordvecs_fold(const emb_vocab *vocab, int64_t rows, emb_vocab **out) {
    emb_vocab *fold;
    emb_status st = emb_vocab_create(&fold);
    if (st != EMB_OK) return st;
    /* Row order: a folded word maps to its most frequent spelling (the first row). */
    for (int64_t i = 0; i < rows && st == EMB_OK; i++) {
        size_t len;
        const char *s = emb_vocab_word(vocab, i, &len);
        char *low = malloc(len + 1);
        if (!low) {
            emb_vocab_free(fold);
            return EMB_ERR_NOMEM;
        }
        memcpy(low, s, len + 1);
        wordvecs_lower(low);
        int64_t id;
        bool added;
        st = emb_vocab_add(fold, low, len, 0, &id, &added);
        free(low);
        if (st == EMB_OK && added) st = emb_vocab_set_count(fold, id, i); /* count holds the row */
    }
    if (st != EMB_OK) {
        emb_vocab_free(fold);
        return st;
    }
    *out = fold;
    return EMB_OK;
}

int64_t wordvecs_fold_find(const emb_vocab *fold, const char *word, size_t n) {
    char small[256];
    char *low = n < sizeof small ? small : malloc(n + 1);
    if (!low) return -1;
    memcpy(low, word, n);
    low[n] = 0;
    for (size_t i = 0; i < n; i++)
        if (low[i] >= 'A' && low[i] <= 'Z') low[i] = (char)(low[i] - 'A' + 'a');
    int64_t id = emb_vocab_find(fold, low, n);
    if (low != small) free(low);
    return id < 0 ? -1 : emb_vocab_count(fold, id);
}

int64_t wordvecs_find(const wordvecs *w, const char *word) {
    if (!w->fold) return emb_vocab_find(w->v.vocab, word, strlen(word));
    return wordvecs_fold_find(w->fold, word, strlen(word));
}

const float *wordvecs_vector(const wordvecs *w, const char *word, float *buf, int64_t *row) {
    *row = wordvecs_find(w, word);
    if (*row >= 0) return wordvecs_row(w, *row, buf);
    if (!w->ft || emb_fasttext_word_vector(w->ft, word, strlen(word), buf) != EMB_OK) return NULL;
    return buf;
}

const char *wordvecs_word(const wordvecs *w, int64_t row) {
    return emb_vocab_word(w->v.vocab, row, NULL);
}

int wordvecs_split(char *line, char **words, int max) {
    int n = 0;
    for (char *save = NULL, *t = strtok_r(line, " \t\r\n", &save); t && n < max;
         t = strtok_r(NULL, " \t\r\n", &save))
        words[n++] = t;
    return n;
}

bool wordvecs_answer_stdin(const emb_cli_command *cmd, const char *prompt,
                           int (*answer)(void *ctx, char *line), void *ctx) {
    const bool tty = isatty(STDIN_FILENO) == 1;
    bool ok = true;
    char *line = NULL;
    size_t cap = 0, len;
    while (emb_cli_read_query(stdin, prompt, &line, &cap, &len)) {
        int answered = answer(ctx, line);
        if (answered < 0) continue;
        ok = answered && ok;
        if (!tty) printf("\n");
        fflush(stdout);
    }
    free(line);
    if (tty) fprintf(stderr, "\n");
    if (ferror(stdin))
        ok = false, fprintf(stderr, "emb %s: error reading standard input\n", cmd->name);
    return ok;
}

int wordvecs_open_eval(const emb_cli_command *cmd, int argc, char **argv, int64_t restrict_default,
                       const char *restrict_aliases, const char *operands, emb_cli_args *args,
                       bool *case_sensitive, FILE **list, wordvecs *w) {
    int64_t restrict_rows = restrict_default, limit = 0;
    *case_sensitive = false;
    const emb_cli_option opts[] = {
        {"restrict", 0, restrict_aliases, EMB_CLI_INT, &restrict_rows, 0, INT64_MAX, 0, 0},
        {"limit", 0, NULL, EMB_CLI_INT, &limit, 1, INT64_MAX, 0, 0},
        {"case-sensitive", 0, NULL, EMB_CLI_FLAG, case_sensitive, 0, 0, 0, 0},
        {NULL, 0, NULL, EMB_CLI_FLAG, NULL, 0, 0, 0, 0},
    };
    int rc = emb_cli_parse(cmd, argc, argv, opts, args);
    if (rc >= 0) return rc;
    if ((rc = emb_cli_operands(cmd, args, 2, 2, operands)) >= 0) return rc;
    const char *path = args->v[1];
    FILE *f = strcmp(path, "-") == 0 ? stdin : fopen(path, "r");
    if (!f) return emb_cli_fail(cmd, "cannot open %s: %s", path, strerror(errno));
    rc = wordvecs_open(cmd, args->v[0], limit, restrict_rows, !*case_sensitive, w);
    if (rc >= 0) {
        if (f != stdin) fclose(f);
        return rc;
    }
    *list = f;
    return -1;
}

int wordvecs_parse_query(const emb_cli_command *cmd, int argc, char **argv, wordvecs_query *q,
                         emb_cli_args *args) {
    memset(q, 0, sizeof *q);
    q->cmd = cmd;
    q->k = 10;
    const emb_cli_option opts[] = {
        {"k", 'k', NULL, EMB_CLI_INT, &q->k, 1, 1000000, 0, 0},
        {"restrict", 0, "restrict-vocab", EMB_CLI_INT, &q->restrict_rows, 1, INT64_MAX, 0, 0},
        {"limit", 0, NULL, EMB_CLI_INT, &q->limit, 1, INT64_MAX, 0, 0},
        {"ignore-case", 'i', NULL, EMB_CLI_FLAG, &q->fold, 0, 0, 0, 0},
        {NULL, 0, NULL, EMB_CLI_FLAG, NULL, 0, 0, 0, 0},
    };
    return emb_cli_parse(cmd, argc, argv, opts, args);
}

int wordvecs_open_query(wordvecs_query *q, const char *path) {
    return wordvecs_open(q->cmd, path, q->limit, q->restrict_rows, q->fold, &q->w);
}

double wordvecs_cosine(const float *x, const float *y, int64_t d) {
    double xy = 0, xx = 0, yy = 0;
    for (int64_t i = 0; i < d; i++)
        xy += (double)x[i] * y[i], xx += (double)x[i] * x[i], yy += (double)y[i] * y[i];
    return xx > 0 && yy > 0 ? xy / sqrt(xx * yy) : 0.0;
}
