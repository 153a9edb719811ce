/* bow_classifier: a bag-of-words text classifier trained with emb.
 *
 *   the words of a passage -> EmbeddingBag(V, D, mode=mean) [D] -> Linear(D, C) -> logits
 *     -> cross-entropy with the passage's class
 *
 * The task: which era a passage of a State of the Union address comes from. The corpus has
 * one address per line, in chronological order; the addresses are split into C eras of
 * equal numbers of addresses (by default 3: roughly 1790-1860, 1860-1935, 1935 on), and
 * each address into passages of W words (lowercased runs of ASCII letters; a last passage
 * shorter than W/2 is dropped). Every fifth passage is held out. The vocabulary is the
 * words seen at least --min-count times in the training passages; other words are dropped
 * from their bags, so bags have different sizes (and may be empty).
 *
 * The bag is trained with SparseAdam (or sparse Adagrad, or SGD) on its sparse gradient, the
 * Linear layer with Adam; the bag update is the fused sparse step by default (no gradient
 * is materialised; --unfused: emb_bag_backward_sparse + emb_optimizer_step_sparse, same
 * bits). With --dtype f16 or bf16 the bag's table is stored in half precision (an
 * emb_qtable, include/emb/quant.h): pooled with emb_qtable_bag_forward and trained by SGD with
 * emb_qtable_sgd_step_bag, rounding the updated rows stochastically (default) or to
 * nearest (--rounding nearest); it starts from the float32 initialisation rounded to
 * nearest. Everything is PyTorch's: initialisation (torch.manual_seed(seed), then
 * nn.EmbeddingBag(V, D, mode='mean', sparse=True), then nn.Linear(D, C)), the layers, the
 * loss and the optimizers, so the whole run is PyTorch's bit for bit. With --dump DIR the
 * program writes the data set, the order in which it trained on it and the initial and
 * final parameters, so that the same run can be replayed in PyTorch
 * (tests/cli/test_bow_classifier.py does, and requires every parameter to be bit-identical
 * after 220 steps, at 1 and 2 threads).
 *
 *   bow_classifier [--corpus FILE] [--classes C] [--words W] [--min-count N] [--dim D]
 *                  [--batch B] [--epochs E] [--max-steps S] [--max-passages N] [--lr LR]
 *                  [--optimizer sparse_adam|adagrad|sgd] [--bag-lr LR] [--dtype f32|f16|bf16]
 *                  [--rounding stochastic|nearest] [--seed S] [--threads T] [--unfused]
 *                  [--dump DIR]
 *
 * Without --corpus the State of the Union corpus is fetched (once, into a cache) by
 * scripts/fetch-corpus.sh sotu. Output on stdout: the data set's sizes, then per epoch the
 * mean training loss and the held-out accuracy. Exit status: 0 success, 1 failure, 2 usage.
 */
#include <emb/emb.h>

#include <ctype.h>
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define PROG "bow_classifier"

typedef struct options {
    const char *corpus, *optimizer, *dump, *dtype, *rounding;
    int64_t classes, words, min_count, dim, batch, epochs, max_steps, max_passages;
    double lr, bag_lr; /* bag_lr 0: lr */
    uint64_t seed;
    int threads, unfused;
} options;

static void usage(FILE *f) {
    fprintf(f,
            "usage: " PROG " [options]\n"
            "Trains a bag-of-words classifier (EmbeddingBag mean -> Linear -> cross-entropy)\n"
            "that tells which era a State of the Union passage comes from.\n"
            "  --corpus FILE        one document per line, chronological (default: the State of\n"
            "                       the Union via scripts/fetch-corpus.sh sotu)\n"
            "  --classes C          eras: the documents split into C equal runs (default 3)\n"
            "  --words W            words per passage (default 64)\n"
            "  --min-count N        vocabulary: training words seen at least N times (default 5)\n"
            "  --dim D              embedding dimension (default 32)\n"
            "  --batch B            passages per step (default 32)\n"
            "  --epochs E           passes over the training passages (default 3)\n"
            "  --max-steps S        stop after S steps (default 0: no limit)\n"
            "  --max-passages N     use about N passages, evenly spread (default 0: all)\n"
            "  --lr LR              learning rate of both optimizers (default 0.01)\n"
            "  --optimizer NAME     sparse_adam | adagrad | sgd, for the bag (default\n"
            "                       sparse_adam); the Linear layer always uses Adam\n"
            "  --bag-lr LR          learning rate of the bag's optimizer (default: --lr)\n"
            "  --dtype T            f32 | f16 | bf16: how the bag's table is stored (default\n"
            "                       f32); f16 and bf16 train with --optimizer sgd\n"
            "  --rounding R         stochastic | nearest: how f16/bf16 rows are rounded after\n"
            "                       an update (default stochastic)\n"
            "  --seed S             torch.manual_seed of the initialisation and the shuffling\n"
            "                       seed (default 0)\n"
            "  --threads T          emb threads (default 1; 0: all CPUs); results do not\n"
            "                       depend on it\n"
            "  --unfused            bag update by backward_sparse + step_sparse instead of the\n"
            "                       fused step (same bits)\n"
            "  --dump DIR           write the data, the training order and the final\n"
            "                       parameters to DIR (for a replay in PyTorch)\n"
            "  --help               this text\n");
}

static int usage_error(const char *fmt, const char *a) {
    fprintf(stderr, PROG ": ");
    fprintf(stderr, fmt, a);
    fprintf(stderr, "\n(run '" PROG " --help' for the options)\n");
    return 2;
}

static int parse_i64(const char *opt, const char *s, int64_t lo, int64_t hi, int64_t *out) {
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (*s == '\0' || *end != '\0' || errno == ERANGE || v < lo || v > hi) {
        fprintf(stderr, PROG ": --%s: expected an integer in [%lld, %lld], got '%s'\n", opt,
                (long long)lo, (long long)hi, s);
        return -1;
    }
    *out = v;
    return 0;
}

static int parse_args(int argc, char **argv, options *o, int *done) {
    enum {
        O_CORPUS = 1,
        O_CLASSES,
        O_WORDS,
        O_MINC,
        O_DIM,
        O_BATCH,
        O_EPOCHS,
        O_STEPS,
        O_MAXP,
        O_LR,
        O_OPT,
        O_SEED,
        O_THREADS,
        O_UNFUSED,
        O_DUMP,
        O_HELP,
        O_BAGLR,
        O_DTYPE,
        O_ROUNDING
    };
    static const struct option longopts[] = {
        {"corpus", required_argument, NULL, O_CORPUS},
        {"classes", required_argument, NULL, O_CLASSES},
        {"words", required_argument, NULL, O_WORDS},
        {"min-count", required_argument, NULL, O_MINC},
        {"dim", required_argument, NULL, O_DIM},
        {"batch", required_argument, NULL, O_BATCH},
        {"epochs", required_argument, NULL, O_EPOCHS},
        {"max-steps", required_argument, NULL, O_STEPS},
        {"max-passages", required_argument, NULL, O_MAXP},
        {"lr", required_argument, NULL, O_LR},
        {"optimizer", required_argument, NULL, O_OPT},
        {"bag-lr", required_argument, NULL, O_BAGLR},
        {"dtype", required_argument, NULL, O_DTYPE},
        {"rounding", required_argument, NULL, O_ROUNDING},
        {"seed", required_argument, NULL, O_SEED},
        {"threads", required_argument, NULL, O_THREADS},
        {"unfused", no_argument, NULL, O_UNFUSED},
        {"dump", required_argument, NULL, O_DUMP},
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
        case O_CLASSES:
            if (parse_i64("classes", arg, 2, 1000, &o->classes)) return 2;
            break;
        case O_WORDS:
            if (parse_i64("words", arg, 1, 1 << 20, &o->words)) return 2;
            break;
        case O_MINC:
            if (parse_i64("min-count", arg, 1, INT32_MAX, &o->min_count)) return 2;
            break;
        case O_DIM:
            if (parse_i64("dim", arg, 1, 65536, &o->dim)) return 2;
            break;
        case O_BATCH:
            if (parse_i64("batch", arg, 1, 1 << 20, &o->batch)) return 2;
            break;
        case O_EPOCHS:
            if (parse_i64("epochs", arg, 1, 1000000, &o->epochs)) return 2;
            break;
        case O_STEPS:
            if (parse_i64("max-steps", arg, 0, INT64_MAX, &o->max_steps)) return 2;
            break;
        case O_MAXP:
            if (parse_i64("max-passages", arg, 0, INT64_MAX, &o->max_passages)) return 2;
            break;
        case O_LR:
        case O_BAGLR: {
            char *end;
            errno = 0;
            double lr = strtod(arg, &end);
            if (*arg == '\0' || *end != '\0' || errno == ERANGE || !(lr > 0) || !isfinite(lr)) {
                fprintf(stderr, PROG ": --%s: expected a positive number, got '%s'\n",
                        c == O_LR ? "lr" : "bag-lr", arg);
                return 2;
            }
            *(c == O_LR ? &o->lr : &o->bag_lr) = lr;
            break;
        }
        case O_OPT:
            if (strcmp(arg, "sparse_adam") != 0 && strcmp(arg, "adagrad") != 0 &&
                strcmp(arg, "sgd") != 0)
                return usage_error("--optimizer: expected sparse_adam, adagrad or sgd, got '%s'",
                                   arg);
            o->optimizer = arg;
            break;
        case O_DTYPE:
            if (strcmp(arg, "f32") != 0 && strcmp(arg, "f16") != 0 && strcmp(arg, "bf16") != 0)
                return usage_error("--dtype: expected f32, f16 or bf16, got '%s'", arg);
            o->dtype = arg;
            break;
        case O_ROUNDING:
            if (strcmp(arg, "stochastic") != 0 && strcmp(arg, "nearest") != 0)
                return usage_error("--rounding: expected stochastic or nearest, got '%s'", arg);
            o->rounding = arg;
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
        case O_THREADS:
            if (parse_i64("threads", arg, 0, 4096, &v)) return 2;
            o->threads = (int)v;
            break;
        case O_UNFUSED:
            o->unfused = 1;
            break;
        case O_DUMP:
            o->dump = arg;
            break;
        case 'h':
        case O_HELP:
            usage(stdout);
            *done = 1;
            return 0;
        case ':':
            return usage_error("option '%s' needs a value", argv[optind - 1]);
        default:
            return usage_error("unknown or ambiguous option '%s'", argv[optind - 1]);
        }
    }
    if (optind < argc) return usage_error("unexpected argument '%s'", argv[optind]);
    if (strcmp(o->dtype, "f32") != 0 && strcmp(o->optimizer, "sgd") != 0)
        return usage_error("--dtype %s: a half-precision table trains with --optimizer sgd",
                           o->dtype);
    if (strcmp(o->dtype, "f32") != 0 && o->dump)
        return usage_error("--dump replays float32 runs only (got --dtype %s)", o->dtype);
    return 0;
}

/* ---------------------------------------------------------------------------------------
 * Helpers
 * ------------------------------------------------------------------------------------- */

static int failed(emb_status st, const char *what) {
    if (st == EMB_OK) return 0;
    fprintf(stderr, PROG ": %s failed: %s: %s\n", what, emb_status_str(st), emb_errmsg());
    return 1;
}

static emb_tensor view(emb_dtype dtype, void *data, int ndim, int64_t d0, int64_t d1) {
    emb_tensor t;
    memset(&t, 0, sizeof t);
    t.dtype = dtype;
    t.ndim = ndim;
    t.shape[0] = d0;
    t.shape[1] = d1;
    t.data = data;
    return t;
}

static void *xmalloc(size_t n) {
    void *p = malloc(n ? n : 1);
    if (!p) fprintf(stderr, PROG ": out of memory (%zu bytes)\n", n);
    return p;
}

/* A growable int64 array. */
typedef struct vec {
    int64_t *v;
    int64_t n, cap;
} vec;

static int vec_push(vec *a, int64_t x) {
    if (a->n == a->cap) {
        int64_t cap = a->cap ? 2 * a->cap : 1024;
        int64_t *nv = realloc(a->v, (size_t)cap * sizeof *nv);
        if (!nv) {
            fprintf(stderr, PROG ": out of memory\n");
            return -1;
        }
        a->v = nv;
        a->cap = cap;
    }
    a->v[a->n++] = x;
    return 0;
}

/* splitmix64: the shuffling generator (separate from emb's, which initialises the model). */
static uint64_t splitmix64(uint64_t *s) {
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static int read_file(const char *path, char **data, int64_t *size) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, PROG ": cannot open corpus '%s': %s\n", path, strerror(errno));
        return -1;
    }
    size_t cap = 1 << 20, len = 0;
    char *buf = malloc(cap + 1);
    while (buf) {
        size_t got = fread(buf + len, 1, cap - len, f);
        len += got;
        if (len < cap) break;
        char *nb = realloc(buf, 2 * cap + 1);
        if (!nb) {
            free(buf);
            buf = NULL;
            break;
        }
        buf = nb;
        cap *= 2;
    }
    int err = ferror(f);
    fclose(f);
    if (!buf || err) {
        fprintf(stderr, PROG ": cannot read corpus '%s'%s\n", path, buf ? "" : ": out of memory");
        free(buf);
        return -1;
    }
    buf[len] = '\0';
    *data = buf;
    *size = (int64_t)len;
    return 0;
}

/* Finds scripts/fetch-corpus.sh ($EMB_SOURCE_DIR, next to the program, or the current
 * directory) and runs it for `name`, capturing the path it prints. */
static int fetch_corpus(const char *name, char *path, size_t size) {
    const char *rel = "scripts/fetch-corpus.sh";
    char script[4096] = "";
    const char *src = getenv("EMB_SOURCE_DIR");
    if (src && *src) {
        snprintf(script, sizeof script, "%s/%s", src, rel);
    } else {
        char exe[2048];
        ssize_t len = readlink("/proc/self/exe", exe, sizeof exe - 1);
        static const char *ups[] = {"/..", "/../..", "/../../.."};
        if (len > 0) {
            exe[len] = '\0';
            char *slash = strrchr(exe, '/');
            if (slash) *slash = '\0';
            for (size_t i = 0; i < 3; i++) {
                snprintf(script, sizeof script, "%s%s/%s", exe, ups[i], rel);
                if (access(script, R_OK) == 0) break;
                script[0] = '\0';
            }
        }
        if (!script[0] && access(rel, R_OK) == 0) snprintf(script, sizeof script, "%s", rel);
    }
    if (!script[0] || access(script, R_OK) != 0) {
        fprintf(stderr,
                PROG ": no corpus given and %s was not found; set EMB_SOURCE_DIR to "
                     "the emb source tree, or run scripts/fetch-corpus.sh %s and pass the path it "
                     "prints with --corpus FILE\n",
                rel, name);
        return -1;
    }
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
        execlp("bash", "bash", script, name, (char *)NULL);
        _exit(127);
    }
    close(fd[1]);
    char buf[8192];
    size_t len = 0;
    ssize_t got;
    while ((got = read(fd[0], buf + len, sizeof buf - 1 - len)) > 0 ||
           (got < 0 && errno == EINTR)) {
        if (got > 0) len += (size_t)got;
        if (len == sizeof buf - 1) {
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
        fprintf(stderr, PROG ": %s %s failed\n", script, name);
        return -1;
    }
    while (len > 0 && (buf[len - 1] == '\n' || buf[len - 1] == '\r')) buf[--len] = '\0';
    char *last = strrchr(buf, '\n');
    last = last ? last + 1 : buf;
    if (!*last || strlen(last) >= size) {
        fprintf(stderr, PROG ": %s %s printed no usable path\n", script, name);
        return -1;
    }
    strcpy(path, last);
    return 0;
}

/* ---------------------------------------------------------------------------------------
 * Data set: passages, labels, vocabulary
 * ------------------------------------------------------------------------------------- */

/* A word table: open addressing over (offset, length) into the corpus text. */
typedef struct words {
    const char *text;
    int64_t *off, *len, *count, *id; /* per slot; off < 0: empty */
    int64_t cap, n;
} words;

static uint64_t hash_word(const char *s, int64_t n) {
    uint64_t h = 1469598103934665603ull;
    for (int64_t i = 0; i < n; i++) h = (h ^ (unsigned char)s[i]) * 1099511628211ull;
    return h;
}

static int words_init(words *w, const char *text, int64_t cap) {
    memset(w, 0, sizeof *w);
    w->text = text;
    w->cap = cap;
    w->off = xmalloc((size_t)cap * sizeof(int64_t));
    w->len = xmalloc((size_t)cap * sizeof(int64_t));
    w->count = calloc((size_t)cap, sizeof(int64_t));
    w->id = xmalloc((size_t)cap * sizeof(int64_t));
    if (!w->off || !w->len || !w->count || !w->id) return -1;
    for (int64_t i = 0; i < cap; i++) w->off[i] = -1;
    return 0;
}

static void words_free(words *w) {
    free(w->off);
    free(w->len);
    free(w->count);
    free(w->id);
}

/* The slot of a word (inserted when absent; -1 when the table is full). */
static int64_t words_slot(words *w, int64_t off, int64_t len) {
    uint64_t h = hash_word(w->text + off, len) % (uint64_t)w->cap;
    for (int64_t probe = 0; probe < w->cap; probe++) {
        int64_t s = (int64_t)((h + (uint64_t)probe) % (uint64_t)w->cap);
        if (w->off[s] < 0) {
            w->off[s] = off;
            w->len[s] = len;
            w->n++;
            return s;
        }
        if (w->len[s] == len && memcmp(w->text + w->off[s], w->text + off, (size_t)len) == 0)
            return s;
    }
    return -1;
}

typedef struct dataset {
    int64_t n; /* passages */
    vec slots; /* word slots of every passage, concatenated */
    vec start; /* [n + 1] */
    vec label; /* [n] */
    int64_t documents;
} dataset;

static void dataset_free(dataset *d) {
    free(d->slots.v);
    free(d->start.v);
    free(d->label.v);
}

/* Lowercases the corpus in place and cuts it into passages of W words. */
static int build_passages(char *text, int64_t size, const options *o, words *w, dataset *d) {
    memset(d, 0, sizeof *d);
    for (int64_t i = 0; i < size; i++) text[i] = (char)tolower((unsigned char)text[i]);
    int64_t docs = 0;
    for (int64_t i = 0; i < size;) {
        int64_t e = i;
        while (e < size && text[e] != '\n') e++;
        int has = 0;
        for (int64_t k = i; k < e && !has; k++) has = text[k] >= 'a' && text[k] <= 'z';
        docs += has;
        i = e + 1;
    }
    d->documents = docs;
    if (docs < o->classes) {
        fprintf(stderr,
                PROG ": the corpus has %lld documents (non-empty lines), fewer than "
                     "the %lld classes\n",
                (long long)docs, (long long)o->classes);
        return -1;
    }
    if (vec_push(&d->start, 0)) return -1;
    int64_t doc = 0;
    for (int64_t i = 0; i < size;) {
        int64_t e = i;
        while (e < size && text[e] != '\n') e++;
        int64_t in_passage = 0, first = d->slots.n;
        int any = 0;
        for (int64_t k = i; k < e;) {
            if (!(text[k] >= 'a' && text[k] <= 'z')) {
                k++;
                continue;
            }
            int64_t b = k;
            while (k < e && text[k] >= 'a' && text[k] <= 'z') k++;
            int64_t s = words_slot(w, b, k - b);
            if (s < 0) {
                fprintf(stderr, PROG ": too many distinct words\n");
                return -1;
            }
            any = 1;
            if (vec_push(&d->slots, s)) return -1;
            if (++in_passage == o->words) {
                if (vec_push(&d->start, d->slots.n) || vec_push(&d->label, doc * o->classes / docs))
                    return -1;
                in_passage = 0;
                first = d->slots.n;
            }
        }
        if (in_passage * 2 >= o->words && in_passage > 0) {
            if (vec_push(&d->start, d->slots.n) || vec_push(&d->label, doc * o->classes / docs))
                return -1;
        } else {
            d->slots.n = first; /* drop a short tail */
        }
        doc += any;
        i = e + 1;
    }
    d->n = d->label.n;
    return 0;
}

static int cmp_vocab_slot(const void *a, const void *b, void *ctx);
static words *g_words; /* for qsort's comparator */

static int cmp_slot(const void *a, const void *b) {
    return cmp_vocab_slot(a, b, g_words);
}

/* By count descending, then the word's bytes ascending. */
static int cmp_vocab_slot(const void *a, const void *b, void *ctx) {
    const words *w = ctx;
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    if (w->count[x] != w->count[y]) return w->count[x] > w->count[y] ? -1 : 1;
    int64_t n = w->len[x] < w->len[y] ? w->len[x] : w->len[y];
    int c = memcmp(w->text + w->off[x], w->text + w->off[y], (size_t)n);
    if (c) return c;
    return (w->len[x] > w->len[y]) - (w->len[x] < w->len[y]);
}

/* ---------------------------------------------------------------------------------------
 * Model and training
 * ------------------------------------------------------------------------------------- */

typedef struct split {
    int64_t n;
    vec ids;   /* word ids, concatenated */
    vec start; /* [n + 1] */
    vec label;
} split;

static void split_free(split *s) {
    free(s->ids.v);
    free(s->start.v);
    free(s->label.v);
}

typedef struct model {
    int64_t V, D, C;
    emb_bag *bag;
    emb_qtable *qt;     /* --dtype f16/bf16: the bag's table, trained in place of bag's */
    emb_generator *gen; /* stochastic rounding */
    emb_qround rounding;
    float bag_lr;
    emb_linear *lin;
    emb_optimizer *opt_bag, *opt_lin;
    int id_bag, id_w, id_b;
    float *h, *logits, *grad_logits, *grad_h, *grad_w, *grad_b;
} model;

static void model_free(model *m) {
    emb_bag_free(m->bag);
    emb_qtable_free(m->qt);
    emb_generator_free(m->gen);
    emb_linear_free(m->lin);
    emb_optimizer_free(m->opt_bag);
    emb_optimizer_free(m->opt_lin);
    free(m->h);
    free(m->logits);
    free(m->grad_logits);
    free(m->grad_h);
    free(m->grad_w);
    free(m->grad_b);
}

static int model_init(model *m, const options *o, int64_t V, int64_t B) {
    memset(m, 0, sizeof *m);
    m->V = V;
    m->D = o->dim;
    m->C = o->classes;
    emb_manual_seed(o->seed);
    emb_bag_options bo = emb_bag_options_default();
    bo.mode = EMB_BAG_MEAN;
    bo.sparse = true;
    if (failed(emb_bag_create(V, m->D, &bo, &m->bag), "emb_bag_create")) return -1;
    if (failed(emb_linear_create(m->D, m->C, true, NULL, &m->lin), "emb_linear_create")) return -1;
    emb_optimizer_options sa = emb_optimizer_options_default(
        strcmp(o->optimizer, "adagrad") == 0 ? EMB_OPTIMIZER_ADAGRAD
        : strcmp(o->optimizer, "sgd") == 0   ? EMB_OPTIMIZER_SGD
                                             : EMB_OPTIMIZER_SPARSE_ADAM);
    sa.lr = o->bag_lr > 0 ? o->bag_lr : o->lr;
    m->bag_lr = (float)sa.lr;
    emb_optimizer_options ad = emb_optimizer_options_default(EMB_OPTIMIZER_ADAM);
    ad.lr = o->lr;
    if (failed(emb_optimizer_create(&sa, &m->opt_bag), "emb_optimizer_create") ||
        failed(emb_optimizer_create(&ad, &m->opt_lin), "emb_optimizer_create"))
        return -1;
    emb_tensor w, lw, lb;
    if (failed(emb_bag_weight(m->bag, &w), "emb_bag_weight") ||
        failed(emb_linear_weight(m->lin, &lw), "emb_linear_weight") ||
        failed(emb_linear_bias(m->lin, &lb), "emb_linear_bias") ||
        failed(emb_optimizer_add_param(m->opt_bag, &w, &m->id_bag), "add_param") ||
        failed(emb_optimizer_add_param(m->opt_lin, &lw, &m->id_w), "add_param") ||
        failed(emb_optimizer_add_param(m->opt_lin, &lb, &m->id_b), "add_param"))
        return -1;
    if (strcmp(o->dtype, "f32") != 0) {
        emb_qtype qt;
        m->rounding =
            strcmp(o->rounding, "nearest") == 0 ? EMB_QROUND_NEAREST : EMB_QROUND_STOCHASTIC;
        if (failed(emb_qtype_parse(o->dtype, &qt), "emb_qtype_parse") ||
            failed(emb_qtable_quantize(&w, qt, &m->qt), "emb_qtable_quantize") ||
            failed(emb_generator_create(o->seed, &m->gen), "emb_generator_create"))
            return -1;
    }
    m->h = xmalloc((size_t)(B * m->D) * sizeof(float));
    m->grad_h = xmalloc((size_t)(B * m->D) * sizeof(float));
    m->logits = xmalloc((size_t)(B * m->C) * sizeof(float));
    m->grad_logits = xmalloc((size_t)(B * m->C) * sizeof(float));
    m->grad_w = xmalloc((size_t)(m->C * m->D) * sizeof(float));
    m->grad_b = xmalloc((size_t)m->C * sizeof(float));
    if (!m->h || !m->grad_h || !m->logits || !m->grad_logits || !m->grad_w || !m->grad_b) return -1;
    return 0;
}

/* Logits of B passages given as ids/offsets. */
static int forward(model *m, emb_tensor *in, emb_tensor *off, int64_t B) {
    emb_tensor h = view(EMB_FLOAT32, m->h, 2, B, m->D);
    emb_tensor lg = view(EMB_FLOAT32, m->logits, 2, B, m->C);
    if (m->qt) {
        emb_bag_options bo = emb_bag_options_default();
        bo.mode = EMB_BAG_MEAN;
        if (failed(emb_qtable_bag_forward(m->qt, in, off, NULL, &bo, &h, NULL),
                   "emb_qtable_bag_forward"))
            return -1;
    } else if (failed(emb_bag_forward(m->bag, in, off, NULL, &h, NULL), "emb_bag_forward")) {
        return -1;
    }
    if (failed(emb_linear_forward(m->lin, &h, &lg), "emb_linear_forward")) return -1;
    return 0;
}

static int train_step(model *m, const options *o, emb_tensor *in, emb_tensor *off, int64_t *labels,
                      int64_t B, emb_sparse_grad *sg, float *loss) {
    if (forward(m, in, off, B)) return -1;
    emb_tensor lg = view(EMB_FLOAT32, m->logits, 2, B, m->C);
    emb_tensor y = view(EMB_INT64, labels, 1, B, 0);
    emb_tensor l = view(EMB_FLOAT32, loss, 0, 0, 0);
    float one = 1.0f;
    emb_tensor gl = view(EMB_FLOAT32, &one, 0, 0, 0);
    emb_tensor glg = view(EMB_FLOAT32, m->grad_logits, 2, B, m->C);
    emb_tensor h = view(EMB_FLOAT32, m->h, 2, B, m->D);
    emb_tensor gh = view(EMB_FLOAT32, m->grad_h, 2, B, m->D);
    emb_tensor gw = view(EMB_FLOAT32, m->grad_w, 2, m->C, m->D);
    emb_tensor gb = view(EMB_FLOAT32, m->grad_b, 1, m->C, 0);
    memset(m->grad_w, 0, (size_t)(m->C * m->D) * sizeof(float));
    memset(m->grad_b, 0, (size_t)m->C * sizeof(float));
    if (failed(emb_cross_entropy_forward(&lg, &y, NULL, &l), "cross_entropy_forward") ||
        failed(emb_cross_entropy_backward(&lg, &y, NULL, &gl, &glg), "cross_entropy_backward") ||
        failed(emb_linear_backward(m->lin, &h, &glg, &gh, &gw, &gb), "emb_linear_backward"))
        return -1;
    if (m->qt) {
        emb_bag_options bo = emb_bag_options_default();
        bo.mode = EMB_BAG_MEAN;
        emb_sparse_grad_clear(sg);
        if (o->unfused ? failed(emb_qtable_bag_backward_sparse(m->qt, in, off, NULL, &bo, &gh, sg),
                                "emb_qtable_bag_backward_sparse") ||
                             failed(emb_qtable_sgd_step(m->qt, sg, m->bag_lr, m->rounding, m->gen),
                                    "emb_qtable_sgd_step")
                       : failed(emb_qtable_sgd_step_bag(m->qt, in, off, NULL, &bo, &gh, m->bag_lr,
                                                        m->rounding, m->gen),
                                "emb_qtable_sgd_step_bag"))
            return -1;
    } else if (o->unfused) {
        emb_sparse_grad_clear(sg);
        if (failed(emb_bag_backward_sparse(m->bag, in, off, NULL, &gh, sg), "backward_sparse") ||
            failed(emb_optimizer_step_sparse(m->opt_bag, m->id_bag, sg), "step_sparse"))
            return -1;
    } else {
        if (failed(emb_optimizer_step_fused_bag(m->opt_bag, m->id_bag, m->bag, in, off, NULL, &gh),
                   "emb_optimizer_step_fused_bag"))
            return -1;
    }
    if (failed(emb_optimizer_step(m->opt_lin, m->id_w, &gw), "step (Linear weight)") ||
        failed(emb_optimizer_step(m->opt_lin, m->id_b, &gb), "step (Linear bias)"))
        return -1;
    return 0;
}

/* Held-out accuracy, in batches of up to `cap` passages. */
static int accuracy(model *m, const split *s, int64_t cap, double *acc) {
    int64_t right = 0;
    for (int64_t b0 = 0; b0 < s->n; b0 += cap) {
        int64_t B = s->n - b0 < cap ? s->n - b0 : cap;
        int64_t first = s->start.v[b0];
        int64_t n = s->start.v[b0 + B] - first;
        int64_t *off = xmalloc((size_t)B * sizeof(int64_t));
        if (!off) return -1;
        for (int64_t i = 0; i < B; i++) off[i] = s->start.v[b0 + i] - first;
        emb_tensor in = view(EMB_INT64, s->ids.v + first, 1, n, 0);
        emb_tensor ot = view(EMB_INT64, off, 1, B, 0);
        int bad = forward(m, &in, &ot, B);
        free(off);
        if (bad) return -1;
        for (int64_t i = 0; i < B; i++) {
            const float *r = m->logits + i * m->C;
            int64_t best = 0;
            for (int64_t c = 1; c < m->C; c++)
                if (r[c] > r[best]) best = c;
            right += best == s->label.v[b0 + i];
        }
    }
    *acc = s->n ? (double)right / (double)s->n : 0.0;
    return 0;
}

static int write_raw(const char *dir, const char *name, const void *p, size_t bytes) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    if (!f || (bytes && fwrite(p, 1, bytes, f) != bytes) || fclose(f) != 0) {
        fprintf(stderr, PROG ": cannot write '%s': %s\n", path, strerror(errno));
        return -1;
    }
    return 0;
}

int main(int argc, char **argv) {
    options o = {
        NULL, "sparse_adam", NULL, "f32", "stochastic", 3, 64, 5, 32, 32, 3, 0, 0, 0.01, 0, 0, 1,
        0};
    int done = 0;
    int rc = parse_args(argc, argv, &o, &done);
    if (rc || done) return rc;
    emb_set_num_threads(o.threads);

    char fetched[4096];
    if (!o.corpus) {
        if (fetch_corpus("sotu", fetched, sizeof fetched)) return 1;
        o.corpus = fetched;
    }
    char *text = NULL;
    int64_t size = 0;
    if (read_file(o.corpus, &text, &size)) return 1;
    int status = 1;
    words w;
    dataset d;
    split tr, te;
    model m;
    memset(&d, 0, sizeof d);
    memset(&tr, 0, sizeof tr);
    memset(&te, 0, sizeof te);
    memset(&m, 0, sizeof m);
    int64_t *order = NULL, *batch_ids = NULL, *batch_off = NULL, *batch_lab = NULL;
    vec trained = {0};
    emb_sparse_grad sg;
    emb_sparse_grad_init(&sg, 0, 0);
    if (words_init(&w, text, size / 2 + 1024)) goto out;
    if (build_passages(text, size, &o, &w, &d)) goto out;
    /* keep about max_passages, evenly spread; every fifth kept passage is held out */
    int64_t stride = 1;
    if (o.max_passages > 0 && d.n > o.max_passages)
        stride = (d.n + o.max_passages - 1) / o.max_passages;
    for (int pass = 0; pass < 2; pass++) {
        int64_t kept = 0;
        for (int64_t p = 0; p < d.n; p += stride, kept++) {
            if ((kept % 5 == 4) != (pass == 1)) continue;
            if (pass == 0)
                for (int64_t k = d.start.v[p]; k < d.start.v[p + 1]; k++) w.count[d.slots.v[k]]++;
        }
    }
    /* the vocabulary: training words seen at least min_count times, by count, then bytes */
    int64_t nv = 0;
    int64_t *vocab = xmalloc((size_t)w.cap * sizeof(int64_t));
    if (!vocab) goto out;
    for (int64_t s = 0; s < w.cap; s++) {
        w.id[s] = -1;
        if (w.off[s] >= 0 && w.count[s] >= o.min_count) vocab[nv++] = s;
    }
    g_words = &w;
    qsort(vocab, (size_t)nv, sizeof *vocab, cmp_slot);
    for (int64_t i = 0; i < nv; i++) w.id[vocab[i]] = i;
    free(vocab);
    if (nv == 0) {
        fprintf(stderr, PROG ": no word occurs %lld times in the training passages\n",
                (long long)o.min_count);
        goto out;
    }
    {
        int64_t kept = 0;
        for (int64_t p = 0; p < d.n; p += stride, kept++) {
            split *s = kept % 5 == 4 ? &te : &tr;
            if (s->start.n == 0 && vec_push(&s->start, 0)) goto out;
            for (int64_t k = d.start.v[p]; k < d.start.v[p + 1]; k++) {
                int64_t id = w.id[d.slots.v[k]];
                if (id >= 0 && vec_push(&s->ids, id)) goto out;
            }
            if (vec_push(&s->start, s->ids.n) || vec_push(&s->label, d.label.v[p])) goto out;
            s->n++;
        }
    }
    if (tr.n < o.batch) {
        fprintf(stderr, PROG ": %lld training passages, fewer than one batch of %lld\n",
                (long long)tr.n, (long long)o.batch);
        goto out;
    }
    printf("corpus %s: %lld documents, %lld passages of %lld words in %lld eras; "
           "%lld training, %lld held out; vocabulary %lld words\n",
           o.corpus, (long long)d.documents, (long long)(tr.n + te.n), (long long)o.words,
           (long long)o.classes, (long long)tr.n, (long long)te.n, (long long)nv);

    const int64_t B = o.batch;
    if (model_init(&m, &o, nv, te.n > B ? te.n : B)) goto out;
    if (o.dump) {
        emb_tensor bw, lw, lb;
        if (mkdir(o.dump, 0777) != 0 && errno != EEXIST) {
            fprintf(stderr, PROG ": cannot create '%s': %s\n", o.dump, strerror(errno));
            goto out;
        }
        if (failed(emb_bag_weight(m.bag, &bw), "emb_bag_weight") ||
            failed(emb_linear_weight(m.lin, &lw), "emb_linear_weight") ||
            failed(emb_linear_bias(m.lin, &lb), "emb_linear_bias") ||
            write_raw(o.dump, "init_bag.f32", bw.data, emb_tensor_nbytes(&bw)) ||
            write_raw(o.dump, "init_linear_weight.f32", lw.data, emb_tensor_nbytes(&lw)) ||
            write_raw(o.dump, "init_linear_bias.f32", lb.data, emb_tensor_nbytes(&lb)))
            goto out;
    }
    emb_sparse_grad_release(&sg);
    if (failed(emb_sparse_grad_init(&sg, nv, o.dim), "emb_sparse_grad_init")) goto out;
    order = xmalloc((size_t)tr.n * sizeof(int64_t));
    batch_off = xmalloc((size_t)B * sizeof(int64_t));
    batch_lab = xmalloc((size_t)B * sizeof(int64_t));
    int64_t max_len = 0;
    for (int64_t i = 0; i < tr.n; i++)
        if (tr.start.v[i + 1] - tr.start.v[i] > max_len)
            max_len = tr.start.v[i + 1] - tr.start.v[i];
    batch_ids = xmalloc((size_t)(B * max_len) * sizeof(int64_t));
    if (!order || !batch_off || !batch_lab || !batch_ids) goto out;
    uint64_t rng = o.seed;
    int64_t steps = 0;
    for (int64_t ep = 0; ep < o.epochs && (o.max_steps == 0 || steps < o.max_steps); ep++) {
        for (int64_t i = 0; i < tr.n; i++) order[i] = i;
        for (int64_t i = tr.n - 1; i > 0; i--) { /* Fisher-Yates */
            int64_t j = (int64_t)(splitmix64(&rng) % (uint64_t)(i + 1));
            int64_t t = order[i];
            order[i] = order[j];
            order[j] = t;
        }
        double sum = 0;
        int64_t nb = 0;
        for (int64_t b0 = 0; b0 + B <= tr.n && (o.max_steps == 0 || steps < o.max_steps); b0 += B) {
            int64_t n = 0;
            for (int64_t i = 0; i < B; i++) {
                int64_t p = order[b0 + i];
                batch_off[i] = n;
                batch_lab[i] = tr.label.v[p];
                for (int64_t k = tr.start.v[p]; k < tr.start.v[p + 1]; k++)
                    batch_ids[n++] = tr.ids.v[k];
                if (vec_push(&trained, p)) goto out;
            }
            emb_tensor in = view(EMB_INT64, batch_ids, 1, n, 0);
            emb_tensor ot = view(EMB_INT64, batch_off, 1, B, 0);
            float loss = 0;
            if (train_step(&m, &o, &in, &ot, batch_lab, B, &sg, &loss)) goto out;
            sum += loss;
            nb++;
            steps++;
        }
        double acc = 0;
        if (accuracy(&m, &te, te.n > B ? te.n : B, &acc)) goto out;
        printf("epoch %lld/%lld  steps %lld  train loss %.4f  held-out accuracy %.4f (%lld "
               "passages)\n",
               (long long)(ep + 1), (long long)o.epochs, (long long)steps,
               nb ? sum / (double)nb : NAN, acc, (long long)te.n);
        fflush(stdout);
    }
    if (o.dump) {
        char meta[512];
        int len = snprintf(meta, sizeof meta,
                           "vocab %lld\ndim %lld\nclasses %lld\nbatch %lld\nsteps %lld\n"
                           "lr %.17g\nbag_lr %.17g\noptimizer %s\nseed %llu\ntrain %lld\n",
                           (long long)nv, (long long)o.dim, (long long)o.classes, (long long)B,
                           (long long)steps, o.lr, o.bag_lr > 0 ? o.bag_lr : o.lr, o.optimizer,
                           (unsigned long long)o.seed, (long long)tr.n);
        emb_tensor bw, lw, lb;
        if (failed(emb_bag_weight(m.bag, &bw), "emb_bag_weight") ||
            failed(emb_linear_weight(m.lin, &lw), "emb_linear_weight") ||
            failed(emb_linear_bias(m.lin, &lb), "emb_linear_bias"))
            goto out;
        if (write_raw(o.dump, "meta.txt", meta, (size_t)len) ||
            write_raw(o.dump, "train_ids.i64", tr.ids.v, (size_t)tr.ids.n * 8) ||
            write_raw(o.dump, "train_start.i64", tr.start.v, (size_t)tr.start.n * 8) ||
            write_raw(o.dump, "train_label.i64", tr.label.v, (size_t)tr.label.n * 8) ||
            write_raw(o.dump, "order.i64", trained.v, (size_t)trained.n * 8) ||
            write_raw(o.dump, "bag.f32", bw.data, emb_tensor_nbytes(&bw)) ||
            write_raw(o.dump, "linear_weight.f32", lw.data, emb_tensor_nbytes(&lw)) ||
            write_raw(o.dump, "linear_bias.f32", lb.data, emb_tensor_nbytes(&lb)))
            goto out;
    }
    status = 0;
out:
    model_free(&m);
    emb_sparse_grad_release(&sg);
    free(order);
    free(batch_ids);
    free(batch_off);
    free(batch_lab);
    free(trained.v);
    split_free(&tr);
    split_free(&te);
    dataset_free(&d);
    words_free(&w);
    free(text);
    return status;
}
