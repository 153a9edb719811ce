/* emb train: learn word vectors from raw text (skip-gram or CBOW with negative sampling).
 * A thin layer over include/emb/word2vec.h: parse options, train with a progress display,
 * checkpoint on request, write the vectors in the format the output name asks for. */
#include "cli.h"
#include "train_mpi.h"
#include "train_output.h"

#include <emb/emb.h>
#include <emb/io.h>

#include <errno.h>
#include <libgen.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

typedef struct {
    emb_w2v *w;
    bool tty, quiet;
    double last_print, last_ckpt, every;
    const char *ckpt;
    int ckpt_failed;
    bool ckpt_written;
    int64_t done0; /* words done before this run (a resumed run): not counted in its speed */
    int epochs;
    char ckpt_msg[1024]; /* why a checkpoint could not be written */
} train_ui;

static double wall(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void fmt_eta(char *buf, size_t n, double s) {
    if (!isfinite(s) || s < 0) s = 0;
    long t = (long)(s + 0.5);
    snprintf(buf, n, "%ld:%02ld:%02ld", t / 3600, t / 60 % 60, t % 60);
}

static int on_progress(const emb_w2v_progress *p, void *user) {
    train_ui *ui = user;
    double now = wall();
    if (ui->ckpt && ui->every > 0 && now - ui->last_ckpt >= ui->every &&
        p->words_done < p->words_total) {
        if (emb_w2v_save_checkpoint(ui->w, ui->ckpt) != EMB_OK) {
            /* kept: the trainer's "cancelled" replaces the library's message */
            snprintf(ui->ckpt_msg, sizeof ui->ckpt_msg, "%s", emb_errmsg());
            ui->ckpt_failed = 1;
            return 1;
        }
        ui->ckpt_written = true;
        ui->last_ckpt = now;
    }
    if (ui->quiet) return 0;
    double frac = (double)p->words_done / (double)p->words_total;
    double rate = p->seconds > 0 ? (double)p->words_done_here / p->seconds : 0;
    char eta[32], loss[48] = "";
    if (p->loss_examples > 0)
        snprintf(loss, sizeof loss, "  loss %.4f", p->loss / (double)p->loss_examples);
    fmt_eta(eta, sizeof eta, rate > 0 ? (double)(p->words_total - p->words_done) / rate : 0);
    if (ui->tty) {
        if (now - ui->last_print < 0.1 && p->words_done < p->words_total) return 0;
        char bar[31];
        int fill = (int)(frac * 30);
        for (int i = 0; i < 30; i++) bar[i] = i < fill ? '#' : '.';
        bar[30] = 0;
        fprintf(stderr, "\r[%s] %5.1f%%  epoch %d/%d%s  %8.0f words/s  lr %.6f  ETA %s ", bar,
                100 * frac, p->epoch + 1, ui->epochs, loss, rate, p->alpha, eta);
    } else {
        if (now - ui->last_print < 5.0) return 0;
        fprintf(stderr, "progress: %5.1f%%  epoch %d/%d%s  %.0f words/s  lr %.6f  ETA %s\n",
                100 * frac, p->epoch + 1, ui->epochs, loss, rate, p->alpha, eta);
    }
    fflush(stderr);
    ui->last_print = now;
    return 0;
}

/* The folder of `path` exists and is writable. */
static bool dir_writable(const char *path, char *why, size_t n) {
    char *d = strdup(path);
    if (!d) return snprintf(why, n, "out of memory"), false;
    const char *dir = dirname(d);
    struct stat sb;
    bool ok = true;
    if (stat(dir, &sb) != 0)
        ok = false, snprintf(why, n, "folder %s: %s", dir, strerror(errno));
    else if (!S_ISDIR(sb.st_mode))
        ok = false, snprintf(why, n, "%s is not a folder", dir);
    else if (access(dir, W_OK) != 0)
        ok = false, snprintf(why, n, "folder %s: %s", dir, strerror(errno));
    free(d);
    return ok;
}

/* What the command line asked for (-1, NAN or NULL: not given). */
typedef struct {
    const char *output, *train, *input, *resume, *checkpoint, *model, *save_model;
    const char *save_vocab, *read_vocab, *cont, *save_state;
    int64_t minn, maxn, bucket, dim, window, negative, min_count, max_vocab, epochs, threads, cbow,
        hs, binary, max_sentence, lanes;
    double sample, alpha, min_alpha, every;
    uint64_t seed;
    bool subwords, lowercase, strip, quiet, sum, shared, per_pair, keep_ckpt, loss, lenient;
    bool phrases, use_mpi;
    int64_t ph_passes, ph_min_count;
    double ph_threshold;
    const char *ph_delimiter, *ph_scoring;
    /* CORPUS...: files, directories and "-", read one after the other */
    const char *corpus;
    const char *const *paths;
    size_t npaths;
    emb_w2v_model m;
} train_args;

/* The options and operands into *a: -1 when the run goes on, else the exit status. */
static int parse_args(const emb_cli_command *cmd, int argc, char **argv, train_args *a) {
    *a = (train_args){.model = "skipgram",
                      .minn = -1,
                      .maxn = -1,
                      .bucket = -1,
                      .dim = -1,
                      .window = -1,
                      .negative = -1,
                      .min_count = -1,
                      .max_vocab = -1,
                      .epochs = -1,
                      .threads = -1,
                      .cbow = -1,
                      .binary = -1,
                      .max_sentence = -1,
                      .lanes = -1,
                      .sample = -1,
                      .alpha = NAN,
                      .min_alpha = -1,
                      .seed = 1,
                      .ph_threshold = NAN};
    const emb_cli_option opts[] = {
        {"output", 'o', NULL, EMB_CLI_STRING, &a->output, 0, 0, 0, 0},
        {"train", 0, NULL, EMB_CLI_STRING, &a->train, 0, 0, 0, 0},
        {"input", 0, NULL, EMB_CLI_STRING, &a->input, 0, 0, 0, 0},
        {"model", 0, NULL, EMB_CLI_STRING, &a->model, 0, 0, 0, 0},
        {"cbow", 0, NULL, EMB_CLI_INT, &a->cbow, 0, 1, 0, 0},
        {"dim", 0, "size vector-size", EMB_CLI_INT, &a->dim, 1, 1 << 20, 0, 0},
        {"window", 0, "ws", EMB_CLI_INT, &a->window, 1, 1000, 0, 0},
        {"negative", 0, "neg", EMB_CLI_INT, &a->negative, 1, 1000, 0, 0},
        {"sample", 0, "t", EMB_CLI_DOUBLE, &a->sample, 0, 0, 0, 1e300},
        {"min-count", 0, "minCount min_count", EMB_CLI_INT, &a->min_count, 1, INT64_MAX, 0, 0},
        {"max-vocab", 0, "max-final-vocab", EMB_CLI_INT, &a->max_vocab, 0, INT64_MAX, 0, 0},
        {"epochs", 0, "iter epoch", EMB_CLI_INT, &a->epochs, 1, 100000, 0, 0},
        {"threads", 0, "thread workers", EMB_CLI_INT, &a->threads, 1, 1024, 0, 0},
        {"lanes", 0, NULL, EMB_CLI_INT, &a->lanes, 1, 4096, 0, 0},
        {"alpha", 0, "lr", EMB_CLI_DOUBLE, &a->alpha, 0, 0, 0, 0},
        {"min-alpha", 0, NULL, EMB_CLI_DOUBLE, &a->min_alpha, 0, 0, 0, 1e300},
        {"seed", 0, NULL, EMB_CLI_UINT64, &a->seed, 0, 0, 0, 0},
        {"lowercase", 0, NULL, EMB_CLI_FLAG, &a->lowercase, 0, 0, 0, 0},
        {"strip-punct", 0, NULL, EMB_CLI_FLAG, &a->strip, 0, 0, 0, 0},
        {"cbow-sum", 0, NULL, EMB_CLI_FLAG, &a->sum, 0, 0, 0, 0},
        {"shared-negatives", 0, NULL, EMB_CLI_FLAG, &a->shared, 0, 0, 0, 0},
        {"per-pair-negatives", 0, NULL, EMB_CLI_FLAG, &a->per_pair, 0, 0, 0, 0},
        {"lenient", 0, NULL, EMB_CLI_FLAG, &a->lenient, 0, 0, 0, 0},
        {"max-sentence", 0, NULL, EMB_CLI_INT, &a->max_sentence, 1, INT32_MAX, 0, 0},
        {"hs", 0, NULL, EMB_CLI_INT, &a->hs, 0, 1, 0, 0},
        {"binary", 0, NULL, EMB_CLI_INT, &a->binary, 0, 1, 0, 0},
        {"checkpoint", 0, NULL, EMB_CLI_STRING, &a->checkpoint, 0, 0, 0, 0},
        {"checkpoint-every", 0, NULL, EMB_CLI_DOUBLE, &a->every, 0, 0, 0, 1e9},
        {"resume", 0, NULL, EMB_CLI_STRING, &a->resume, 0, 0, 0, 0},
        {"keep-checkpoint", 0, NULL, EMB_CLI_FLAG, &a->keep_ckpt, 0, 0, 0, 0},
        {"loss", 0, "compute-loss", EMB_CLI_FLAG, &a->loss, 0, 0, 0, 0},
        {"save-vocab", 0, NULL, EMB_CLI_STRING, &a->save_vocab, 0, 0, 0, 0},
        {"read-vocab", 0, NULL, EMB_CLI_STRING, &a->read_vocab, 0, 0, 0, 0},
        {"continue", 0, NULL, EMB_CLI_STRING, &a->cont, 0, 0, 0, 0},
        {"save-model", 0, NULL, EMB_CLI_STRING, &a->save_model, 0, 0, 0, 0},
        {"quiet", 'q', NULL, EMB_CLI_FLAG, &a->quiet, 0, 0, 0, 0},
        {"subwords", 0, NULL, EMB_CLI_FLAG, &a->subwords, 0, 0, 0, 0},
        {"minn", 0, NULL, EMB_CLI_INT, &a->minn, 0, 100, 0, 0},
        {"maxn", 0, NULL, EMB_CLI_INT, &a->maxn, 0, 100, 0, 0},
        {"bucket", 0, NULL, EMB_CLI_INT, &a->bucket, 1, INT32_MAX - 1, 0, 0},
        {"save-state", 0, NULL, EMB_CLI_STRING, &a->save_state, 0, 0, 0, 0},
        {"phrases", 0, NULL, EMB_CLI_FLAG, &a->phrases, 0, 0, 0, 0},
        {"phrases-passes", 0, NULL, EMB_CLI_INT, &a->ph_passes, 1, 8, 0, 0},
        {"phrases-min-count", 0, NULL, EMB_CLI_INT, &a->ph_min_count, 1, INT64_MAX, 0, 0},
        {"phrases-threshold", 0, NULL, EMB_CLI_DOUBLE, &a->ph_threshold, 0, 0, 0, 0},
        {"phrases-delimiter", 0, NULL, EMB_CLI_STRING, &a->ph_delimiter, 0, 0, 0, 0},
        {"phrases-scoring", 0, NULL, EMB_CLI_STRING, &a->ph_scoring, 0, 0, 0, 0},
        {"mpi", 0, NULL, EMB_CLI_FLAG, &a->use_mpi, 0, 0, 0, 0},
        {NULL, 0, NULL, EMB_CLI_FLAG, NULL, 0, 0, 0, 0},
    };
    emb_cli_args args;
    int rc = emb_cli_parse(cmd, argc, argv, opts, &args);
    if (rc >= 0) return rc;
    const char *train = a->train;
    if (train && a->input)
        return emb_cli_usage_error(cmd, "the corpus is given twice (%s and %s)", train, a->input);
    if (!train) train = a->input;
    if (train && args.n > 0)
        return emb_cli_usage_error(cmd, "the corpus is given twice (%s and %s)", train, args.v[0]);
    if (!train && (rc = emb_cli_operands(cmd, &args, 1, INT32_MAX, "CORPUS")) >= 0) return rc;
    a->train = train;
    a->corpus = train ? train : args.v[0];
    a->paths = train ? &a->train : (const char *const *)args.v;
    a->npaths = train ? 1 : (size_t)args.n;
    if (!a->output) return emb_cli_usage_error(cmd, "missing --output (-o) OUT");
    if (a->hs)
        return emb_cli_usage_error(cmd, "hierarchical softmax (-hs 1) is not provided: emb "
                                        "trains with negative sampling (-hs 0 -negative N)");
    if (strcmp(a->model, "skipgram") == 0 || strcmp(a->model, "sg") == 0)
        a->m = EMB_W2V_SKIPGRAM;
    else if (strcmp(a->model, "cbow") == 0)
        a->m = EMB_W2V_CBOW;
    else
        return emb_cli_usage_error(cmd, "invalid value '%s' for --model: expected skipgram or cbow",
                                   a->model);
    if (a->cbow >= 0) a->m = a->cbow ? EMB_W2V_CBOW : EMB_W2V_SKIPGRAM;
    if (a->shared && a->per_pair)
        return emb_cli_usage_error(cmd, "--shared-negatives and --per-pair-negatives exclude "
                                        "each other");
    if (!isnan(a->alpha) && !(a->alpha > 0 && a->alpha <= 1))
        return emb_cli_usage_error(
            cmd,
            "invalid value '%g' for --alpha: expected a number in (0, 1] (larger "
            "learning rates make the vectors diverge)",
            a->alpha);
    return -1;
}

/* The phrase options of a into *o (any of them turns phrases on, one pass unless
 * --phrases-passes): -1, or the exit status of a usage error. */
static int phrase_options(const emb_cli_command *cmd, const train_args *a, emb_w2v_options *o) {
    if (!(a->phrases || a->ph_passes > 0 || a->ph_min_count > 0 || !isnan(a->ph_threshold) ||
          a->ph_delimiter || a->ph_scoring))
        return -1;
    o->phrases = a->ph_passes > 0 ? (int)a->ph_passes : 1;
    if (a->ph_min_count > 0) o->phrases_min_count = a->ph_min_count;
    if (!isnan(a->ph_threshold)) o->phrases_threshold = a->ph_threshold;
    if (a->ph_delimiter && strlen(a->ph_delimiter) >= sizeof o->phrases_delimiter)
        return emb_cli_usage_error(cmd, "--phrases-delimiter must have 1 to 16 bytes");
    if (a->ph_delimiter) strcpy(o->phrases_delimiter, a->ph_delimiter);
    if (a->ph_scoring && strcmp(a->ph_scoring, "npmi") == 0)
        o->phrases_scoring = EMB_PHRASES_NPMI;
    else if (a->ph_scoring && strcmp(a->ph_scoring, "default") != 0)
        return emb_cli_usage_error(cmd, "--phrases-scoring is default or npmi, not '%s'",
                                   a->ph_scoring);
    if (a->cont || a->read_vocab)
        return emb_cli_usage_error(cmd, "--phrases cannot be combined with %s",
                                   a->cont ? "--continue" : "--read-vocab");
    return -1;
}

/* The library's options from a: -1, or the exit status of a usage error. */
static int train_options(const emb_cli_command *cmd, const train_args *a, emb_w2v_options *o) {
    *o = emb_w2v_options_default(a->m);
    if (a->dim > 0) o->dim = a->dim;
    if (a->window > 0) o->window = (int)a->window;
    if (a->negative > 0) o->negative = (int)a->negative;
    if (a->sample >= 0) o->sample = a->sample;
    if (a->min_count > 0) o->min_count = a->min_count;
    if (a->max_vocab >= 0) o->max_vocab = a->max_vocab;
    if (a->epochs > 0) o->epochs = (int)a->epochs;
    if (a->threads > 0) o->threads = (int)a->threads;
    if (a->lanes > 0) o->lanes = (int)a->lanes;
    if (!isnan(a->alpha)) {
        o->alpha = a->alpha;
        o->min_alpha = a->alpha * 1e-4;
    }
    if (a->min_alpha >= 0) o->min_alpha = a->min_alpha;
    if (a->max_sentence > 0) o->max_sentence = a->max_sentence;
    o->seed = a->seed;
    o->lowercase = a->lowercase;
    o->strip_punct = a->strip;
    o->cbow_mean = !a->sum;
    o->compute_loss = a->loss;
    o->lenient = a->lenient;
    /* subwords: any of their options turns them on, with fastText's defaults for the rest
     * (minn 3, maxn 6, bucket 2,000,000); --maxn 0 turns them off */
    if (a->subwords || a->minn >= 0 || a->maxn >= 0 || a->bucket > 0)
        o->maxn = a->maxn >= 0 ? (int)a->maxn : 6;
    if (a->minn >= 0) o->minn = (int)a->minn;
    if (a->bucket > 0) o->bucket = a->bucket;
    /* skip-gram shares a window's negatives by default (the library's default); subword runs
     * draw per pair as fastText does unless --shared-negatives asks otherwise */
    if (a->shared || a->per_pair || o->maxn > 0) o->shared_negatives = a->shared;
    int rc = phrase_options(cmd, a, o);
    if (rc >= 0) return rc;
    if (emb_w2v_options_check(o) != EMB_OK) return emb_cli_usage_error(cmd, "%s", emb_errmsg());
    return -1;
}

/* The files the run writes and reads besides the corpus: the output (*out), the model, the
 * checkpoint (a default name and interval when only one of them is given), a vocabulary
 * to read (*given). -1, or the exit status of an error. */
static int train_files(const emb_cli_command *cmd, train_args *a, const emb_w2v_options *o,
                       train_output *out, emb_vocab **given) {
    int rc = train_output_resolve(cmd, a->output, a->binary, a->input != NULL, out);
    if (rc >= 0) return rc;
    a->output = out->path;
    /* fastText writes PREFIX.bin beside PREFIX.vec; emb does for models with subwords, whose
     * vectors of unseen words only the model holds */
    if (out->model && o->maxn > 0 && !a->save_model) a->save_model = out->model;
    char why[600];
    if (!out->to_stdout && !dir_writable(a->output, why, sizeof why))
        return emb_cli_fail(cmd, "cannot write %s: %s", a->output, why);
    if (a->checkpoint && a->every == 0) {
        a->every = 300;
        if (!a->quiet)
            fprintf(stderr,
                    "emb train: --checkpoint without --checkpoint-every: writing %s every %g "
                    "seconds\n",
                    a->checkpoint, a->every);
    }
    if (a->save_model && !dir_writable(a->save_model, why, sizeof why))
        return emb_cli_fail(cmd, "cannot write %s: %s", a->save_model, why);
    if (!a->checkpoint && a->every > 0) {
        static char def[4096];
        snprintf(def, sizeof def, "%s.ckpt", out->to_stdout ? "emb-train" : a->output);
        a->checkpoint = def;
    }
    if (a->checkpoint && !dir_writable(a->checkpoint, why, sizeof why))
        return emb_cli_fail(cmd, "cannot write checkpoint %s: %s", a->checkpoint, why);
    if ((a->cont || a->read_vocab) && (a->resume || a->checkpoint))
        return emb_cli_usage_error(cmd,
                                   "%s cannot be combined with checkpoints (--checkpoint, "
                                   "--checkpoint-every, --resume)",
                                   a->cont ? "--continue" : "--read-vocab");
    if (a->cont && a->read_vocab)
        return emb_cli_usage_error(cmd, "--continue takes its vocabulary from the model; drop "
                                        "--read-vocab");
    if (a->read_vocab && emb_vocab_load(a->read_vocab, given) != EMB_OK)
        return emb_cli_fail(cmd, "%s", emb_errmsg());
    return -1;
}

/* The line that says what is trained, with which settings. */
static void say_run(const train_args *a, const emb_w2v *w, const emb_w2v_options *o) {
    fprintf(stderr,
            "emb train: %s%s, %lld words in the vocabulary, %lld tokens; %s, dim %lld, "
            "window %d, negative %d, %d epochs, %d threads%s%s\n",
            a->corpus, a->npaths > 1 ? " and more paths" : "",
            (long long)emb_vocab_num_words(emb_w2v_vocab(w)), (long long)emb_w2v_corpus_tokens(w),
            a->m == EMB_W2V_CBOW ? "CBOW" : "skip-gram", (long long)o->dim, o->window, o->negative,
            o->epochs, o->threads, o->maxn > 0 ? "; subwords" : "",
            a->resume ? " (resumed)"
            : a->cont ? " (continued)"
                      : "");
}

/* After training: the vectors (rank 0), the model and the state when asked for, then the
 * run's checkpoints removed. The exit status. */
static int train_outputs(const emb_cli_command *cmd, const train_args *a, const train_output *out,
                         const train_mpi *mp, const train_ui *ui, emb_w2v *w) {
    const emb_w2v_options o = emb_w2v_options_of(w);
    emb_tensor vec;
    /* with subwords a word's vector is the mean of its rows (fastText's .vec) */
    if (o.maxn > 0 ? emb_w2v_word_vectors(w, &vec) : emb_w2v_vectors(w, &vec))
        return emb_cli_fail(cmd, "%s", emb_errmsg());
    int rc = mp->rank > 0 ? EMB_CLI_OK : train_output_write(cmd, out, &vec, emb_w2v_vocab(w));
    if (o.maxn > 0) emb_tensor_release(&vec);
    if (rc == EMB_CLI_OK && a->save_model && emb_w2v_save_fasttext(w, a->save_model) != EMB_OK)
        rc = emb_cli_fail(cmd, "%s", emb_errmsg());
    if (rc == EMB_CLI_OK && a->save_state && emb_w2v_save_checkpoint(w, a->save_state) != EMB_OK)
        rc = emb_cli_fail(cmd, "%s", emb_errmsg());
    if (rc != EMB_CLI_OK) return rc;
    /* The vectors are safe: the run's checkpoints have served their purpose. */
    if (!a->keep_ckpt && mp->rank == 0) {
        if (a->checkpoint && ui->ckpt_written) remove(a->checkpoint);
        if (a->resume) remove(a->resume);
    }
    return EMB_CLI_OK;
}

/* The summary line and, even with -q (the vectors lack these tokens), the skipped tokens. */
static void say_done(const train_args *a, const train_output *out, emb_w2v *w, int64_t done0,
                     double t0, double t1, double t2) {
    if (!a->quiet) {
        struct rusage ru;
        getrusage(RUSAGE_SELF, &ru);
        int64_t words = emb_w2v_words_done(w) - done0;
        fprintf(stderr,
                "emb train: %lld words in %.2f s (%.0f words/s; reading %.2f s), peak memory "
                "%.1f MB; wrote %s (%s)\n",
                (long long)words, t2 - t1, (t2 - t1) > 0 ? (double)words / (t2 - t1) : 0, t1 - t0,
                (double)ru.ru_maxrss / 1024.0, out->to_stdout ? "standard output" : a->output,
                emb_format_name(out->format));
    }
    int64_t bad_utf8, too_long;
    emb_w2v_skipped(w, &bad_utf8, &too_long);
    if (bad_utf8 || too_long)
        fprintf(stderr,
                "emb train: skipped %lld tokens that are not UTF-8 and %lld longer than %d bytes\n",
                (long long)bad_utf8, (long long)too_long, EMB_VOCAB_MAX_WORD);
}

static int train(const emb_cli_command *cmd, int argc, char **argv) {
    train_args a;
    emb_w2v_options o;
    train_output out;
    emb_vocab *given_vocab = NULL;
    int rc;
    if ((rc = parse_args(cmd, argc, argv, &a)) >= 0 || (rc = train_options(cmd, &a, &o)) >= 0 ||
        (rc = train_files(cmd, &a, &o, &out, &given_vocab)) >= 0)
        return rc;

    /* one rank of an MPI job (mpirun): threads per rank (default 1), rank 0 reports and writes */
    train_mpi mp;
    if ((rc = train_mpi_start(cmd, a.use_mpi, &mp)) >= 0) {
        emb_vocab_free(given_vocab);
        return rc;
    }
    /* a distributed run: one lane per thread (its merges were measured so, docs/DISTRIBUTED.md) */
    if (mp.on) {
        o.threads = (int)(a.threads > 0 ? a.threads : 1) * mp.size, a.quiet |= mp.rank > 0;
        if (a.lanes <= 0) o.lanes = o.threads;
    }
    if (mp.rank > 0)
        a.checkpoint = NULL, a.every = 0, a.save_vocab = a.save_model = a.save_state = NULL;
    double t0 = wall();
    emb_w2v *w = NULL;
    emb_status st = a.resume ? emb_w2v_resume_files(&o, a.paths, a.npaths, a.resume, &w)
                    : a.cont ? emb_w2v_continue_files(&o, a.cont, a.paths, a.npaths, &w)
                    : given_vocab
                        ? emb_w2v_create_with_vocab_files(&o, given_vocab, a.paths, a.npaths, &w)
                        : emb_w2v_create_from_files(&o, a.paths, a.npaths, &w);
    emb_vocab_free(given_vocab);
    if (st) return emb_cli_fail(cmd, "%s", emb_errmsg());
    if (a.save_vocab && emb_vocab_save(emb_w2v_vocab(w), a.save_vocab) != EMB_OK) {
        rc = emb_cli_fail(cmd, "%s", emb_errmsg());
        emb_w2v_free(w);
        return rc;
    }
    int asked_threads = o.threads;
    o = emb_w2v_options_of(w);
    /* a continued model has its own subwords: -output PREFIX then writes PREFIX.bin too */
    if (a.cont && out.model && o.maxn > 0 && !a.save_model && mp.rank == 0)
        a.save_model = out.model;
    if (a.resume && a.threads > 0 && asked_threads != o.threads && !a.quiet)
        fprintf(stderr,
                "emb train: %s holds %d lanes (parts of the corpus, each with its own position "
                "and random numbers); the run continues them on %d threads\n",
                a.resume, o.lanes, o.threads);
    train_ui ui = {
        w,     isatty(fileno(stderr)) == 1, a.quiet,  0, wall(), a.every, a.checkpoint, 0,
        false, emb_w2v_words_done(w),       o.epochs, ""};
    if (!a.quiet) say_run(&a, w, &o);
    double t1 = wall();
    st = train_mpi_train(&mp, w, on_progress, &ui, !a.quiet);
    double t2 = wall();
    if (!a.quiet && ui.tty) fprintf(stderr, "\n");
    if (ui.ckpt_failed)
        rc = emb_cli_fail(cmd, "training stopped: cannot write the checkpoint: %s", ui.ckpt_msg);
    else if (st)
        rc = emb_cli_fail(cmd, "%s", emb_errmsg());
    else if ((rc = train_outputs(cmd, &a, &out, &mp, &ui, w)) == EMB_CLI_OK)
        say_done(&a, &out, w, ui.done0, t0, t1, t2);
    emb_w2v_free(w);
    return rc;
}

static int run(const emb_cli_command *cmd, int argc, char **argv) {
    return train_mpi_end(train(cmd, argc, argv));
}

const emb_cli_command emb_cli_cmd_train = {
    "train",
    "learn word vectors from raw text (skip-gram or CBOW, negative sampling)",
    "usage: emb train CORPUS... -o OUT [options]\n"
    "\n"
    "Learns word vectors from plain UTF-8 text, as the word2vec tool, gensim's Word2Vec and\n"
    "fastText's skipgram/cbow do: skip-gram (default) or CBOW with negative sampling,\n"
    "frequent-word subsampling, a dynamic window and a learning rate that decays linearly.\n"
    "Tokens are separated by whitespace; a line ends a sentence (a longer line is cut every\n"
    "--max-sentence tokens). Several CORPUS are read one after the other, the end of a file\n"
    "ending a sentence; a directory stands for its files (recursively, in byte order of the\n"
    "paths; hidden names and what is not a regular file skipped); CORPUS '-' reads standard\n"
    "input (read once; --resume works when the same text comes again). gzip, bzip2, xz and\n"
    "zstd files are decompressed, recognised by their content whatever their name.\n"
    "\n"
    "The format of OUT follows its extension: .safetensors (tensor 'weight' plus the words;\n"
    "loads with torch and Embedding.from_pretrained), .bin (word2vec binary), .vec or .txt\n"
    "(word2vec text, as fastText's .vec); any other name gets word2vec text; -binary 0|1\n"
    "picks word2vec text or binary whatever the name, as the word2vec tool does. OUT '-'\n"
    "writes to standard output (word2vec text, or binary with -binary 1). With the corpus\n"
    "given by fastText's -input, an OUT without one of those extensions is a prefix, as in\n"
    "fastText: PREFIX.vec is written, and PREFIX.bin (the model) with subwords.\n"
    "Compressed names (.gz, .bz2, .xz, .zst) are refused rather than written\n"
    "uncompressed: use -o - | gzip > OUT.gz. The file is written\n"
    "atomically: a failed run never replaces an existing OUT.\n"
    "\n"
    "Options (word2vec's and fastText's single-dash names are accepted too):\n"
    "  -o, --output OUT        where to write the vectors (word2vec: -output)\n"
    "  --model skipgram|cbow   the model (default skipgram); -cbow 0|1 as word2vec\n"
    "  --dim N                 vector size (default 100; -size, -dim)\n"
    "  --window N              maximum context distance (default 5; -ws)\n"
    "  --negative N            negative samples (default 5; -neg)\n"
    "  --sample X              subsampling threshold, 0 for none (default 1e-3; -t)\n"
    "  --min-count N           drop words seen fewer times (default 5; -minCount)\n"
    "  --max-vocab N           keep only the N most frequent words (default: all)\n"
    "  --epochs N              passes over the corpus (default 5; -iter, -epoch)\n"
    "  --alpha X               initial learning rate in (0, 1] (default 0.025 skip-gram,\n"
    "                          0.05 CBOW; -lr); a run whose vectors diverge (NaN or\n"
    "                          infinite) stops with an error naming the word\n"
    "  --min-alpha X           final learning rate (default alpha * 1e-4)\n"
    "  --threads N             training threads (default: all CPUs; -thread)\n"
    "  --lanes N               parts of the corpus, each with its own position and random\n"
    "                          numbers, that the threads share out round after round\n"
    "                          (default: 1 with one thread, 4 per thread with more; a\n"
    "                          resumed run keeps its checkpoint's)\n"
    "  --seed N                seed of the initialisation and sampling (default 1)\n"
    "  --lowercase             lowercase tokens as Python's str.lower() (Unicode)\n"
    "  --strip-punct           strip ASCII punctuation at both ends of tokens\n"
    "  --cbow-sum              CBOW sums the context vectors instead of averaging them\n"
    "  --shared-negatives      skip-gram draws one set of negatives per window, shared by\n"
    "                          its context words (the default, except with subwords)\n"
    "  --per-pair-negatives    skip-gram draws negatives for each (center, context) pair,\n"
    "                          as the word2vec tool, gensim and fastText do (slower; the\n"
    "                          default with --subwords and in earlier versions of emb)\n"
    "  --lenient               skip tokens that are not UTF-8 or longer than 1 MiB\n"
    "                          (counted in the summary) instead of stopping\n"
    "  --max-sentence N        longest sentence in tokens, 1 to 2147483647 (default 1000)\n"
    "  --subwords, --minn/--maxn/--bucket N, --save-model .bin: fastText n-grams\n"
    "  --phrases               train on the corpus with gensim's Phrases applied (as emb\n"
    "                          phrases writes it: new york -> new_york), without writing\n"
    "                          it; --phrases-min-count N (5), --phrases-threshold X (10),\n"
    "                          --phrases-delimiter S (_), --phrases-passes N (1; 2 joins\n"
    "                          phrases again, as gensim's Phrases applied twice),\n"
    "                          --phrases-scoring default|npmi (npmi: a threshold in\n"
    "                          [-1, 1]); any corpus (stdin is kept in a temporary file)\n"
    "  -hs 0, -binary 0|1      word2vec compatibility: hierarchical softmax is not provided\n"
    "                          (only -hs 0 is accepted); -binary 1 writes word2vec binary,\n"
    "                          -binary 0 word2vec text\n"
    "  --checkpoint FILE       where checkpoints go (default OUT.ckpt); alone, it checkpoints\n"
    "                          every 300 seconds (and says so)\n"
    "  --checkpoint-every S    write the whole training state every S seconds, atomically\n"
    "  --resume FILE           continue from a checkpoint (same corpus and options)\n"
    "  --keep-checkpoint       keep the checkpoint (and the one resumed from) after a\n"
    "                          successful run; by default they are removed once the\n"
    "                          vectors are written\n"
    "  --save-vocab FILE       write the vocabulary, \"word count\" lines (word2vec's\n"
    "                          -save-vocab)\n"
    "  --read-vocab FILE       take the vocabulary and its counts from FILE instead of\n"
    "                          counting the corpus (word2vec's -read-vocab)\n"
    "  --save-state FILE       also write the whole training state (both tables, the words\n"
    "                          and their counts) for --continue\n"
    "  --continue MODEL        train MODEL (--save-state's, or a fastText .bin) further on\n"
    "                          CORPUS: its words keep their vectors, new words seen\n"
    "                          --min-count times are added (as gensim's\n"
    "                          build_vocab(update=True)); the model's dim and subwords\n"
    "                          (minn, maxn, bucket and the n-gram rows) are used\n"
    "  --loss                  show the training loss in the progress display: the mean\n"
    "                          over this epoch's examples of the sum of -log sigmoid terms\n"
    "                          (docs/word2vec.md, \"Loss\"); costs time, same vectors\n"
    "                          (gensim: compute_loss)\n"
    "  --mpi                   train as one rank of an MPI job (implied when started by\n"
    "                          mpirun): the ranks share the corpus, rank 0 reports and\n"
    "                          writes; --threads is then per rank (default 1)\n"
    "  -q, --quiet             no progress display and no summary\n"
    "  -h, --help              print this help and exit\n"
    "\n"
    "Progress goes to standard error: a bar (percent, epoch, the loss with --loss,\n"
    "words/s, learning rate, ETA) on a terminal, a line every 5 seconds otherwise, and a\n"
    "summary at the end (after --resume, words/s and the ETA count only the work done since\n"
    "the resume). With --threads 1 and a fixed --seed two runs give identical vectors; with\n"
    "more threads rows are updated without locks, as the other tools do, and results vary\n"
    "slightly between runs.\n"
    "\n"
    "Exit status: 0 on success, 1 on a failure (unreadable or non-UTF-8 corpus, no word\n"
    "frequent enough, an output folder that does not exist, training that diverged, a\n"
    "checkpoint that is damaged or holds NaN), 2 on a usage error.\n"
    "\n"
    "Examples:\n"
    "  emb train corpus.txt -o vectors.bin\n"
    "  emb train corpus.txt -o vectors.safetensors --model cbow --dim 200 --epochs 10\n"
    "  emb train corpus.txt -o vectors.vec --subwords --save-model model.bin\n"
    "  mpirun -np 4 emb train corpus.txt -o vectors.bin\n"
    "  emb train -train corpus.txt -output vec.txt -size 100 -window 5 -negative 5 \\\n"
    "      -sample 1e-3 -min-count 5 -iter 5 -threads 2 -cbow 0 -hs 0 -binary 0\n",
    run,
};
