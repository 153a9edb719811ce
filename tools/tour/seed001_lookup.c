/* seed001_lookup: "embedding_layer" (seed document 001) in C.
 *
 * nn.Embedding(10, 3), lookups of random batches of ids and their shapes, an out-of-range
 * id and the error it gives, then a batch of 64 labels whose embeddings are concatenated
 * to 64 noise vectors, as a conditional generator's input would be.
 *
 * The document did not fix a seed, so this program seeds the default generator itself
 * (default 42, or the first argument) and prints it; PyTorch prints the same numbers after
 * torch.manual_seed with that seed and the same sequence of calls.
 *
 *   ./seed001_lookup [SEED]
 *
 * This file is the document's code: tour_seed001() below. The program is this file, the
 * helpers of seed_tour.c and the three-line main of seed_main.c; `emb demo` runs the
 * same function with commentary (see seed_tour.h).
 */
#include "seed_tour.h"

int tour_seed001(const tour_ctx *t) {
    enum { V = 10, D = 3, BATCH = 64, NOISE = 10 };
    int rc = 1;
    emb_embedding *emb = NULL;
    emb_tensor x = {0}, out = {0}, labels = {0}, noise = {0}, emb_out = {0}, cat = {0};

    tour_heading(t, "001: the embedding layer, a table of 10 x 3");
    tour_say(t, "This document set no seed; we seed the generator so that the run can be "
                "compared with PyTorch:");
    fprintf(t->out, "manual_seed(%" PRIu64 ")\n", t->seed);
    emb_manual_seed(t->seed);

    tour_say(t, "nn.Embedding(10, 3): a dictionary of 10 entries, each a vector of size 3.");
    TOUR_TRY(emb_embedding_create(V, D, NULL, &emb), "nn.Embedding(10, 3)");
    emb_tensor w;
    TOUR_TRY(emb_embedding_weight(emb, &w), "embedding weight");
    TOUR_TRY(tour_print_param(t, &w, emb_embedding_requires_grad(emb)), "print");

    tour_say(t, "Ten random ids in [0, 10), torch.randint(0, 10, (10,)), and their lookup:");
    tour_say(t, "every id becomes a row of 3, whatever the input's shape.");
    int64_t n = 10;
    TOUR_TRY(emb_tensor_alloc(&x, EMB_INT64, 1, &n), "index tensor");
    TOUR_TRY(emb_randint_(&x, 0, V, NULL), "randint");
    tour_print_shape(t, NULL, &x);
    TOUR_TRY(tour_lookup(emb, &x, &out), "embedding lookup");
    tour_print_shape(t, NULL, &out);
    emb_tensor_release(&x);
    emb_tensor_release(&out);

    tour_say(t, "The same with five ids:");
    n = 5;
    TOUR_TRY(emb_tensor_alloc(&x, EMB_INT64, 1, &n), "index tensor");
    TOUR_TRY(emb_randint_(&x, 0, V, NULL), "randint");
    tour_print_shape(t, NULL, &x);
    TOUR_TRY(tour_lookup(emb, &x, &out), "embedding lookup");
    tour_print_shape(t, NULL, &out);
    TOUR_TRY(tour_print(t, &x, NULL, NULL), "print");
    emb_tensor_release(&out);

    tour_say(t, "The weights are unchanged by lookups:");
    TOUR_TRY(tour_print_param(t, &w, emb_embedding_requires_grad(emb)), "print");

    tour_say(t, "Looking up ids [0, 1] and [2, 3, 4] returns those rows of the table:");
    int64_t ids01[] = {0, 1}, ids234[] = {2, 3, 4};
    int64_t n2 = 2, n3 = 3;
    emb_tensor idx;
    TOUR_TRY(emb_tensor_init(&idx, EMB_INT64, ids01, 1, &n2), "index tensor");
    TOUR_TRY(tour_lookup(emb, &idx, &out), "embedding lookup");
    TOUR_TRY(tour_print(t, &out, tour_lookup_grad_fn(emb), NULL), "print");
    emb_tensor_release(&out);
    TOUR_TRY(emb_tensor_init(&idx, EMB_INT64, ids234, 1, &n3), "index tensor");
    TOUR_TRY(tour_lookup(emb, &idx, &out), "embedding lookup");
    TOUR_TRY(tour_print(t, &out, tour_lookup_grad_fn(emb), NULL), "print");
    emb_tensor_release(&out);

    tour_say(t, "Id 10 is not in a table of 10 rows: PyTorch raises \"IndexError: index out "
                "of range in self\"; emb returns an error status and says which index:");
    int64_t ten = 10, one = 1;
    float scratch[D] = {0};
    int64_t scratch_shape[2] = {1, D};
    emb_tensor bad_out;
    TOUR_TRY(emb_tensor_init(&idx, EMB_INT64, &ten, 1, &one), "index tensor");
    TOUR_TRY(emb_tensor_init(&bad_out, EMB_FLOAT32, scratch, 2, scratch_shape), "output");
    emb_status s = emb_embedding_forward(emb, &idx, &bad_out);
    if (s == EMB_OK) {
        fprintf(stderr, "emb: embedding lookup: index 10 was accepted by a table of 10 rows\n");
        goto done;
    }
    fprintf(t->out, "error: emb_embedding_forward(tensor([10])) returned %d (%s): %s\n", (int)s,
            emb_status_str(s), emb_errmsg());

    tour_say(t, "In a network: a new nn.Embedding(10, 3) and a batch of 64 labels,");
    emb_embedding_free(emb);
    emb = NULL;
    TOUR_TRY(emb_embedding_create(V, D, NULL, &emb), "nn.Embedding(10, 3)");
    TOUR_TRY(emb_embedding_weight(emb, &w), "embedding weight");
    int64_t nb = BATCH;
    TOUR_TRY(emb_tensor_alloc(&labels, EMB_INT64, 1, &nb), "label tensor");
    TOUR_TRY(emb_randint_(&labels, 0, V, NULL), "randint");
    tour_print_shape(t, NULL, &labels);

    tour_say(t, "64 noise vectors of size 10, torch.randn(64, 10),");
    int64_t noise_shape[2] = {BATCH, NOISE};
    TOUR_TRY(emb_tensor_alloc(&noise, EMB_FLOAT32, 2, noise_shape), "noise tensor");
    TOUR_TRY(emb_randn_(&noise, NULL), "randn");
    tour_print_shape(t, NULL, &noise);

    tour_say(t, "one embedding per label: batch size x embedding size,");
    TOUR_TRY(tour_lookup(emb, &labels, &emb_out), "embedding lookup");
    tour_print_shape(t, NULL, &emb_out);

    tour_say(t, "and torch.cat((noise, embeddings), dim=1): each row is its noise followed by "
                "its label's embedding.");
    int64_t cat_shape[2] = {BATCH, NOISE + D};
    TOUR_TRY(emb_tensor_alloc(&cat, EMB_FLOAT32, 2, cat_shape), "concatenation");
    for (int64_t r = 0; r < BATCH; r++) {
        float *dst = (float *)cat.data + r * (NOISE + D);
        memcpy(dst, (const float *)noise.data + r * NOISE, NOISE * sizeof(float));
        memcpy(dst + NOISE, (const float *)emb_out.data + r * D, D * sizeof(float));
    }
    tour_print_shape(t, NULL, &cat);

    tour_say(t, "The first noise vector, row 0 of the table, and the first concatenated row:");
    emb_tensor row = tour_row(&noise, 0);
    TOUR_TRY(tour_print(t, &row, NULL, NULL), "print");
    const char *select_fn = emb_embedding_requires_grad(emb) ? "grad_fn=<SelectBackward0>" : NULL;
    row = tour_row(&w, 0);
    TOUR_TRY(tour_print(t, &row, select_fn, NULL), "print");
    row = tour_row(&cat, 0);
    TOUR_TRY(tour_print(t, &row, select_fn, NULL), "print");
    tour_say(t,
             "Its last 3 values are the embedding of its own label, labels[0] = %" PRId64
             ", so they equal row 0 of the table only when that label is 0.",
             ((const int64_t *)labels.data)[0]);

    tour_say(t, "For a time series model, unsqueeze(-1) adds a feature dimension of 1:");
    cat.ndim = 3;
    cat.shape[2] = 1;
    tour_print_shape(t, NULL, &cat);
    row = tour_row(&cat, 0);
    TOUR_TRY(tour_print(t, &row, select_fn, NULL), "print");

    rc = 0;
done:
    emb_tensor_release(&x);
    emb_tensor_release(&out);
    emb_tensor_release(&labels);
    emb_tensor_release(&noise);
    emb_tensor_release(&emb_out);
    emb_tensor_release(&cat);
    emb_embedding_free(emb);
    return rc;
}
