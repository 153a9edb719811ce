/* Where and how `emb train` writes its vectors (train_output.h). */
#include "train_output.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

static bool ends_with(const char *s, const char *suffix) {
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && strcasecmp(s + n - m, suffix) == 0;
}

int train_output_resolve(const emb_cli_command *cmd, const char *output, int64_t binary,
                         bool fasttext_input, train_output *out) {
    memset(out, 0, sizeof *out);
    static const char *const compressed[] = {".gz", ".bz2", ".xz", ".zst", ".zip", ".lz4"};
    for (size_t k = 0; k < sizeof compressed / sizeof compressed[0]; k++)
        if (ends_with(output, compressed[k]))
            return emb_cli_usage_error(
                cmd,
                "cannot write %s: emb does not compress its output (it would "
                "be written uncompressed under a compressed name); write to "
                "standard output and compress it, e.g. -o - | gzip > %s",
                output, output);
    if (strcmp(output, "-") == 0) {
        out->path = output;
        out->to_stdout = true;
        out->format = binary == 1 ? EMB_FORMAT_W2V_BINARY : EMB_FORMAT_W2V_TEXT;
        return -1;
    }
    emb_format by_name = emb_format_from_path(output);
    if (fasttext_input && by_name == EMB_FORMAT_AUTO) {
        /* fastText's -output is a prefix: PREFIX.vec (and PREFIX.bin, the model) */
        static char prefixed[4096], model[4096];
        if ((size_t)snprintf(prefixed, sizeof prefixed, "%s.vec", output) >= sizeof prefixed ||
            (size_t)snprintf(model, sizeof model, "%s.bin", output) >= sizeof model)
            return emb_cli_usage_error(cmd, "the output prefix is too long");
        out->path = prefixed;
        out->model = model;
        out->format = binary == 1 ? EMB_FORMAT_W2V_BINARY : EMB_FORMAT_W2V_TEXT;
        return -1;
    }
    out->path = output;
    if (binary >= 0) {
        if (by_name == EMB_FORMAT_SAFETENSORS || by_name == EMB_FORMAT_NPY)
            return emb_cli_usage_error(cmd,
                                       "-binary %d asks for word2vec %s but %s names a %s file; "
                                       "drop one of them",
                                       (int)binary, binary ? "binary" : "text", output,
                                       emb_format_name(by_name));
        out->format = binary ? EMB_FORMAT_W2V_BINARY : EMB_FORMAT_W2V_TEXT; /* as word2vec */
        return -1;
    }
    out->format = by_name == EMB_FORMAT_AUTO ? EMB_FORMAT_W2V_TEXT : by_name;
    return -1;
}

/* Copies the complete file at `tmp` to standard output; the file is removed first (it stays
 * readable through the open descriptor), so an interruption leaves nothing behind. */
static int copy_to_stdout(const emb_cli_command *cmd, const char *tmp) {
    FILE *f = fopen(tmp, "rb");
    int e = errno;
    unlink(tmp);
    if (!f) return emb_cli_fail(cmd, "cannot read back %s: %s", tmp, strerror(e));
    char buf[1 << 16];
    size_t n;
    int rc = EMB_CLI_OK;
    while ((n = fread(buf, 1, sizeof buf, f)) > 0)
        if (fwrite(buf, 1, n, stdout) != n) {
            rc = emb_cli_fail(cmd, "cannot write the vectors to standard output: %s",
                              strerror(errno));
            break;
        }
    if (rc == EMB_CLI_OK && ferror(f)) rc = emb_cli_fail(cmd, "cannot read back %s", tmp);
    fclose(f);
    return rc;
}

int train_output_write(const emb_cli_command *cmd, const train_output *out,
                       const emb_tensor *vectors, const emb_vocab *vocab) {
    emb_vectors_write_options wo = emb_vectors_write_options_default();
    wo.format = out->format;
    if (!out->to_stdout) {
        if (emb_vectors_write(out->path, vectors, vocab, &wo))
            return emb_cli_fail(cmd, "%s", emb_errmsg());
        return EMB_CLI_OK;
    }
    const char *dir = getenv("TMPDIR");
    if (!dir || !*dir) dir = "/tmp";
    size_t n = strlen(dir) + 32;
    char *tmp = malloc(n);
    if (!tmp) return emb_cli_fail(cmd, "out of memory");
    snprintf(tmp, n, "%s/emb-train-XXXXXX", dir);
    int fd = mkstemp(tmp);
    if (fd < 0) {
        int rc = emb_cli_fail(cmd, "cannot create a temporary file in %s for standard output: %s",
                              dir, strerror(errno));
        free(tmp);
        return rc;
    }
    close(fd);
    int rc = EMB_CLI_OK;
    if (emb_vectors_write(tmp, vectors, vocab, &wo)) {
        rc = emb_cli_fail(cmd, "%s", emb_errmsg());
        unlink(tmp);
    } else {
        rc = copy_to_stdout(cmd, tmp);
    }
    free(tmp);
    return rc;
}
