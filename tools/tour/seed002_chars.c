/* seed002_chars: "WTF does nn.Embedding do?" (seed document 002) in C.
 *
 * A character tokenizer over Python's string.printable (100 characters), the embedding of
 * a sentence and of the letter 'a', then nn.Linear vs nn.Embedding: a bias-free
 * Linear(4, 3) applied to a 0/1 vector gives the same numbers as summing the rows of
 * Embedding.from_pretrained(W.T) picked by the vector's non-zero entries.
 *
 * The document did not fix a seed, so this program seeds the default generator itself
 * (default 42, or the first argument) and prints it.
 *
 *   ./seed002_chars [SEED]
 *
 * This file is the document's code: tour_seed002() below. The program is this file, the
 * helpers of seed_tour.c and the three-line main of seed_main.c; `emb demo` runs the
 * same function with commentary (see seed_tour.h).
 */
#include "seed_tour.h"

/* Python's string.printable: digits, ASCII letters, punctuation, then whitespace. */
static const char tour_printable[] = "0123456789"
                                     "abcdefghijklmnopqrstuvwxyz"
                                     "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
                                     "!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~"
                                     " \t\n\r\x0b\x0c";

/* tokenizer[c]: the position of c in string.printable, or -1. */
static int64_t tour_char_token(char c) {
    const char *p = c ? strchr(tour_printable, c) : NULL;
    return p ? (int64_t)(p - tour_printable) : -1;
}

int tour_seed002(const tour_ctx *t) {
    enum { N_CHARS = sizeof tour_printable - 1, EMBED_DIM = 10, IN = 4, OUT = 3 };
    static const char input_string[] = "WTF does nn.Embedding do?";
    enum { SEQ = sizeof input_string - 1 };
    int rc = 1;
    emb_embedding *embedding = NULL, *unused = NULL, *w_embedding = NULL;
    emb_linear *w_linear = NULL;
    emb_tensor out = {0};

    tour_heading(t, "002: WTF does nn.Embedding do?");
    tour_say(t, "This document set no seed; we seed the generator so that the run can be "
                "compared with PyTorch:");
    fprintf(t->out, "manual_seed(%" PRIu64 ")\n", t->seed);
    emb_manual_seed(t->seed);

    tour_say(t,
             "A character tokenizer: each of the %d characters of Python's "
             "string.printable gets its position as id.",
             (int)N_CHARS);
    tour_say(t, "\"%s\" becomes a batch of one sequence of %d ids:", input_string, (int)SEQ);
    int64_t ids[SEQ];
    for (int i = 0; i < SEQ; i++) ids[i] = tour_char_token(input_string[i]);
    int64_t in_shape[2] = {1, SEQ};
    emb_tensor input;
    TOUR_TRY(emb_tensor_init(&input, EMB_INT64, ids, 2, in_shape), "index tensor");
    tour_print_shape(t, "Input Tensor Shape: ", &input);

    tour_say(t, "nn.Embedding(100, 10) turns every id into a vector of 10: "
                "(batch, seq_len, embed_dim).");
    TOUR_TRY(emb_embedding_create(N_CHARS, EMBED_DIM, NULL, &embedding), "nn.Embedding(100, 10)");
    TOUR_TRY(tour_lookup(embedding, &input, &out), "embedding lookup");
    tour_print_shape(t, "Output Tensor Shape: ", &out);
    emb_tensor_release(&out);

    tour_say(t,
             "The embedding of the single character 'a' (id %" PRId64 "):", tour_char_token('a'));
    int64_t a_id = tour_char_token('a');
    int64_t a_shape[2] = {1, 1};
    emb_tensor a_tokenized;
    TOUR_TRY(emb_tensor_init(&a_tokenized, EMB_INT64, &a_id, 2, a_shape), "index tensor");
    TOUR_TRY(tour_lookup(embedding, &a_tokenized, &out), "embedding lookup");
    fputs("Embedding for 'a': ", t->out);
    TOUR_TRY(tour_print(t, &out, tour_lookup_grad_fn(embedding), NULL), "print");
    emb_tensor_release(&out);

    tour_say(t, "nn.Linear vs nn.Embedding. Three 0/1 samples of 4 features, and "
                "nn.Linear(4, 3, bias=False):");
    float x[3][IN] = {{1, 0, 1, 0}, {0, 0, 1, 1}, {1, 1, 1, 0}};
    TOUR_TRY(emb_linear_create(IN, OUT, false, NULL, &w_linear), "nn.Linear(4, 3)");
    emb_tensor lw;
    TOUR_TRY(emb_linear_weight(w_linear, &lw), "linear weight");
    TOUR_TRY(tour_print_param(t, &lw, true), "print");

    tour_say(t, "The layer applied to the first sample, x[0] = [1, 0, 1, 0]:");
    int64_t in_features = IN, out_features = OUT;
    float y[OUT];
    emb_tensor x0, y0;
    TOUR_TRY(emb_tensor_init(&x0, EMB_FLOAT32, x[0], 1, &in_features), "input tensor");
    TOUR_TRY(emb_tensor_init(&y0, EMB_FLOAT32, y, 1, &out_features), "output tensor");
    TOUR_TRY(emb_linear_forward(w_linear, &x0, &y0), "linear forward");
    /* PyTorch 1.13 names the autograd node of a 1-D Linear SqueezeBackward3 (the document,
     * run on another version, shows SqueezeBackward4). */
    TOUR_TRY(tour_print(t, &y0, "grad_fn=<SqueezeBackward3>", NULL), "print");

    tour_say(t, "An embedding whose table is the Linear weight transposed, "
                "nn.Embedding(4, 3).from_pretrained(w_linear.weight.t()) (frozen):");
    /* The document calls from_pretrained on a fresh nn.Embedding(4, 3), whose own
     * initialisation draws from the generator: do the same so the stream stays aligned. */
    TOUR_TRY(emb_embedding_create(IN, OUT, NULL, &unused), "nn.Embedding(4, 3)");
    float wt[IN][OUT];
    const float *lwd = lw.data;
    for (int i = 0; i < IN; i++)
        for (int o = 0; o < OUT; o++) wt[i][o] = lwd[o * IN + i];
    int64_t wt_shape[2] = {IN, OUT};
    emb_tensor wt_tensor;
    TOUR_TRY(emb_tensor_init(&wt_tensor, EMB_FLOAT32, wt, 2, wt_shape), "weight tensor");
    TOUR_TRY(emb_embedding_from_pretrained(&wt_tensor, true, NULL, &w_embedding),
             "Embedding.from_pretrained");
    emb_tensor ew;
    TOUR_TRY(emb_embedding_weight(w_embedding, &ew), "embedding weight");
    TOUR_TRY(tour_print_param(t, &ew, emb_embedding_requires_grad(w_embedding)), "print");

    tour_say(t, "Look up the ids of x[0]'s non-zero entries and sum the rows: the Linear "
                "output again.");
    int64_t nz[IN], n_nz = 0;
    for (int i = 0; i < IN; i++)
        if (x[0][i] != 0.0f) nz[n_nz++] = i;
    emb_tensor row_indices;
    TOUR_TRY(emb_tensor_init(&row_indices, EMB_INT64, nz, 1, &n_nz), "index tensor");
    TOUR_TRY(tour_lookup(w_embedding, &row_indices, &out), "embedding lookup");
    float sum[OUT] = {0};
    const float *rows = out.data;
    for (int64_t r = 0; r < n_nz; r++)
        for (int o = 0; o < OUT; o++) sum[o] += rows[r * OUT + o];
    emb_tensor sum_tensor;
    TOUR_TRY(emb_tensor_init(&sum_tensor, EMB_FLOAT32, sum, 1, &out_features), "sum tensor");
    /* A frozen table: no autograd history, so no grad_fn. */
    TOUR_TRY(tour_print(t, &sum_tensor,
                        emb_embedding_requires_grad(w_embedding) ? "grad_fn=<SumBackward1>" : NULL,
                        NULL),
             "print");

    rc = 0;
done:
    emb_tensor_release(&out);
    emb_embedding_free(w_embedding);
    emb_embedding_free(unused);
    emb_linear_free(w_linear);
    emb_embedding_free(embedding);
    return rc;
}
