/* seed004_words: "Word Embeddings in PyTorch" (seed document 004) in C.
 *
 * Five random "sentences" of three token ids over a vocabulary of 10, an
 * nn.Embedding(10, 4), the lookup of a single (0-d) id and of the whole [5, 3] batch,
 * which gives a [5, 3, 4] tensor. Lookups run as under torch.inference_mode(), so the
 * results carry no grad_fn.
 *
 * The document did not fix a seed, so this program seeds the default generator itself
 * (default 42, or the first argument) and prints it.
 *
 *   ./seed004_words [SEED]
 *
 * This file is the document's code: tour_seed004() below. The program is this file, the
 * helpers of seed_tour.c and the three-line main of seed_main.c; `emb demo` runs the
 * same function with commentary (see seed_tour.h).
 */
#include "seed_tour.h"

int tour_seed004(const tour_ctx *t) {
    enum { VOCABULARY_SIZE = 10, EMBEDDING_DIM = 4, BATCH_SIZE = 5, SEQ_LEN = 3 };
    int rc = 1;
    emb_embedding *embedding = NULL;
    emb_tensor out = {0};

    tour_heading(t, "004: word embeddings, a lookup table with one row per token");
    tour_say(t, "This document set no seed; we seed the generator so that the run can be "
                "compared with PyTorch:");
    fprintf(t->out, "manual_seed(%" PRIu64 ")\n", t->seed);
    emb_manual_seed(t->seed);

    tour_say(t, "Five sentences of three tokens each, random ids in [0, 10), "
                "torch.randint(0, 10, (5, 3)):");
    int64_t seq_data[BATCH_SIZE * SEQ_LEN];
    int64_t seq_shape[2] = {BATCH_SIZE, SEQ_LEN};
    emb_tensor sequence;
    TOUR_TRY(emb_tensor_init(&sequence, EMB_INT64, seq_data, 2, seq_shape), "index tensor");
    TOUR_TRY(emb_randint_(&sequence, 0, VOCABULARY_SIZE, NULL), "randint");
    TOUR_TRY(tour_print(t, &sequence, NULL, NULL), "print");

    tour_say(t, "nn.Embedding(num_embeddings=10, embedding_dim=4): one row of 4 per token, "
                "learned by backpropagation:");
    TOUR_TRY(emb_embedding_create(VOCABULARY_SIZE, EMBEDDING_DIM, NULL, &embedding),
             "nn.Embedding(10, 4)");
    emb_tensor w;
    TOUR_TRY(emb_embedding_weight(embedding, &w), "embedding weight");
    TOUR_TRY(tour_print_param(t, &w, emb_embedding_requires_grad(embedding)), "print");

    tour_say(t, "Token x gives back row x of the table; a 0-d id, torch.tensor(0), gives a "
                "vector:");
    int64_t zero = 0;
    emb_tensor scalar;
    TOUR_TRY(emb_tensor_init(&scalar, EMB_INT64, &zero, 0, NULL), "index tensor");
    TOUR_TRY(tour_lookup(embedding, &scalar, &out), "embedding lookup");
    TOUR_TRY(tour_print(t, &out, NULL, NULL), "print");
    emb_tensor_free(&out);

    tour_say(t, "The whole [5, 3] batch gives [5, 3, 4]: every id replaced by its row.");
    TOUR_TRY(tour_lookup(embedding, &sequence, &out), "embedding lookup");
    TOUR_TRY(tour_print(t, &out, NULL, NULL), "print");

    rc = 0;
done:
    emb_tensor_free(&out);
    emb_embedding_free(embedding);
    return rc;
}
