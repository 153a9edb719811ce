/* char_mlp: a character-level language model in the style of Bengio et al. (2003), "A
 * Neural Probabilistic Language Model", trained end to end with emb.
 *
 *   K context characters -> embedding lookup [K, D] -> concatenation [K*D]
 *     -> Linear(K*D, H) -> tanh -> Linear(H, V) -> cross-entropy with the next character
 *
 * The embedding table is updated through emb's sparse path (only the rows a minibatch
 * looked up change: the fused step by default, backward_sparse + step_sparse with
 * --unfused); the two Linear layers through dense optimizer steps. tanh and the
 * concatenation are this file's own code. The last ~10% of the text is held out for
 * validation. Losses are in nats per character, the unit of the unigram entropy printed
 * next to them: a model that beats the entropy has learnt something beyond character
 * frequencies.
 *
 *   char_mlp [--corpus FILE] [--context K] [--dim D] [--hidden H] [--epochs E]
 *            [--batch B] [--lr LR] [--optimizer sgd|adam|adagrad] [--max-chars N]
 *            [--seed S] [--sample N] [--threads T] [--unfused]
 *
 * Without --corpus the Moby-Dick corpus is fetched (once, into a cache) by
 * scripts/fetch-corpus.sh, found through $EMB_SOURCE_DIR or relative to this program or
 * the current directory. The text is modelled as UTF-8 characters (as bytes when it is not
 * valid UTF-8). Output is line-oriented on stdout: per epoch the training loss (the mean
 * over that epoch's minibatches, as they were trained) and the validation loss; at the
 * end both next to the unigram entropy, then a sample. A progress line goes to stderr
 * only when stderr is a terminal. Exit status: 0 success, 1 failure, 2 usage error.
 *
 * Defaults: on Moby-Dick (1.2 M characters, 89 distinct) the default run takes about a
 * minute on 2 cores and reaches a training loss near 1.58 and a validation loss near 1.62
 * nats/char, against a unigram entropy of 3.07. --threads defaults to 1: the matrices are
 * small, the time goes to OpenBLAS and to serial steps, and with OpenBLAS's own thread
 * pool running, extra OpenMP threads that spin while they wait make a run several times
 * slower on 2 cores (OMP_WAIT_POLICY=passive or OPENBLAS_NUM_THREADS=1 avoid that).
 * Results do not depend on --threads.
 */
#include <emb/emb.h>

#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define PROG           "char_mlp"
#define EVAL_BATCH     1024
#define MAX_CODE_POINT 0x10FFFF

/* ---------------------------------------------------------------------------------------
 * Options
 * ------------------------------------------------------------------------------------- */

typedef struct options {
    const char *corpus;
    int64_t context, dim, hidden, epochs, batch, max_chars, sample;
    double lr; /* 0: the optimizer's default below */
    const char *optimizer;
    uint64_t seed;
    int threads;
    int unfused;
} options;

static void usage(FILE *f) {
    fprintf(
        f, "usage: " PROG " [options]\n"
           "Trains a character-level MLP language model (Bengio et al. 2003) with emb.\n"
           "  --corpus FILE        training text (default: Moby-Dick via scripts/fetch-corpus.sh)\n"
           "  --context K          characters of context (default 8)\n"
           "  --dim D              embedding dimension (default 24)\n"
           "  --hidden H           hidden units (default 256)\n"
           "  --epochs E           passes over the training text (default 5)\n"
           "  --batch B            minibatch size (default 128)\n"
           "  --lr LR              learning rate (default: adagrad 0.05, adam 0.003, sgd 0.1)\n"
           "  --optimizer NAME     adagrad | adam | sgd (default adagrad; with adam the\n"
           "                       embedding uses SparseAdam, which takes sparse gradients)\n"
           "  --max-chars N        use only the first N characters (default 0: all)\n"
           "  --seed S             seed of initialisation, shuffling and sampling (default 1)\n"
           "  --sample N           characters to sample after training (default 300)\n"
           "  --threads T          emb threads (default 1; 0: all CPUs). The matrices are\n"
           "                       small, and more emb threads rarely help (see the top of\n"
           "                       char_mlp.c)\n"
           "  --unfused            embedding update by backward_sparse + step_sparse instead\n"
           "                       of the fused step (results are identical)\n"
           "  --help               this text\n");
}

static int usage_error(const char *fmt, const char *a, const char *b) {
    fprintf(stderr, PROG ": ");
    fprintf(stderr, fmt, a, b);
    fprintf(stderr, "\n(run '" PROG " --help' for the options)\n");
    return 2;
}

static int parse_i64(const char *opt, const char *s, int64_t lo, int64_t hi, int64_t *out) {
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (*s == '\0' || *end != '\0' || errno == ERANGE || v < lo || v > hi) {
        char range[96];
        if (hi == INT64_MAX)
            snprintf(range, sizeof range, "an integer >= %lld", (long long)lo);
        else
            snprintf(range, sizeof range, "an integer in [%lld, %lld]", (long long)lo,
                     (long long)hi);
        fprintf(stderr, PROG ": --%s: expected %s, got '%s'\n", opt, range, s);
        return -1;
    }
    *out = v;
    return 0;
}

/* Returns 0 to go on, or an exit status (0 after --help, 2 on a usage error). */
static int parse_args(int argc, char **argv, options *o, int *done) {
    enum {
        O_CORPUS = 1,
        O_CONTEXT,
        O_DIM,
        O_HIDDEN,
        O_EPOCHS,
        O_BATCH,
        O_LR,
        O_OPT,
        O_MAXC,
        O_SEED,
        O_SAMPLE,
        O_THREADS,
        O_UNFUSED,
        O_HELP
    };
    static const struct option longopts[] = {
        {"corpus", required_argument, NULL, O_CORPUS},
        {"context", required_argument, NULL, O_CONTEXT},
        {"dim", required_argument, NULL, O_DIM},
        {"hidden", required_argument, NULL, O_HIDDEN},
        {"epochs", required_argument, NULL, O_EPOCHS},
        {"batch", required_argument, NULL, O_BATCH},
        {"lr", required_argument, NULL, O_LR},
        {"optimizer", required_argument, NULL, O_OPT},
        {"max-chars", required_argument, NULL, O_MAXC},
        {"seed", required_argument, NULL, O_SEED},
        {"sample", required_argument, NULL, O_SAMPLE},
        {"threads", required_argument, NULL, O_THREADS},
        {"unfused", no_argument, NULL, O_UNFUSED},
        {"help", no_argument, NULL, O_HELP},
        {NULL, 0, NULL, 0},
    };
    *done = 0;
    opterr = 0;
    int c;
    int64_t v;
    while ((c = getopt_long_only(argc, argv, ":h", longopts, NULL)) != -1) {
        const char *arg = optarg;
        switch (c) {
        case O_CORPUS:
            o->corpus = arg;
            break;
        case O_CONTEXT:
            if (parse_i64("context", arg, 1, 1024, &o->context)) return 2;
            break;
        case O_DIM:
            if (parse_i64("dim", arg, 1, 65536, &o->dim)) return 2;
            break;
        case O_HIDDEN:
            if (parse_i64("hidden", arg, 1, 65536, &o->hidden)) return 2;
            break;
        case O_EPOCHS:
            if (parse_i64("epochs", arg, 1, 1000000, &o->epochs)) return 2;
            break;
        case O_BATCH:
            if (parse_i64("batch", arg, 1, 1 << 20, &o->batch)) return 2;
            break;
        case O_LR: {
            char *end;
            errno = 0;
            double lr = strtod(arg, &end);
            if (*arg == '\0' || *end != '\0' || errno == ERANGE || !(lr > 0) || !isfinite(lr)) {
                fprintf(stderr, PROG ": --lr: expected a positive number, got '%s'\n", arg);
                return 2;
            }
            o->lr = lr;
            break;
        }
        case O_OPT:
            if (strcmp(arg, "sgd") != 0 && strcmp(arg, "adam") != 0 && strcmp(arg, "adagrad") != 0)
                return usage_error("--optimizer: expected sgd, adam or adagrad, got '%s'%s", arg,
                                   "");
            o->optimizer = arg;
            break;
        case O_MAXC:
            if (parse_i64("max-chars", arg, 0, INT64_MAX, &o->max_chars)) return 2;
            break;
        case O_SEED: {
            char *end;
            errno = 0;
            unsigned long long s = strtoull(arg, &end, 10);
            if (*arg == '\0' || *arg == '-' || *end != '\0' || errno == ERANGE) {
                fprintf(stderr, PROG ": --seed: expected an integer in [0, 2^64), got '%s'\n", arg);
                return 2;
            }
            o->seed = s;
            break;
        }
        case O_SAMPLE:
            if (parse_i64("sample", arg, 0, 100000000, &o->sample)) return 2;
            break;
        case O_THREADS:
            if (parse_i64("threads", arg, 0, 4096, &v)) return 2;
            o->threads = (int)v;
            break;
        case O_UNFUSED:
            o->unfused = 1;
            break;
        case 'h':
        case O_HELP:
            usage(stdout);
            *done = 1;
            return 0;
        case ':':
            return usage_error("option '%s' needs a value%s", argv[optind - 1], "");
        default:
            return usage_error("unknown or ambiguous option '%s'%s", argv[optind - 1], "");
        }
    }
    if (optind < argc) return usage_error("unexpected argument '%s'%s", argv[optind], "");
    return 0;
}

/* ---------------------------------------------------------------------------------------
 * Small helpers
 * ------------------------------------------------------------------------------------- */

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Reports a failed emb call; returns nonzero when st is an error. */
static int failed(emb_status st, const char *what) {
    if (st == EMB_OK) return 0;
    fprintf(stderr, PROG ": %s failed: %s: %s\n", what, emb_status_str(st), emb_errmsg());
    return 1;
}

/* A view of contiguous memory (no validation: every caller passes a valid shape). */
static emb_tensor view(emb_dtype dtype, void *data, int ndim, int64_t d0, int64_t d1, int64_t d2) {
    emb_tensor t;
    memset(&t, 0, sizeof t);
    t.dtype = dtype;
    t.ndim = ndim;
    t.shape[0] = d0;
    t.shape[1] = d1;
    t.shape[2] = d2;
    t.data = data;
    return t;
}

static void *xcalloc(size_t n, size_t size) {
    void *p = calloc(n ? n : 1, size ? size : 1);
    if (!p) fprintf(stderr, PROG ": out of memory (%zu x %zu bytes)\n", n, size);
    return p;
}

/* A uniform integer in [0, n) from the generator, without modulo bias. */
static uint64_t draw_below(emb_generator *gen, uint64_t n) {
    uint64_t limit = UINT64_MAX - UINT64_MAX % n;
    uint64_t r;
    do r = emb_generator_random64(gen);
    while (r >= limit);
    return r % n;
}

/* A uniform double in [0, 1) with 53 random bits. */
static double draw_unit(emb_generator *gen) {
    return (double)(emb_generator_random64(gen) >> 11) * 0x1.0p-53;
}

/* ---------------------------------------------------------------------------------------
 * Text: read, decode, vocabulary
 * ------------------------------------------------------------------------------------- */

typedef struct text {
    int32_t *tok; /* [n] token ids in [0, vocab) */
    int64_t n;
    int32_t *symbols; /* [vocab] the code point (or byte) of each id, ascending */
    int64_t vocab;
    int bytes; /* 1: tokens are bytes (the file is not valid UTF-8) */
    int64_t nbytes;
} text;

static int read_file(const char *path, unsigned char **data, int64_t *size) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, PROG ": cannot open corpus '%s': %s\n", path, strerror(errno));
        return -1;
    }
    size_t cap = 1 << 20, len = 0;
    unsigned char *buf = malloc(cap);
    if (!buf) {
        fclose(f);
        fprintf(stderr, PROG ": out of memory reading '%s'\n", path);
        return -1;
    }
    for (;;) {
        if (len == cap) {
            unsigned char *nb = realloc(buf, cap * 2);
            if (!nb) {
                free(buf);
                fclose(f);
                fprintf(stderr, PROG ": out of memory reading '%s'\n", path);
                return -1;
            }
            buf = nb;
            cap *= 2;
        }
        size_t got = fread(buf + len, 1, cap - len, f);
        len += got;
        if (got == 0) break;
    }
    if (ferror(f)) {
        fprintf(stderr, PROG ": cannot read corpus '%s': %s\n", path, strerror(errno));
        free(buf);
        fclose(f);
        return -1;
    }
    fclose(f);
    *data = buf;
    *size = (int64_t)len;
    return 0;
}

/* Decodes one UTF-8 sequence at s[0..len); returns its length (1..4) and the code point,
 * or 0 when the bytes are not well-formed UTF-8 (overlong forms, surrogates and values
 * above U+10FFFF are rejected). */
static int utf8_decode(const unsigned char *s, int64_t len, int32_t *cp) {
    unsigned c = s[0];
    if (c < 0x80) {
        *cp = (int32_t)c;
        return 1;
    }
    int n;
    uint32_t v, min;
    if (c >= 0xC2 && c <= 0xDF)
        n = 2, v = c & 0x1F, min = 0x80;
    else if (c >= 0xE0 && c <= 0xEF)
        n = 3, v = c & 0x0F, min = 0x800;
    else if (c >= 0xF0 && c <= 0xF4)
        n = 4, v = c & 0x07, min = 0x10000;
    else
        return 0;
    if (len < n) return 0;
    for (int i = 1; i < n; i++) {
        if ((s[i] & 0xC0) != 0x80) return 0;
        v = (v << 6) | (s[i] & 0x3F);
    }
    if (v < min || v > MAX_CODE_POINT || (v >= 0xD800 && v <= 0xDFFF)) return 0;
    *cp = (int32_t)v;
    return n;
}

static int utf8_encode(int32_t cp, char out[4]) {
    uint32_t v = (uint32_t)cp;
    if (v < 0x80) {
        out[0] = (char)v;
        return 1;
    }
    if (v < 0x800) {
        out[0] = (char)(0xC0 | (v >> 6));
        out[1] = (char)(0x80 | (v & 0x3F));
        return 2;
    }
    if (v < 0x10000) {
        out[0] = (char)(0xE0 | (v >> 12));
        out[1] = (char)(0x80 | ((v >> 6) & 0x3F));
        out[2] = (char)(0x80 | (v & 0x3F));
        return 3;
    }
    out[0] = (char)(0xF0 | (v >> 18));
    out[1] = (char)(0x80 | ((v >> 12) & 0x3F));
    out[2] = (char)(0x80 | ((v >> 6) & 0x3F));
    out[3] = (char)(0x80 | (v & 0x3F));
    return 4;
}

/* Prints one symbol (a character, or a byte when the text is not UTF-8). Control
 * characters other than newline and tab are shown as U+XXXX. */
static void put_symbol(const text *t, int32_t id, FILE *f) {
    int32_t s = t->symbols[id];
    if (t->bytes) {
        if (s == '\n' || s == '\t' || (s >= 0x20 && s != 0x7F))
            fputc(s, f);
        else
            fprintf(f, "\\x%02X", (unsigned)s);
        return;
    }
    if ((s < 0x20 && s != '\n' && s != '\t') || s == 0x7F) {
        fprintf(f, "U+%04X", (unsigned)s);
        return;
    }
    char buf[4];
    fwrite(buf, 1, (size_t)utf8_encode(s, buf), f);
}

/* Reads the corpus, decodes UTF-8 (falling back to bytes), keeps the first max_chars
 * symbols (0: all) and builds the vocabulary: the distinct symbols in ascending order. */
static int load_text(const char *path, int64_t max_chars, text *t) {
    unsigned char *raw = NULL;
    int64_t size = 0;
    memset(t, 0, sizeof *t);
    if (read_file(path, &raw, &size)) return -1;
    t->nbytes = size;
    int32_t *cps = xcalloc((size_t)(size > 0 ? size : 1), sizeof *cps);
    if (!cps) {
        free(raw);
        return -1;
    }
    int64_t n = 0, bad_at = -1;
    for (int64_t i = 0; i < size;) {
        int32_t cp;
        int len = utf8_decode(raw + i, size - i, &cp);
        if (len == 0) {
            bad_at = i;
            break;
        }
        cps[n++] = cp;
        i += len;
    }
    if (bad_at >= 0) {
        fprintf(stdout, "note: '%s' is not valid UTF-8 (byte offset %lld); modelling bytes\n", path,
                (long long)bad_at);
        t->bytes = 1;
        for (int64_t i = 0; i < size; i++) cps[i] = raw[i];
        n = size;
    }
    free(raw);
    if (max_chars > 0 && n > max_chars) n = max_chars;

    int32_t *id_of = xcalloc(MAX_CODE_POINT + 1, sizeof *id_of);
    if (!id_of) {
        free(cps);
        return -1;
    }
    for (int64_t i = 0; i < n; i++) id_of[cps[i]] = 1;
    int64_t vocab = 0;
    for (int32_t c = 0; c <= MAX_CODE_POINT; c++)
        if (id_of[c]) vocab++;
    t->symbols = xcalloc((size_t)vocab, sizeof *t->symbols);
    if (!t->symbols) {
        free(id_of);
        free(cps);
        return -1;
    }
    vocab = 0;
    for (int32_t c = 0; c <= MAX_CODE_POINT; c++) {
        if (id_of[c]) {
            t->symbols[vocab] = c;
            id_of[c] = (int32_t)vocab++;
        }
    }
    for (int64_t i = 0; i < n; i++) cps[i] = id_of[cps[i]];
    free(id_of);
    t->tok = cps;
    t->n = n;
    t->vocab = vocab;
    return 0;
}

static void free_text(text *t) {
    free(t->tok);
    free(t->symbols);
}

/* Entropy (nats) of the symbol frequencies of tok[0..n). */
static double unigram_entropy(const int32_t *tok, int64_t n, int64_t vocab) {
    int64_t *count = calloc((size_t)vocab, sizeof *count);
    if (!count) return NAN;
    for (int64_t i = 0; i < n; i++) count[tok[i]]++;
    double h = 0;
    for (int64_t v = 0; v < vocab; v++) {
        if (count[v] == 0) continue;
        double p = (double)count[v] / (double)n;
        h -= p * log(p);
    }
    free(count);
    return h;
}

/* ---------------------------------------------------------------------------------------
 * Finding and running scripts/fetch-corpus.sh
 * ------------------------------------------------------------------------------------- */

static int is_file(const char *path) {
    return access(path, R_OK) == 0;
}

/* Fills `out` with the script's path; returns 0, or -1 after explaining what to do. */
static int find_fetch_script(char *out, size_t size) {
    const char *rel = "scripts/fetch-corpus.sh";
    const char *src = getenv("EMB_SOURCE_DIR");
    if (src && *src) {
        int w = snprintf(out, size, "%s/%s", src, rel);
        if (w > 0 && (size_t)w < size && is_file(out)) return 0;
        fprintf(
            stderr,
            PROG
            ": no corpus given and EMB_SOURCE_DIR=%s has no %s\n"
            "  set EMB_SOURCE_DIR to the emb source tree, or run\n"
            "  scripts/fetch-corpus.sh moby-dick and pass the path it prints with --corpus FILE\n",
            src, rel);
        return -1;
    }
    /* Relative to the executable (build/examples/char_mlp -> ../../scripts, ...), then to
     * the current directory. */
    char exe[4096];
    ssize_t len = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (len > 0) {
        exe[len] = '\0';
        char *slash = strrchr(exe, '/');
        if (slash) *slash = '\0';
        static const char *ups[] = {"/..", "/../..", "/../../.."};
        for (size_t i = 0; i < sizeof ups / sizeof ups[0]; i++) {
            int w = snprintf(out, size, "%s%s/%s", exe, ups[i], rel);
            if (w > 0 && (size_t)w < size && is_file(out)) return 0;
        }
    }
    static const char *cwd_rel[] = {"", "../", "../../"};
    for (size_t i = 0; i < sizeof cwd_rel / sizeof cwd_rel[0]; i++) {
        int w = snprintf(out, size, "%s%s", cwd_rel[i], rel);
        if (w > 0 && (size_t)w < size && is_file(out)) return 0;
    }
    fprintf(stderr, PROG
            ": no corpus given and scripts/fetch-corpus.sh was not found\n"
            "  set EMB_SOURCE_DIR to the emb source tree, or run\n"
            "  scripts/fetch-corpus.sh moby-dick (in the emb source tree) and pass the path it\n"
            "  prints with --corpus FILE\n");
    return -1;
}

/* Runs `bash script moby-dick` and captures the last line it prints (the text's path).
 * Its stderr passes through. */
static int fetch_default_corpus(char *path, size_t size) {
    char script[4096];
    if (find_fetch_script(script, sizeof script)) return -1;
    int fd[2];
    if (pipe(fd) != 0) {
        fprintf(stderr, PROG ": pipe: %s\n", strerror(errno));
        return -1;
    }
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0) {
        fprintf(stderr, PROG ": fork: %s\n", strerror(errno));
        close(fd[0]);
        close(fd[1]);
        return -1;
    }
    if (pid == 0) {
        close(fd[0]);
        if (dup2(fd[1], STDOUT_FILENO) < 0) _exit(127);
        close(fd[1]);
        execlp("bash", "bash", script, "moby-dick", (char *)NULL);
        fprintf(stderr, PROG ": cannot run bash %s: %s\n", script, strerror(errno));
        _exit(127);
    }
    close(fd[1]);
    char buf[8192];
    size_t len = 0;
    ssize_t got;
    while ((got = read(fd[0], buf + len, sizeof buf - 1 - len)) > 0 ||
           (got < 0 && errno == EINTR)) {
        if (got > 0) len += (size_t)got;
        if (len == sizeof buf - 1) { /* keep only the tail: the path is on the last line */
            memmove(buf, buf + len / 2, len - len / 2);
            len -= len / 2;
        }
    }
    close(fd[0]);
    buf[len] = '\0';
    int status = 0;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        fprintf(stderr,
                PROG ": %s moby-dick failed (exit status %d); "
                     "fix that, or pass a text file with --corpus FILE\n",
                script, WIFEXITED(status) ? WEXITSTATUS(status) : -1);
        return -1;
    }
    while (len > 0 && (buf[len - 1] == '\n' || buf[len - 1] == '\r')) buf[--len] = '\0';
    char *line = strrchr(buf, '\n');
    line = line ? line + 1 : buf;
    if (*line == '\0' || strlen(line) >= size) {
        fprintf(stderr, PROG ": %s moby-dick printed no usable path\n", script);
        return -1;
    }
    memcpy(path, line, strlen(line) + 1);
    return 0;
}

/* ---------------------------------------------------------------------------------------
 * The model
 * ------------------------------------------------------------------------------------- */

typedef struct model {
    int64_t K, D, H, V, KD;
    emb_embedding *emb;
    emb_linear *l1, *l2;
    emb_optimizer *opt_emb, *opt_dense;
    int pid_emb, pid_w1, pid_b1, pid_w2, pid_b2;
    /* Gradients of the dense parameters. */
    float *gw1, *gb1, *gw2, *gb2;
    emb_sparse_grad sgrad; /* --unfused only */
    int unfused;
    /* Work buffers for up to `cap` rows. */
    int64_t cap;
    int64_t *idx; /* [cap, K] context ids */
    int64_t *tgt; /* [cap] next-character ids */
    float *x;     /* [cap, K, D] lookups = [cap, K*D] concatenation */
    float *h;     /* [cap, H] tanh(Linear1) */
    float *z;     /* [cap, V] logits */
    float *gz;    /* [cap, V] */
    float *gh;    /* [cap, H] */
    float *gx;    /* [cap, K*D] = [cap, K, D] */
} model;

static void model_free(model *m) {
    emb_optimizer_free(m->opt_emb);
    emb_optimizer_free(m->opt_dense);
    emb_embedding_free(m->emb);
    emb_linear_free(m->l1);
    emb_linear_free(m->l2);
    emb_sparse_grad_release(&m->sgrad);
    free(m->gw1);
    free(m->gb1);
    free(m->gw2);
    free(m->gb2);
    free(m->idx);
    free(m->tgt);
    free(m->x);
    free(m->h);
    free(m->z);
    free(m->gz);
    free(m->gh);
    free(m->gx);
}

/* --lr, or the default of the optimizer (tuned on Moby-Dick with the default model). */
static double learning_rate(const options *o) {
    if (o->lr > 0) return o->lr;
    if (strcmp(o->optimizer, "sgd") == 0) return 0.1;
    if (strcmp(o->optimizer, "adam") == 0) return 0.003;
    return 0.05; /* adagrad */
}

static int model_init(model *m, const options *o, int64_t vocab, emb_generator *gen) {
    memset(m, 0, sizeof *m);
    m->K = o->context;
    m->D = o->dim;
    m->H = o->hidden;
    m->V = vocab;
    m->KD = o->context * o->dim;
    m->unfused = o->unfused;
    m->cap = o->batch > EVAL_BATCH ? o->batch : EVAL_BATCH;

    /* Parameters, initialised in PyTorch's order from one seeded generator. */
    emb_embedding_options eo = emb_embedding_options_default();
    eo.sparse = true;
    eo.generator = gen;
    if (failed(emb_embedding_create(m->V, m->D, &eo, &m->emb), "emb_embedding_create") ||
        failed(emb_linear_create(m->KD, m->H, true, gen, &m->l1), "emb_linear_create") ||
        failed(emb_linear_create(m->H, m->V, true, gen, &m->l2), "emb_linear_create"))
        return -1;

    /* Optimizers: the embedding gets sparse steps, the Linears dense ones. Adam cannot take
     * sparse gradients (as in PyTorch), so the table uses SparseAdam then. */
    emb_optimizer_kind dense_kind, sparse_kind;
    if (strcmp(o->optimizer, "sgd") == 0) {
        dense_kind = sparse_kind = EMB_OPTIMIZER_SGD;
    } else if (strcmp(o->optimizer, "adagrad") == 0) {
        dense_kind = sparse_kind = EMB_OPTIMIZER_ADAGRAD;
    } else {
        dense_kind = EMB_OPTIMIZER_ADAM;
        sparse_kind = EMB_OPTIMIZER_SPARSE_ADAM;
    }
    double lr = learning_rate(o);
    emb_optimizer_options od = emb_optimizer_options_default(dense_kind);
    emb_optimizer_options os = emb_optimizer_options_default(sparse_kind);
    od.lr = lr;
    os.lr = lr;
    if (failed(emb_optimizer_create(&od, &m->opt_dense), "emb_optimizer_create") ||
        failed(emb_optimizer_create(&os, &m->opt_emb), "emb_optimizer_create"))
        return -1;
    emb_tensor w;
    if (failed(emb_embedding_weight(m->emb, &w), "emb_embedding_weight") ||
        failed(emb_optimizer_add_param(m->opt_emb, &w, &m->pid_emb), "emb_optimizer_add_param") ||
        failed(emb_linear_weight(m->l1, &w), "emb_linear_weight") ||
        failed(emb_optimizer_add_param(m->opt_dense, &w, &m->pid_w1), "emb_optimizer_add_param") ||
        failed(emb_linear_bias(m->l1, &w), "emb_linear_bias") ||
        failed(emb_optimizer_add_param(m->opt_dense, &w, &m->pid_b1), "emb_optimizer_add_param") ||
        failed(emb_linear_weight(m->l2, &w), "emb_linear_weight") ||
        failed(emb_optimizer_add_param(m->opt_dense, &w, &m->pid_w2), "emb_optimizer_add_param") ||
        failed(emb_linear_bias(m->l2, &w), "emb_linear_bias") ||
        failed(emb_optimizer_add_param(m->opt_dense, &w, &m->pid_b2), "emb_optimizer_add_param"))
        return -1;
    if (m->unfused && failed(emb_sparse_grad_init(&m->sgrad, m->V, m->D), "emb_sparse_grad_init"))
        return -1;

    size_t cap = (size_t)m->cap;
    m->gw1 = xcalloc((size_t)(m->H * m->KD), sizeof(float));
    m->gb1 = xcalloc((size_t)m->H, sizeof(float));
    m->gw2 = xcalloc((size_t)(m->V * m->H), sizeof(float));
    m->gb2 = xcalloc((size_t)m->V, sizeof(float));
    m->idx = xcalloc(cap * (size_t)m->K, sizeof(int64_t));
    m->tgt = xcalloc(cap, sizeof(int64_t));
    m->x = xcalloc(cap * (size_t)m->KD, sizeof(float));
    m->h = xcalloc(cap * (size_t)m->H, sizeof(float));
    m->z = xcalloc(cap * (size_t)m->V, sizeof(float));
    m->gz = xcalloc(cap * (size_t)m->V, sizeof(float));
    m->gh = xcalloc(cap * (size_t)m->H, sizeof(float));
    m->gx = xcalloc(cap * (size_t)m->KD, sizeof(float));
    if (!m->gw1 || !m->gb1 || !m->gw2 || !m->gb2 || !m->idx || !m->tgt || !m->x || !m->h || !m->z ||
        !m->gz || !m->gh || !m->gx)
        return -1;
    return 0;
}

/* Fills idx/tgt for rows b = 0..B-1 predicting tok[pos[b]] from tok[pos[b]-K .. pos[b]-1]. */
static void gather(model *m, const int32_t *tok, const int64_t *pos, int64_t B) {
    for (int64_t b = 0; b < B; b++) {
        const int32_t *ctx = tok + pos[b] - m->K;
        for (int64_t k = 0; k < m->K; k++) m->idx[b * m->K + k] = ctx[k];
        m->tgt[b] = tok[pos[b]];
    }
}

/* Forward for B rows already gathered: leaves the lookups in x, tanh activations in h and
 * logits in z. */
static int forward(model *m, int64_t B) {
    emb_tensor idx = view(EMB_INT64, m->idx, 2, B, m->K, 0);
    emb_tensor x3 = view(EMB_FLOAT32, m->x, 3, B, m->K, m->D);
    if (failed(emb_embedding_forward(m->emb, &idx, &x3), "emb_embedding_forward")) return -1;
    /* Concatenation: the K looked-up rows of each example lie next to each other in
     * [B, K, D] row-major order, which is exactly the [B, K*D] concatenation, so it is a
     * reshape of the view, no copy. */
    emb_tensor x = view(EMB_FLOAT32, m->x, 2, B, m->KD, 0);
    emb_tensor h = view(EMB_FLOAT32, m->h, 2, B, m->H, 0);
    if (failed(emb_linear_forward(m->l1, &x, &h), "emb_linear_forward")) return -1;
    /* tanh forward, in place. */
    for (int64_t i = 0; i < B * m->H; i++) m->h[i] = tanhf(m->h[i]);
    emb_tensor z = view(EMB_FLOAT32, m->z, 2, B, m->V, 0);
    if (failed(emb_linear_forward(m->l2, &h, &z), "emb_linear_forward")) return -1;
    return 0;
}

/* Cross-entropy of the current logits against tgt with the given reduction. */
static int loss_of(model *m, int64_t B, emb_reduction reduction, float *loss) {
    emb_tensor z = view(EMB_FLOAT32, m->z, 2, B, m->V, 0);
    emb_tensor t = view(EMB_INT64, m->tgt, 1, B, 0, 0);
    emb_tensor l = view(EMB_FLOAT32, loss, 0, 0, 0, 0);
    emb_loss_options lo = emb_loss_options_default();
    lo.reduction = reduction;
    return failed(emb_cross_entropy_forward(&z, &t, &lo, &l), "emb_cross_entropy_forward") ? -1 : 0;
}

/* One training step on B gathered rows; *loss receives the minibatch's mean loss. */
static int train_step(model *m, int64_t B, float *loss) {
    if (forward(m, B) || loss_of(m, B, EMB_REDUCTION_MEAN, loss)) return -1;

    emb_tensor z = view(EMB_FLOAT32, m->z, 2, B, m->V, 0);
    emb_tensor t = view(EMB_INT64, m->tgt, 1, B, 0, 0);
    emb_tensor gz = view(EMB_FLOAT32, m->gz, 2, B, m->V, 0);
    float one = 1.0f;
    emb_tensor gl = view(EMB_FLOAT32, &one, 0, 0, 0, 0);
    if (failed(emb_cross_entropy_backward(&z, &t, NULL, &gl, &gz), "emb_cross_entropy_backward"))
        return -1;

    /* .grad = 0, then the Linear backwards accumulate into them. */
    memset(m->gw1, 0, (size_t)(m->H * m->KD) * sizeof(float));
    memset(m->gb1, 0, (size_t)m->H * sizeof(float));
    memset(m->gw2, 0, (size_t)(m->V * m->H) * sizeof(float));
    memset(m->gb2, 0, (size_t)m->V * sizeof(float));
    emb_tensor gw1 = view(EMB_FLOAT32, m->gw1, 2, m->H, m->KD, 0);
    emb_tensor gb1 = view(EMB_FLOAT32, m->gb1, 1, m->H, 0, 0);
    emb_tensor gw2 = view(EMB_FLOAT32, m->gw2, 2, m->V, m->H, 0);
    emb_tensor gb2 = view(EMB_FLOAT32, m->gb2, 1, m->V, 0, 0);

    emb_tensor h = view(EMB_FLOAT32, m->h, 2, B, m->H, 0);
    emb_tensor gh = view(EMB_FLOAT32, m->gh, 2, B, m->H, 0);
    if (failed(emb_linear_backward(m->l2, &h, &gz, &gh, &gw2, &gb2), "emb_linear_backward"))
        return -1;
    /* tanh backward: d tanh(a)/da = 1 - tanh(a)^2, from the saved output. */
    for (int64_t i = 0; i < B * m->H; i++) {
        float y = m->h[i];
        m->gh[i] = m->gh[i] * (1.0f - y * y);
    }
    emb_tensor x = view(EMB_FLOAT32, m->x, 2, B, m->KD, 0);
    emb_tensor gx = view(EMB_FLOAT32, m->gx, 2, B, m->KD, 0);
    if (failed(emb_linear_backward(m->l1, &x, &gh, &gx, &gw1, &gb1), "emb_linear_backward"))
        return -1;

    /* Dense steps for the Linears. */
    if (failed(emb_optimizer_step(m->opt_dense, m->pid_w1, &gw1), "emb_optimizer_step") ||
        failed(emb_optimizer_step(m->opt_dense, m->pid_b1, &gb1), "emb_optimizer_step") ||
        failed(emb_optimizer_step(m->opt_dense, m->pid_w2, &gw2), "emb_optimizer_step") ||
        failed(emb_optimizer_step(m->opt_dense, m->pid_b2, &gb2), "emb_optimizer_step"))
        return -1;

    /* Sparse step for the table: the gradient of the concatenation, split back into the K
     * looked-up rows per example (again a reshape), goes to exactly those rows. */
    emb_tensor idx = view(EMB_INT64, m->idx, 2, B, m->K, 0);
    emb_tensor gx3 = view(EMB_FLOAT32, m->gx, 3, B, m->K, m->D);
    if (m->unfused) {
        emb_sparse_grad_clear(&m->sgrad);
        if (failed(emb_embedding_backward_sparse(m->emb, &idx, &gx3, &m->sgrad),
                   "emb_embedding_backward_sparse") ||
            failed(emb_optimizer_step_sparse(m->opt_emb, m->pid_emb, &m->sgrad),
                   "emb_optimizer_step_sparse"))
            return -1;
    } else if (failed(emb_optimizer_step_fused(m->opt_emb, m->pid_emb, m->emb, &idx, &gx3),
                      "emb_optimizer_step_fused")) {
        return -1;
    }
    return 0;
}

/* Mean loss (nats/char) of predicting tok[t] for t in [from, to), in batches. */
static int evaluate(model *m, const int32_t *tok, int64_t from, int64_t to, double *mean) {
    int64_t pos[EVAL_BATCH];
    double sum = 0;
    for (int64_t s = from; s < to; s += EVAL_BATCH) {
        int64_t B = to - s < EVAL_BATCH ? to - s : EVAL_BATCH;
        for (int64_t b = 0; b < B; b++) pos[b] = s + b;
        gather(m, tok, pos, B);
        float l;
        if (forward(m, B) || loss_of(m, B, EMB_REDUCTION_SUM, &l)) return -1;
        sum += l;
    }
    *mean = sum / (double)(to - from);
    return 0;
}

/* Samples n symbols after the context tok[start-K .. start-1] at temperature 1. */
static int sample(model *m, const text *t, int64_t start, int64_t n, emb_generator *gen) {
    int64_t K = m->K;
    int32_t *ctx = xcalloc((size_t)K, sizeof *ctx);
    double *p = xcalloc((size_t)m->V, sizeof *p);
    if (!ctx || !p) {
        free(ctx);
        free(p);
        return -1;
    }
    memcpy(ctx, t->tok + start - K, (size_t)K * sizeof *ctx);
    printf("sample (%lld characters, temperature 1, after the context \"", (long long)n);
    for (int64_t k = 0; k < K; k++) put_symbol(t, ctx[k], stdout);
    printf("\"):\n");
    for (int64_t i = 0; i < n; i++) {
        for (int64_t k = 0; k < K; k++) m->idx[k] = ctx[k];
        if (forward(m, 1)) {
            free(ctx);
            free(p);
            return -1;
        }
        double mx = -INFINITY, total = 0;
        for (int64_t v = 0; v < m->V; v++)
            if (m->z[v] > mx) mx = m->z[v];
        for (int64_t v = 0; v < m->V; v++) total += p[v] = exp((double)m->z[v] - mx);
        double u = draw_unit(gen) * total;
        int64_t pick = m->V - 1;
        for (int64_t v = 0; v < m->V; v++) {
            if (u < p[v]) {
                pick = v;
                break;
            }
            u -= p[v];
        }
        put_symbol(t, (int32_t)pick, stdout);
        memmove(ctx, ctx + 1, (size_t)(K - 1) * sizeof *ctx);
        ctx[K - 1] = (int32_t)pick;
    }
    printf("\n");
    free(ctx);
    free(p);
    return 0;
}

/* ---------------------------------------------------------------------------------------
 * main
 * ------------------------------------------------------------------------------------- */

int main(int argc, char **argv) {
    options o = {
        .corpus = NULL,
        .context = 8,
        .dim = 24,
        .hidden = 256,
        .epochs = 5,
        .batch = 128,
        .max_chars = 0,
        .sample = 300,
        .lr = 0,
        .optimizer = "adagrad",
        .seed = 1,
        .threads = 1,
        .unfused = 0,
    };
    int done;
    int rc = parse_args(argc, argv, &o, &done);
    if (rc != 0 || done) return rc;

    char fetched[4096];
    if (!o.corpus) {
        if (fetch_default_corpus(fetched, sizeof fetched)) return 1;
        o.corpus = fetched;
    }

    text t;
    if (load_text(o.corpus, o.max_chars, &t)) return 1;
    const int64_t K = o.context;
    /* Targets: tok[K .. split) for training, tok[split .. n) for validation (whose contexts
     * may reach back into the training text; no target is shared). */
    int64_t split = t.n - t.n / 10;
    if (split - K < 1 || t.n - split < 1) {
        int64_t need = 10;
        while (need - need / 10 - K < 1) need++;
        fprintf(stderr,
                PROG ": corpus '%s' is too short: %lld %s leave no training or validation "
                     "example with --context %lld (need at least %lld)\n",
                o.corpus, (long long)t.n, t.bytes ? "bytes" : "characters", (long long)K,
                (long long)need);
        free_text(&t);
        return 1;
    }
    const int64_t n_train = split - K, n_valid = t.n - split;

    emb_set_num_threads(o.threads);
    emb_generator *gen = NULL;
    model m;
    memset(&m, 0, sizeof m);
    int64_t *order = NULL;
    rc = 1;
    if (failed(emb_generator_create(o.seed, &gen), "emb_generator_create")) goto out;
    if (model_init(&m, &o, t.vocab, gen)) goto out;
    order = xcalloc((size_t)n_train, sizeof *order);
    if (!order) goto out;

    double entropy = unigram_entropy(t.tok, split, t.vocab);
    int64_t n_params = t.vocab * o.dim + (m.KD + 1) * o.hidden + (o.hidden + 1) * t.vocab;
    printf("corpus %s: %lld bytes, %lld %s used\n", o.corpus, (long long)t.nbytes, (long long)t.n,
           t.bytes ? "bytes" : "characters");
    printf("vocabulary %lld %s\n", (long long)t.vocab, t.bytes ? "bytes" : "characters");
    printf("split %lld training targets, %lld validation targets (last 10%%)\n", (long long)n_train,
           (long long)n_valid);
    printf("model context %lld, dim %lld, hidden %lld: %lld parameters\n", (long long)K,
           (long long)o.dim, (long long)o.hidden, (long long)n_params);
    printf("training %s (lr %g; embedding: %s, %s), batch %lld, epochs %lld, seed %llu, "
           "threads %d\n",
           o.optimizer, learning_rate(&o),
           strcmp(o.optimizer, "adam") == 0 ? "sparseadam" : o.optimizer,
           o.unfused ? "backward_sparse + step_sparse" : "fused sparse step", (long long)o.batch,
           (long long)o.epochs, (unsigned long long)o.seed, emb_get_num_threads());
    printf("unigram entropy %.4f nats/char (training text)\n", entropy);
    fflush(stdout);

    const int tty = isatty(STDERR_FILENO);
    double train_loss = NAN, valid_loss = NAN;
    for (int64_t i = 0; i < n_train; i++) order[i] = K + i;
    for (int64_t ep = 1; ep <= o.epochs; ep++) {
        double t0 = now_s(), last_progress = -INFINITY; /* show the first batch at once */
        /* Fisher-Yates shuffle of the training targets from the seeded generator. */
        for (int64_t i = n_train - 1; i > 0; i--) {
            int64_t j = (int64_t)draw_below(gen, (uint64_t)i + 1);
            int64_t tmp = order[i];
            order[i] = order[j];
            order[j] = tmp;
        }
        double sum = 0;
        for (int64_t s = 0; s < n_train; s += o.batch) {
            int64_t B = n_train - s < o.batch ? n_train - s : o.batch;
            gather(&m, t.tok, order + s, B);
            float l;
            if (train_step(&m, B, &l)) goto out;
            if (!isfinite(l)) {
                fprintf(stderr, PROG ": the loss diverged (%g) in epoch %lld; try a smaller --lr\n",
                        (double)l, (long long)ep);
                goto out;
            }
            sum += (double)l * (double)B;
            double tn = now_s();
            if (tty && tn - last_progress > 0.25) {
                last_progress = tn;
                fprintf(stderr, "\repoch %lld/%lld  %5.1f%%  train %.4f  %.0f chars/s ",
                        (long long)ep, (long long)o.epochs,
                        100.0 * (double)(s + B) / (double)n_train, sum / (double)(s + B),
                        (double)(s + B) / (tn - t0));
                fflush(stderr);
            }
        }
        if (tty) fprintf(stderr, "\r%70s\r", "");
        train_loss = sum / (double)n_train;
        if (evaluate(&m, t.tok, split, t.n, &valid_loss)) goto out;
        printf("epoch %lld/%lld  train %.4f  valid %.4f  (%.1f s)\n", (long long)ep,
               (long long)o.epochs, train_loss, valid_loss, now_s() - t0);
        fflush(stdout);
    }
    printf("final  train %.4f  valid %.4f  unigram entropy %.4f nats/char\n", train_loss,
           valid_loss, entropy);
    if (o.sample > 0 && sample(&m, &t, split, o.sample, gen)) goto out;
    rc = 0;
out:
    fflush(stdout);
    free(order);
    model_free(&m);
    emb_generator_free(gen);
    free_text(&t);
    return rc;
}
