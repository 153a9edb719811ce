/* emb serve: a table over HTTP (docs/serve.md). */
#include "../cli.h"
#include "serve.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static bool is_loopback(const char *host) {
    return strcmp(host, "localhost") == 0 || strncmp(host, "127.", 4) == 0 ||
           strcmp(host, "::1") == 0;
}

static int run(const emb_cli_command *cmd, int argc, char **argv) {
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    serve_options so = {"127.0.0.1", 8080, ncpu > 0 ? ncpu : 2, 256, 30, 30, NULL, NULL, false};
    serve_limits lim = {4 << 20, 2048, 1000, 3000, 8192};
    serve_table_options to = {NULL, NULL, 0, true};
    bool no_utf8 = false;
    const emb_cli_option opts[] = {
        {"port", 'p', NULL, EMB_CLI_INT, &so.port, 0, 65535, 0, 0},
        {"host", 0, NULL, EMB_CLI_STRING, &so.host, 0, 0, 0, 0},
        {"threads", 't', NULL, EMB_CLI_INT, &so.threads, 1, 256, 0, 0},
        {"connections", 0, NULL, EMB_CLI_INT, &so.connections, 1, 100000, 0, 0},
        {"timeout", 0, NULL, EMB_CLI_INT, &so.timeout, 1, 86400, 0, 0},
        {"drain-timeout", 0, NULL, EMB_CLI_INT, &so.drain_timeout, 0, 86400, 0, 0},
        {"max-body", 0, NULL, EMB_CLI_INT, &lim.max_body, 64, (int64_t)1 << 30, 0, 0},
        {"max-batch", 0, NULL, EMB_CLI_INT, &lim.max_batch, 1, 1000000, 0, 0},
        {"max-topn", 0, NULL, EMB_CLI_INT, &lim.max_topn, 1, 1000000, 0, 0},
        {"max-map", 0, NULL, EMB_CLI_INT, &lim.max_map, 2, 100000, 0, 0},
        {"max-tokens", 0, NULL, EMB_CLI_INT, &lim.max_tokens, 1, 100000000, 0, 0},
        {"restrict", 0, NULL, EMB_CLI_INT, &to.restrict_rows, 0, INT64_MAX, 0, 0},
        {"model", 0, NULL, EMB_CLI_STRING, &to.model, 0, 0, 0, 0},
        {"tensor", 0, NULL, EMB_CLI_STRING, &to.tensor, 0, 0, 0, 0},
        {"cors", 0, NULL, EMB_CLI_STRING, &so.cors, 0, 0, 0, 0},
        {"api-key", 0, NULL, EMB_CLI_STRING, &so.api_key, 0, 0, 0, 0},
        {"no-utf8-check", 0, NULL, EMB_CLI_FLAG, &no_utf8, 0, 0, 0, 0},
        {"quiet", 'q', NULL, EMB_CLI_FLAG, &so.quiet, 0, 0, 0, 0},
        {NULL, 0, NULL, EMB_CLI_FLAG, NULL, 0, 0, 0, 0},
    };
    emb_cli_args args;
    int rc = emb_cli_parse(cmd, argc, argv, opts, &args);
    if (rc >= 0) return rc;
    if ((rc = emb_cli_operands(cmd, &args, 1, 1, "TABLE")) >= 0) return rc;
    if (so.api_key && !*so.api_key) return emb_cli_usage_error(cmd, "--api-key must not be empty");
    if (so.cors && (!*so.cors || strpbrk(so.cors, "\r\n")))
        return emb_cli_usage_error(cmd,
                                   "--cors must be an origin such as http://localhost:3000 or *");
    to.check_utf8 = !no_utf8;
    if (!is_loopback(so.host) && !so.quiet)
        fprintf(stderr,
                "emb serve: warning: listening on %s, not loopback: anyone who can reach "
                "it can query the table%s\n",
                so.host, so.api_key ? "" : " (no --api-key)");
    /* Requests run on the server's worker threads, each request on one: emb's own loops stay
     * on the calling thread, so that the workers do not compete with a thread team each. */
    emb_set_num_threads(1);
    serve_table t;
    char err[1024];
    if (!serve_table_open(args.v[0], &to, &t, err, sizeof err)) return emb_cli_fail(cmd, "%s", err);
    serve_ctx ctx = {&t, lim, serve_maps_create()};
    if (!ctx.maps) {
        serve_table_close(&t);
        return emb_cli_fail(cmd, "out of memory");
    }
    rc = serve_http_run(&ctx, &so);
    serve_maps_free(ctx.maps);
    serve_table_close(&t);
    return rc;
}

const emb_cli_command emb_cli_cmd_serve = {
    "serve",
    "serve a table over HTTP: embeddings, neighbours, analogies, a page to explore it",
    "usage: emb serve [--port N] [--host ADDR] [--threads N] [options] TABLE\n"
    "\n"
    "Serves the table in TABLE (any file emb reads: word2vec text or binary, GloVe, fastText\n"
    ".vec, .npy, safetensors in f32, f16, bf16, int8 or int4) over HTTP until SIGTERM or\n"
    "Ctrl-C. safetensors tables are mapped read-only, not read: several servers of one file\n"
    "share one copy in memory. The other formats are read into memory. Once listening, the\n"
    "server prints its address on standard output (http://127.0.0.1:8080/).\n"
    "\n"
    "The API (JSON; docs/serve.md):\n"
    "  POST /v1/embeddings      OpenAI's, llama.cpp's and ollama's embeddings endpoint:\n"
    "                           {\"input\": text or [texts] or [ids] or [[ids]]}; a text's\n"
    "                           vector is the EmbeddingBag mean of its known words' rows\n"
    "  POST /api/embed          ollama's form of the same\n"
    "  POST /v1/most_similar    {\"positive\": [...], \"negative\": [...], \"topn\": 10}\n"
    "  POST /v1/similarity      {\"w1\": ..., \"w2\": ...}\n"
    "  POST /v1/doesnt_match    {\"words\": [...]}\n"
    "  POST /v1/analogy         {\"a\", \"b\", \"c\", \"topn\"}: a is to b as c is to ?\n"
    "  POST /v1/lookup          {\"ids\": [...]} or {\"words\": [...]}: the rows\n"
    "  POST /v1/map             2-D coordinates (PCA or t-SNE) of the first rows or of a\n"
    "                           query's neighbourhood\n"
    "  GET  /v1/models, /v1/info, /health\n"
    "and a page at / to explore the table: neighbours, analogies, a map.\n"
    "Words may be given as row ids (integers); tables without words take ids only.\n"
    "\n"
    "options:\n"
    "  -p, --port N         TCP port (default 8080; 0: any free port)\n"
    "  --host ADDR          address to listen on (default 127.0.0.1, loopback only)\n"
    "  -t, --threads N      worker threads (default: the number of CPUs)\n"
    "  --connections N      connections open at once, more are closed (default 256)\n"
    "  --timeout S          seconds a connection may stay idle (default 30)\n"
    "  --drain-timeout S    on SIGTERM, seconds to wait for requests in flight (default 30)\n"
    "  --max-body BYTES     largest request body (default 4194304); larger: 413\n"
    "  --max-batch N        inputs of one request (default 2048)\n"
    "  --max-tokens N       words of one input text (default 8192)\n"
    "  --max-topn N         largest topn (default 1000)\n"
    "  --max-map N          most points of a map (default 3000)\n"
    "  --restrict N         search only the first N rows (default 0: all), as gensim's\n"
    "                       restrict_vocab\n"
    "  --model NAME         the model name clients see (default: TABLE's file name)\n"
    "  --tensor NAME        safetensors: the tensor to read (then read, not mapped)\n"
    "  --cors ORIGIN        allow pages from ORIGIN (or *) to call the API\n"
    "  --api-key KEY        require \"Authorization: Bearer KEY\" on the API\n"
    "  --no-utf8-check      accept words in TABLE that are not valid UTF-8\n"
    "  -q, --quiet          no messages on standard error\n"
    "\n"
    "exit status: 0 after SIGTERM or SIGINT once the requests in flight are answered; 1 when\n"
    "TABLE cannot be read, the address cannot be used, or requests were still in flight\n"
    "after --drain-timeout; 2 on a usage error.\n"
    "\n"
    "examples:\n"
    "  emb serve vectors.bin\n"
    "  emb serve --port 9000 --threads 4 table.int8.safetensors\n"
    "  curl -s localhost:8080/v1/embeddings -d '{\"input\": \"the king\"}'\n",
    run,
};
