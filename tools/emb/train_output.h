/* train_output.h: where and how `emb train` writes its vectors (the rules of its --output,
 * -binary and -input options; tools/emb/train_output.c). */
#ifndef EMB_TOOLS_TRAIN_OUTPUT_H
#define EMB_TOOLS_TRAIN_OUTPUT_H

#include <emb/io.h>

#include "cli.h"

typedef struct train_output {
    const char *path; /* the file written ("-": standard output) */
    emb_format format;
    bool to_stdout;
    const char *model; /* fastText's -output PREFIX: PREFIX.bin, else NULL */
} train_output;

/* Decides the output from OUT as given, -binary (-1: not given, 0 or 1) and whether the
 * corpus came by fastText's -input (then an OUT without a known extension is a prefix and
 * PREFIX.vec is written, as fastText does, and out->model names PREFIX.bin for a model with
 * subwords). Returns -1 when the command goes on, or the exit
 * status after a usage error (a compressed name such as OUT.gz, -binary with a name that
 * asks for another format). */
int train_output_resolve(const emb_cli_command *cmd, const char *output, int64_t binary,
                         bool fasttext_input, train_output *out);

/* Writes the vectors: to the file, atomically, or to standard output (through a temporary
 * file, copied once it is complete). Returns EMB_CLI_OK, or EMB_CLI_FAILURE after printing
 * why. */
int train_output_write(const emb_cli_command *cmd, const train_output *out,
                       const emb_tensor *vectors, const emb_vocab *vocab);

#endif /* EMB_TOOLS_TRAIN_OUTPUT_H */
