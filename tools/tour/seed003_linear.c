/* seed003_linear: "Embedding layer and Linear layer" (seed document 003) in C.
 *
 * nn.Embedding(4, 5) after torch.manual_seed(123), lookups of ids 1, 2 and [2, 3, 1],
 * their one-hot encoding, and a bias-free nn.Linear(4, 5) whose weight is set to the
 * embedding table transposed: Linear(one_hot(idx).float()) equals embedding(idx). The
 * document fixed the seed, so the output is the document's, character for character.
 *
 *   ./seed003_linear
 *
 * This file is the document's code: tour_seed003() below. The program is this file, the
 * helpers of seed_tour.c and the three-line main of seed_main.c; `emb demo` runs the
 * same function with commentary (see seed_tour.h).
 */
#include "seed_tour.h"

int tour_seed003(const tour_ctx *t) {
    enum { OUT_DIM = 5, N = 3 };
    int rc = 1;
    emb_embedding *embedding = NULL;
    emb_linear *linear = NULL;
    emb_tensor out = {0}, onehot = {0}, onehot_f = {0}, y = {0};

    tour_heading(t, "003: an embedding layer is a linear layer on one-hot inputs");
    int64_t ids[N] = {2, 3, 1}, n = N;
    emb_tensor idx;
    TOUR_TRY(emb_tensor_init(&idx, EMB_INT64, ids, 1, &n), "index tensor");
    int64_t num_idx = 0;
    TOUR_TRY(emb_one_hot_num_classes(&idx, -1, &num_idx), "max(idx) + 1");
    tour_say(t,
             "Three training samples with tag ids [2, 3, 1]; the table needs max(idx) + 1 "
             "= %" PRId64 " rows of %d.",
             num_idx, (int)OUT_DIM);
    tour_say(t, "manual_seed(123), then nn.Embedding(%" PRId64 ", %d):", num_idx, (int)OUT_DIM);
    emb_manual_seed(123);
    TOUR_TRY(emb_embedding_create(num_idx, OUT_DIM, NULL, &embedding), "nn.Embedding(4, 5)");
    emb_tensor w;
    TOUR_TRY(emb_embedding_weight(embedding, &w), "embedding weight");
    TOUR_TRY(tour_print_param(t, &w, emb_embedding_requires_grad(embedding)), "print");

    tour_say(t, "embedding(tensor([1])) is row 1 of the table, embedding(tensor([2])) row 2:");
    int64_t one = 1, id;
    emb_tensor single;
    TOUR_TRY(emb_tensor_init(&single, EMB_INT64, &id, 1, &one), "index tensor");
    for (id = 1; id <= 2; id++) {
        TOUR_TRY(tour_lookup(embedding, &single, &out), "embedding lookup");
        TOUR_TRY(tour_print(t, &out, tour_lookup_grad_fn(embedding), NULL), "print");
        emb_tensor_release(&out);
    }

    tour_say(t, "All three samples at once, embedding(idx): rows 2, 3 and 1.");
    TOUR_TRY(tour_lookup(embedding, &idx, &out), "embedding lookup");
    TOUR_TRY(tour_print(t, &out, tour_lookup_grad_fn(embedding), NULL), "print");
    emb_tensor_release(&out);

    tour_say(t, "The same ids one-hot encoded, F.one_hot(idx): a 1 in column idx[i] of row i.");
    int64_t oh_shape[2] = {N, num_idx};
    TOUR_TRY(emb_tensor_alloc(&onehot, EMB_INT64, 2, oh_shape), "one-hot tensor");
    TOUR_TRY(emb_one_hot(&idx, -1, &onehot), "one_hot");
    TOUR_TRY(tour_print(t, &onehot, NULL, NULL), "print");

    tour_say(t,
             "manual_seed(123), then nn.Linear(%" PRId64 ", %d, bias=False), with its own "
             "small random weight:",
             num_idx, (int)OUT_DIM);
    emb_manual_seed(123);
    TOUR_TRY(emb_linear_create(num_idx, OUT_DIM, false, NULL, &linear), "nn.Linear(4, 5)");
    emb_tensor lw;
    TOUR_TRY(emb_linear_weight(linear, &lw), "linear weight");
    TOUR_TRY(tour_print_param(t, &lw, true), "print");

    tour_say(t, "Give it the embedding's table, transposed (linear.weight = embedding.weight.T), "
                "and apply it to the one-hot rows:");
    const float *wd = w.data;
    float *lwd = lw.data;
    for (int64_t i = 0; i < num_idx; i++)
        for (int o = 0; o < OUT_DIM; o++) lwd[o * num_idx + i] = wd[i * OUT_DIM + o];
    TOUR_TRY(emb_tensor_alloc(&onehot_f, EMB_FLOAT32, 2, oh_shape), "one-hot tensor");
    TOUR_TRY(emb_one_hot(&idx, -1, &onehot_f), "one_hot(idx).float()");
    int64_t y_shape[2] = {N, OUT_DIM};
    TOUR_TRY(emb_tensor_alloc(&y, EMB_FLOAT32, 2, y_shape), "output tensor");
    TOUR_TRY(emb_linear_forward(linear, &onehot_f, &y), "linear forward");
    TOUR_TRY(tour_print(t, &y, "grad_fn=<MmBackward0>", NULL), "print");

    tour_say(t, "Exactly what the lookup returns, without multiplying by all those zeros:");
    TOUR_TRY(tour_lookup(embedding, &idx, &out), "embedding lookup");
    TOUR_TRY(tour_print(t, &out, tour_lookup_grad_fn(embedding), NULL), "print");

    rc = 0;
done:
    emb_tensor_release(&out);
    emb_tensor_release(&onehot);
    emb_tensor_release(&onehot_f);
    emb_tensor_release(&y);
    emb_linear_free(linear);
    emb_embedding_free(embedding);
    return rc;
}
