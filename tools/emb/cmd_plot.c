/* emb plot: an SVG map of the most frequent words, their vectors projected to 2-D by PCA. */
#include "wordvecs.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* The leading eigenvector of the d x d symmetric matrix c (power iteration from a fixed
 * start, deflating `prev` when given), into v. */
static void leading_eigvec(const double *c, int64_t d, const double *prev, double *v,
                           double *tmp) {
    for (int64_t i = 0; i < d; i++) v[i] = 1.0 / sqrt((double)d) + 1e-3 * (double)(i % 7);
    for (int it = 0; it < 500; it++) {
        if (prev) { /* keep v orthogonal to prev */
            double p = 0;
            for (int64_t i = 0; i < d; i++) p += v[i] * prev[i];
            for (int64_t i = 0; i < d; i++) v[i] -= p * prev[i];
        }
        for (int64_t i = 0; i < d; i++) {
            double s = 0;
            for (int64_t j = 0; j < d; j++) s += c[i * d + j] * v[j];
            tmp[i] = s;
        }
        double n = 0;
        for (int64_t i = 0; i < d; i++) n += tmp[i] * tmp[i];
        n = sqrt(n);
        if (!(n > 0)) return;
        double delta = 0;
        for (int64_t i = 0; i < d; i++) {
            double x = tmp[i] / n;
            delta += fabs(x - v[i]);
            v[i] = x;
        }
        if (delta < 1e-12) break;
    }
}

static void xml_text(FILE *f, const char *s) {
    for (; *s; s++) {
        switch (*s) {
        case '<': fputs("&lt;", f); break;
        case '>': fputs("&gt;", f); break;
        case '&': fputs("&amp;", f); break;
        case '"': fputs("&quot;", f); break;
        case '\'': fputs("&apos;", f); break;
        default:
            if ((unsigned char)*s >= 0x20 || *s == '\t') fputc(*s, f);
        }
    }
}

static int run(const emb_cli_command *cmd, int argc, char **argv) {
    int64_t top = 150, width = 1200, height = 900;
    const char *output = NULL, *title = NULL;
    const emb_cli_option opts[] = {
        {"output", 'o', NULL, EMB_CLI_STRING, &output, 0, 0, 0, 0},
        {"top", 'n', NULL, EMB_CLI_INT, &top, 2, 100000, 0, 0},
        {"width", 0, NULL, EMB_CLI_INT, &width, 200, 20000, 0, 0},
        {"height", 0, NULL, EMB_CLI_INT, &height, 200, 20000, 0, 0},
        {"title", 0, NULL, EMB_CLI_STRING, &title, 0, 0, 0, 0},
        {NULL, 0, NULL, EMB_CLI_FLAG, NULL, 0, 0, 0, 0},
    };
    emb_cli_args args;
    int rc = emb_cli_parse(cmd, argc, argv, opts, &args);
    if (rc >= 0) return rc;
    if ((rc = emb_cli_operands(cmd, &args, 1, 1, "FILE")) >= 0) return rc;
    if (!output) return emb_cli_usage_error(cmd, "missing --output (-o) OUT.svg");
    wordvecs w;
    if ((rc = wordvecs_open(cmd, args.v[0], top, 0, false, &w)) >= 0) return rc;
    int64_t n = w.v.weight.shape[0], d = w.v.weight.shape[1];
    const float *x = w.v.weight.data;
    double *mean = calloc((size_t)d, sizeof(double));
    double *cov = calloc((size_t)(d * d), sizeof(double));
    double *pc = malloc((size_t)(2 * d) * sizeof(double)), *tmp = malloc((size_t)d * sizeof(double));
    double *xy = malloc((size_t)(2 * n) * sizeof(double));
    if (!mean || !cov || !pc || !tmp || !xy) {
        free(mean), free(cov), free(pc), free(tmp), free(xy);
        wordvecs_close(&w);
        return emb_cli_fail(cmd, "out of memory");
    }
    /* PCA on unit vectors (cosine geometry), centred. */
    double *u = malloc((size_t)(n * d) * sizeof(double));
    for (int64_t i = 0; u && i < n; i++) {
        double s = 0;
        for (int64_t j = 0; j < d; j++) s += (double)x[i * d + j] * x[i * d + j];
        double inv = s > 0 ? 1.0 / sqrt(s) : 0;
        for (int64_t j = 0; j < d; j++) u[i * d + j] = x[i * d + j] * inv, mean[j] += u[i * d + j];
    }
    if (!u) {
        free(mean), free(cov), free(pc), free(tmp), free(xy);
        wordvecs_close(&w);
        return emb_cli_fail(cmd, "out of memory");
    }
    for (int64_t j = 0; j < d; j++) mean[j] /= (double)n;
    for (int64_t i = 0; i < n; i++)
        for (int64_t a = 0; a < d; a++) {
            double da = u[i * d + a] - mean[a];
            for (int64_t b = 0; b < d; b++) cov[a * d + b] += da * (u[i * d + b] - mean[b]);
        }
    leading_eigvec(cov, d, NULL, pc, tmp);
    leading_eigvec(cov, d, pc, pc + d, tmp);
    double lo[2] = {INFINITY, INFINITY}, hi[2] = {-INFINITY, -INFINITY};
    for (int64_t i = 0; i < n; i++)
        for (int k = 0; k < 2; k++) {
            double s = 0;
            for (int64_t j = 0; j < d; j++) s += (u[i * d + j] - mean[j]) * pc[k * d + j];
            xy[2 * i + k] = s;
            if (s < lo[k]) lo[k] = s;
            if (s > hi[k]) hi[k] = s;
        }
    /* written to a temporary beside OUT, then renamed: OUT is never half-written */
    char tmpname[4200];
    snprintf(tmpname, sizeof tmpname, "%s.tmp.%ld", output, (long)getpid());
    FILE *f = strlen(output) < 4000 ? fopen(tmpname, "w") : NULL;
    if (!f) {
        rc = emb_cli_fail(cmd, "cannot write %s: %s", output, strerror(errno));
    } else {
        double margin = 60, top_band = title ? 40 : 10;
        fprintf(f,
                "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%lld\" height=\"%lld\" "
                "viewBox=\"0 0 %lld %lld\" font-family=\"sans-serif\">\n"
                "<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n",
                (long long)width, (long long)height, (long long)width, (long long)height);
        if (title) {
            fprintf(f, "<text x=\"%lld\" y=\"28\" font-size=\"20\" text-anchor=\"middle\">",
                    (long long)width / 2);
            xml_text(f, title);
            fprintf(f, "</text>\n");
        }
        for (int64_t i = 0; i < n; i++) {
            double px = margin + (xy[2 * i] - lo[0]) / (hi[0] - lo[0] + 1e-300) *
                                     ((double)width - 2 * margin);
            double py = top_band + margin + (hi[1] - xy[2 * i + 1]) / (hi[1] - lo[1] + 1e-300) *
                                                ((double)height - 2 * margin - top_band);
            int shade = (int)(40 + 160 * (double)i / (double)n);
            fprintf(f, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"3\" fill=\"rgb(%d,%d,220)\"/>", px,
                    py, shade / 3, shade / 2);
            fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" font-size=\"%d\" fill=\"#222\">", px + 5,
                    py + 4, i < n / 4 ? 14 : 11);
            xml_text(f, wordvecs_word(&w, i));
            fprintf(f, "</text>\n");
        }
        fprintf(f, "</svg>\n");
        if (ferror(f) | (fclose(f) != 0) || rename(tmpname, output) != 0) {
            rc = emb_cli_fail(cmd, "cannot write %s: %s", output, strerror(errno));
            unlink(tmpname);
        } else {
            rc = EMB_CLI_OK;
        }
    }
    free(u), free(mean), free(cov), free(pc), free(tmp), free(xy);
    wordvecs_close(&w);
    return rc;
}

const emb_cli_command emb_cli_cmd_plot = {
    "plot",
    "an SVG map of the most frequent words, projected to 2-D with PCA",
    "usage: emb plot FILE -o OUT.svg [--top N] [--width W] [--height H] [--title TEXT]\n"
    "\n"
    "Reads the first --top rows of FILE (the most frequent words in files sorted by\n"
    "frequency, as emb train, word2vec, gensim and fastText write them), normalises each\n"
    "vector to unit length, projects them on their first two principal components and\n"
    "writes an SVG picture with one labelled point per word: words with similar vectors\n"
    "land close together. Open OUT.svg in a browser.\n"
    "\n"
    "Options:\n"
    "  -o, --output OUT.svg   the picture to write\n"
    "  -n, --top N            words to plot (default 150)\n"
    "  --width W, --height H  size in pixels (default 1200 x 900)\n"
    "  --title TEXT           a title above the map\n"
    "  -h, --help             print this help and exit\n"
    "\n"
    "Exit status: 0 on success, 1 when FILE cannot be read or OUT cannot be written, 2 on\n"
    "a usage error.\n"
    "\n"
    "Example:\n"
    "  emb plot vectors.bin -o words.svg --top 200\n",
    run,
};
