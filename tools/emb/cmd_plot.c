/* emb plot: an SVG map of the most frequent words, their vectors projected to 2-D by PCA. */
#include "wordvecs.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void xml_text(FILE *f, const char *s) {
    for (; *s; s++) {
        switch (*s) {
        case '<':
            fputs("&lt;", f);
            break;
        case '>':
            fputs("&gt;", f);
            break;
        case '&':
            fputs("&amp;", f);
            break;
        case '"':
            fputs("&quot;", f);
            break;
        case '\'':
            fputs("&apos;", f);
            break;
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
    float *u = malloc((size_t)(n * d) * sizeof(float)),
          *xy = calloc((size_t)(2 * n), sizeof(float));
    if (!u || !xy) {
        free(u), free(xy);
        wordvecs_close(&w);
        return emb_cli_fail(cmd, "out of memory");
    }
    /* PCA (emb_pca) of the unit vectors: cosine geometry */
    for (int64_t i = 0; i < n; i++) {
        double s = 0;
        for (int64_t j = 0; j < d; j++) s += (double)x[i * d + j] * x[i * d + j];
        float inv = s > 0 ? (float)(1 / sqrt(s)) : 0.0f;
        for (int64_t j = 0; j < d; j++) u[i * d + j] = x[i * d + j] * inv;
    }
    emb_tensor tu;
    int64_t ushape[2] = {n, d};
    emb_tensor_init(&tu, EMB_FLOAT32, u, 2, ushape);
    const int64_t k = d >= 2 ? 2 : 1;
    if (emb_pca(&tu, k, xy, NULL) != EMB_OK) {
        rc = emb_cli_fail(cmd, "%s: %s", args.v[0], emb_errmsg());
        free(u), free(xy);
        wordvecs_close(&w);
        return rc;
    }
    if (k == 1)
        for (int64_t i = n - 1; i >= 0; i--) xy[2 * i] = xy[i], xy[2 * i + 1] = 0;
    double lo[2] = {INFINITY, INFINITY}, hi[2] = {-INFINITY, -INFINITY};
    for (int64_t i = 0; i < n; i++)
        for (int c = 0; c < 2; c++) {
            if (xy[2 * i + c] < lo[c]) lo[c] = xy[2 * i + c];
            if (xy[2 * i + c] > hi[c]) hi[c] = xy[2 * i + c];
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
            double py = top_band + margin +
                        (hi[1] - xy[2 * i + 1]) / (hi[1] - lo[1] + 1e-300) *
                            ((double)height - 2 * margin - top_band);
            int shade = (int)(40 + 160 * (double)i / (double)n);
            fprintf(f, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"3\" fill=\"rgb(%d,%d,220)\"/>", px, py,
                    shade / 3, shade / 2);
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
    free(u), free(xy);
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
