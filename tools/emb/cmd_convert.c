/* emb convert: any vector format to any other. */
#include "cli.h"

#include <emb/emb.h>

#include <string.h>

static int run(const emb_cli_command *cmd, int argc, char **argv) {
    const char *from = NULL, *to = NULL, *dtype = NULL, *tensor = NULL, *out_tensor = NULL;
    int64_t limit = 0, precision = 0;
    bool trailing = false, no_newline = false, no_utf8 = false;
    const emb_cli_option opts[] = {
        {"from", 0, NULL, EMB_CLI_STRING, &from, 0, 0, 0, 0},
        {"to", 0, NULL, EMB_CLI_STRING, &to, 0, 0, 0, 0},
        {"dtype", 0, NULL, EMB_CLI_STRING, &dtype, 0, 0, 0, 0},
        {"limit", 0, NULL, EMB_CLI_INT, &limit, 0, INT64_MAX, 0, 0},
        {"tensor", 0, NULL, EMB_CLI_STRING, &tensor, 0, 0, 0, 0},
        {"output-tensor", 0, NULL, EMB_CLI_STRING, &out_tensor, 0, 0, 0, 0},
        {"precision", 0, NULL, EMB_CLI_INT, &precision, 0, 17, 0, 0},
        {"trailing-space", 0, NULL, EMB_CLI_FLAG, &trailing, 0, 0, 0, 0},
        {"no-newline", 0, NULL, EMB_CLI_FLAG, &no_newline, 0, 0, 0, 0},
        {"no-utf8-check", 0, NULL, EMB_CLI_FLAG, &no_utf8, 0, 0, 0, 0},
        {NULL, 0, NULL, EMB_CLI_FLAG, NULL, 0, 0, 0, 0},
    };
    emb_cli_args args;
    int rc = emb_cli_parse(cmd, argc, argv, opts, &args);
    if (rc >= 0) return rc;
    if ((rc = emb_cli_operands(cmd, &args, 2, 2, "IN OUT")) >= 0) return rc;
    emb_vectors_read_options ro = emb_vectors_read_options_default();
    emb_vectors_write_options wo = emb_vectors_write_options_default();
    if (from && emb_format_parse(from, &ro.format))
        return emb_cli_usage_error(cmd, "--from: %s", emb_errmsg());
    if (to && emb_format_parse(to, &wo.format))
        return emb_cli_usage_error(cmd, "--to: %s", emb_errmsg());
    emb_qtype qt = EMB_QTYPE_F32;
    if (dtype) {
        if (!strcmp(dtype, "f32") || !strcmp(dtype, "float32"))
            wo.dtype = EMB_FLOAT32;
        else if (!strcmp(dtype, "f16") || !strcmp(dtype, "float16"))
            wo.dtype = EMB_FLOAT16, qt = EMB_QTYPE_F16;
        else if (!strcmp(dtype, "bf16") || !strcmp(dtype, "bfloat16"))
            wo.dtype = EMB_BFLOAT16, qt = EMB_QTYPE_BF16;
        else if (!strcmp(dtype, "f64") || !strcmp(dtype, "float64"))
            wo.dtype = EMB_FLOAT64;
        else if (!strcmp(dtype, "int8"))
            qt = EMB_QTYPE_INT8;
        else if (!strcmp(dtype, "int4"))
            qt = EMB_QTYPE_INT4;
        else
            return emb_cli_usage_error(
                cmd, "invalid value '%s' for --dtype: expected f32, f16, bf16, f64, int8 or int4",
                dtype);
    }
    if (wo.format == EMB_FORMAT_AUTO && emb_format_from_path(args.v[1]) == EMB_FORMAT_AUTO)
        return emb_cli_usage_error(
            cmd,
            "cannot tell the output format from '%s': use a .safetensors, .npy, .bin, "
            ".vec or .txt name, or --to",
            args.v[1]);
    const emb_format out_fmt = wo.format ? wo.format : emb_format_from_path(args.v[1]);
    /* reduced-precision and quantized safetensors go through the table writer, which refuses
     * values the type cannot hold and records the error against the float32 rows */
    const bool qwrite = qt != EMB_QTYPE_F32 && out_fmt == EMB_FORMAT_SAFETENSORS;
    if ((qt == EMB_QTYPE_INT8 || qt == EMB_QTYPE_INT4) && out_fmt != EMB_FORMAT_SAFETENSORS)
        return emb_cli_usage_error(
            cmd, "--dtype %s tables are written as safetensors only (a .safetensors OUT)", dtype);
    if (qwrite && out_tensor)
        return emb_cli_usage_error(
            cmd, "--output-tensor: a %s table is always the tensor \"weight\"", dtype);
    ro.limit = limit;
    ro.tensor = tensor;
    ro.check_utf8 = !no_utf8;
    wo.tensor = out_tensor;
    wo.precision = (int)precision;
    wo.trailing_space = trailing;
    wo.binary_newline = !no_newline;
    emb_vectors v;
    emb_cli_watch_input(cmd, args.v[0]);
    if (emb_vectors_read(args.v[0], &ro, &v)) return emb_cli_fail(cmd, "%s", emb_errmsg());
    emb_qerror err;
    emb_status st;
    if (qwrite) {
        emb_qtable_writer *w;
        st = emb_qtable_writer_open(args.v[1], qt, v.weight.shape[0], v.weight.shape[1], v.vocab,
                                    &w);
        if (!st) {
            st = emb_qtable_writer_append(w, v.weight.data, v.weight.shape[0]);
            if (!st) st = emb_qtable_writer_commit(w, &err);
            emb_qtable_writer_free(w);
        }
    } else {
        st = emb_vectors_write(args.v[1], &v.weight, v.vocab, &wo);
    }
    if (st) {
        rc = emb_cli_fail(cmd, "%s", emb_errmsg());
        emb_vectors_release(&v);
        return rc;
    }
    fprintf(stderr, "emb convert: %s (%s, %lld x %lld) -> %s (%s%s%s)\n", args.v[0],
            emb_format_name(v.format), (long long)v.weight.shape[0], (long long)v.weight.shape[1],
            args.v[1], emb_format_name(out_fmt), qwrite ? ", " : "",
            qwrite ? emb_qtype_name(qt) : "");
    if (qwrite)
        fprintf(stderr,
                "emb convert: error against the float32 rows: max abs %.6g, mean abs %.6g, mean "
                "cosine %.9f\n",
                err.max_abs, err.mean_abs, err.mean_cosine);
    emb_vectors_release(&v);
    return EMB_CLI_OK;
}

const emb_cli_command emb_cli_cmd_convert = {
    "convert",
    "convert a vector file to another format or element type",
    "usage: emb convert [--from FORMAT] [--to FORMAT] [--dtype f32|f16|bf16|f64|int8|int4]\n"
    "                   [--limit N]\n"
    "                   [options] IN OUT\n"
    "\n"
    "Reads the table (and its words) from IN and writes them to OUT. The input format is\n"
    "recognised from IN's content; the output format comes from OUT's extension:\n"
    "  .safetensors   safetensors, one tensor \"weight\" (an nn.Embedding state_dict), the\n"
    "                 words in __metadata__ \"emb.vocab\" (docs/file-formats.md)\n"
    "  .npy           NumPy array; the words go to OUT's stem + \".vocab\" (\"word count\" lines)\n"
    "  .bin           word2vec binary\n"
    "  .vec, .txt     word2vec text (what fastText writes as .vec)\n"
    "OUT is written atomically: a temporary file in OUT's folder, renamed into place only\n"
    "when complete, so a failure leaves any previous OUT untouched. A one-line summary goes\n"
    "to standard error.\n"
    "\n"
    "options:\n"
    "  --from FORMAT      read IN as FORMAT: safetensors, npy, word2vec-text (txt, vec),\n"
    "                     word2vec-binary (bin), glove\n"
    "  --to FORMAT        write OUT as FORMAT (same names; glove = text without header)\n"
    "  --dtype TYPE       element type of a safetensors or .npy OUT: f32 (default), f16, bf16\n"
    "                     (safetensors only) or f64; rounding to nearest even, as torch does;\n"
    "                     int8 or int4 (safetensors only): 8-bit or 4-bit rowwise quantization,\n"
    "                     the bytes torch.ops.quantized.embedding_bag_byte_prepack /\n"
    "                     _4bit_prepack produce (docs/quantization.md). A safetensors OUT in\n"
    "                     f16, bf16, int8 or int4 refuses values the type cannot hold and\n"
    "                     reports the error against the float32 rows (max abs, mean abs, mean\n"
    "                     cosine), which `emb info` shows too\n"
    "  --limit N          convert only the first N rows (default 0: all)\n"
    "  --tensor NAME      safetensors IN: the tensor to read (default: \"weight\", else\n"
    "                     \"embedding.weight\", else the only 2-D floating-point tensor)\n"
    "  --output-tensor NAME  safetensors OUT: the tensor's name (default \"weight\")\n"
    "  --precision P      text OUT: print values with P significant digits (1-17); default 0:\n"
    "                     the shortest text that reads back as the same float32\n"
    "  --trailing-space   text OUT: a space after every value, as the word2vec tool and\n"
    "                     fastText write (default: none, as gensim writes)\n"
    "  --no-newline       word2vec binary OUT: no newline after each row (gensim's variant)\n"
    "  --no-utf8-check    accept words in IN that are not valid UTF-8\n"
    "\n"
    "exit status: 0 on success, 1 when IN cannot be read or OUT cannot be written, 2 on a\n"
    "usage error.\n"
    "\n"
    "examples:\n"
    "  emb convert GoogleNews-vectors-negative300.bin vectors.safetensors --dtype f16\n"
    "  emb convert vectors.bin vectors.int8.safetensors --dtype int8\n"
    "  emb convert glove.6B.100d.txt glove.bin --limit 50000\n"
    "  emb convert model.safetensors --tensor encoder.embed.weight table.npy\n",
    run,
};
