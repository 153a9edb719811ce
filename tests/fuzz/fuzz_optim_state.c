/* libFuzzer harness of emb_optimizer_load_state, the parser of saved optimizer state
 * (docs/optimizer-state.md). Input: byte 0 picks the optimizer kind, byte 1 its options and
 * whether the harness re-seals the checksum (so that mutations reach the checks behind it),
 * the rest is the state. Oracles: a refused load leaves the optimizer's saved bytes exactly
 * as before; an accepted load saves back to exactly the loaded bytes, and the optimizer then
 * steps (dense and sparse) without fault. Seeds: tests/fuzz/corpus/fuzz_optim_state. */
#include <emb/emb.h>

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static uint64_t fnv1a64(const uint8_t *p, size_t n) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < n; i++) h = (h ^ p[i]) * 0x100000001b3ull;
    return h;
}

static uint8_t *save(const emb_optimizer *opt, size_t *n) {
    *n = emb_optimizer_state_nbytes(opt);
    uint8_t *b = malloc(*n ? *n : 1);
    if (!b || emb_optimizer_save_state(opt, b, *n) != EMB_OK) abort();
    return b;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 2) return 0;
    const emb_optimizer_kind kind = (emb_optimizer_kind)(data[0] % 5);
    const uint8_t sel = data[1];
    emb_optimizer_options o = emb_optimizer_options_default(kind);
    if (kind == EMB_OPTIMIZER_SGD && (sel & 1)) o.momentum = 0.9;
    if ((kind == EMB_OPTIMIZER_ADAM || kind == EMB_OPTIMIZER_ADAMW) && (sel & 2)) o.amsgrad = true;
    emb_optimizer *opt = NULL;
    if (emb_optimizer_create(&o, &opt) != EMB_OK) abort();
    static float p0[3 * 2], p1[4];
    memset(p0, 0, sizeof p0);
    memset(p1, 0, sizeof p1);
    emb_tensor t0, t1;
    if (emb_tensor_init(&t0, EMB_FLOAT32, p0, 2, (const int64_t[]){3, 2}) ||
        emb_tensor_init(&t1, EMB_FLOAT32, p1, 1, (const int64_t[]){4}) ||
        emb_optimizer_add_param(opt, &t0, NULL) || emb_optimizer_add_param(opt, &t1, NULL))
        abort();

    size_t n = size - 2;
    uint8_t *state = malloc(n ? n : 1);
    if (!state) abort();
    memcpy(state, data + 2, n);
    if ((sel & 0x80) && n >= 8) {
        uint64_t h = fnv1a64(state, n - 8);
        for (int i = 0; i < 8; i++) state[n - 8 + i] = (uint8_t)(h >> (8 * i));
    }
    size_t nb;
    uint8_t *before = save(opt, &nb);
    emb_status st = emb_optimizer_load_state(opt, state, n);
    size_t na;
    uint8_t *after = save(opt, &na);
    if (st != EMB_OK) {
        if (st != EMB_ERR_FORMAT || na != nb || memcmp(before, after, nb)) abort();
    } else {
        if (na != n || memcmp(after, state, n)) abort();
        /* the loaded optimizer steps: dense where the kind takes it, sparse where it does */
        float g0[3 * 2] = {0.5f, -1.0f, 0.25f, 2.0f, -0.5f, 1.0f};
        emb_tensor tg;
        if (emb_tensor_init(&tg, EMB_FLOAT32, g0, 2, (const int64_t[]){3, 2})) abort();
        (void)emb_optimizer_step(opt, 0, &tg);
        int64_t rows[2] = {2, 0};
        emb_tensor tr, tv;
        if (emb_tensor_init(&tr, EMB_INT64, rows, 1, (const int64_t[]){2}) ||
            emb_tensor_init(&tv, EMB_FLOAT32, g0, 2, (const int64_t[]){2, 2}))
            abort();
        emb_sparse_grad sg;
        if (emb_sparse_grad_from_rows(&sg, 3, 2, &tr, &tv)) abort();
        (void)emb_optimizer_step_sparse(opt, 0, &sg);
        emb_sparse_grad_release(&sg);
    }
    free(before);
    free(after);
    free(state);
    emb_optimizer_free(opt);
    return 0;
}
