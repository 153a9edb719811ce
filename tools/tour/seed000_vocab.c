/* seed000_vocab: "What does an embedding layer do?" (seed document 000) in C.
 *
 * A six-letter vocabulary, token ids, an nn.Embedding(6, 2) created after
 * torch.manual_seed(0), the lookup of every letter, the table itself, and the same row
 * obtained as a one-hot vector times the table. The document fixed the seed, so the output
 * is the document's, character for character.
 *
 *   ./seed000_vocab
 *
 * This file is the document's code: tour_seed000() below. The program is this file, the
 * helpers of seed_tour.c and the three-line main of seed_main.c; `emb demo` runs the
 * same function with commentary (see seed_tour.h).
 */
#include "seed_tour.h"

int tour_seed000(const tour_ctx *t) {
    static const char *const vocab[] = {"a", "b", "c", "d", "e", "f"};
    enum { V = 6, D = 2 };
    int rc = 1;
    emb_embedding *layer = NULL;
    emb_generator *scratch = NULL;
    emb_linear *lin = NULL;

    tour_heading(t, "000: what does an embedding layer do?");
    tour_say(t, "An embedding layer maps each token of a vocabulary to a small dense vector.");
    tour_say(t, "Our vocabulary has six one-letter tokens:");
    fputc('[', t->out);
    for (int i = 0; i < V; i++) fprintf(t->out, "%s'%s'", i ? ", " : "", vocab[i]);
    fputs("]\n", t->out);

    tour_say(t, "Tokens must become integers first: the id of 'c' is its position, "
                "vocab.index('c'):");
    int64_t id = -1;
    for (int i = 0; i < V; i++)
        if (!strcmp(vocab[i], "c")) id = i;
    fprintf(t->out, "%" PRId64 "\n", id);

    tour_say(t, "Put in an int64 tensor, it is what an embedding layer takes as input:");
    int64_t one = 1;
    emb_tensor token;
    TOUR_TRY(emb_tensor_init(&token, EMB_INT64, &id, 1, &one), "index tensor");
    TOUR_TRY(tour_print(t, &token, NULL, NULL), "print");

    tour_say(t, "manual_seed(0), then nn.Embedding(6, 2): a 6 x 2 table drawn from N(0, 1).");
    tour_say(t, "Looking up each letter's id returns one row of the table (detached):");
    emb_manual_seed(0);
    TOUR_TRY(emb_embedding_create(V, D, NULL, &layer), "nn.Embedding(6, 2)");
    for (int i = 0; i < V; i++) {
        float row[D];
        int64_t out_shape[2] = {1, D};
        emb_tensor out;
        id = i;
        TOUR_TRY(emb_tensor_init(&out, EMB_FLOAT32, row, 2, out_shape), "output tensor");
        TOUR_TRY(emb_embedding_forward(layer, &token, &out), "embedding lookup");
        TOUR_TRY(tour_print(t, &out, NULL, NULL), "print");
    }

    tour_say(t, "The layer's only parameter is that table, a learnable lookup table:");
    emb_tensor w;
    TOUR_TRY(emb_embedding_weight(layer, &w), "embedding weight");
    TOUR_TRY(tour_print_param(t, &w, emb_embedding_requires_grad(layer)), "print");
    tour_print_shape(t, NULL, &w);

    tour_say(t, "A lookup is a matrix product in disguise: the one-hot vector of 'a' times "
                "the table, (weight.T @ onehot.T).T, is row 0 again:");
    /* The product goes through a bias-free Linear(6, 2) whose weight is the table's
     * transpose: y = onehot @ weight. Its own initialisation draws from a scratch generator
     * so that the default generator is left exactly as the document leaves it. */
    float onehot[V];
    int64_t oh_shape[2] = {1, V};
    emb_tensor oh;
    id = 0;
    TOUR_TRY(emb_tensor_init(&oh, EMB_FLOAT32, onehot, 2, oh_shape), "one-hot tensor");
    TOUR_TRY(emb_one_hot(&token, V, &oh), "one_hot");
    TOUR_TRY(emb_generator_create(0, &scratch), "generator");
    TOUR_TRY(emb_linear_create(V, D, false, scratch, &lin), "nn.Linear(6, 2)");
    emb_tensor lw;
    TOUR_TRY(emb_linear_weight(lin, &lw), "linear weight");
    const float *wd = w.data;
    float *lwd = lw.data;
    for (int v = 0; v < V; v++)
        for (int d = 0; d < D; d++) lwd[d * V + v] = wd[v * D + d];
    float yd[D];
    int64_t y_shape[2] = {1, D};
    emb_tensor y;
    TOUR_TRY(emb_tensor_init(&y, EMB_FLOAT32, yd, 2, y_shape), "output tensor");
    TOUR_TRY(emb_linear_forward(lin, &oh, &y), "one-hot product");
    TOUR_TRY(tour_print(t, &y, "grad_fn=<PermuteBackward0>", NULL), "print");

    rc = 0;
done:
    emb_linear_free(lin);
    emb_generator_free(scratch);
    emb_embedding_free(layer);
    return rc;
}
