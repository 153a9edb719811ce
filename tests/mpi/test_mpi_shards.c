/* Shards in memory the table does not allocate, under mpirun at 1, 2 and 4 ranks against the
 * single-process library on the joined batch: rows the caller keeps (emb_mpi_table_wrap:
 * forwards, Adagrad steps writing the caller's rows) and a safetensors file each rank maps
 * (emb_mpi_table_map_safetensors: forwards and gradients, steps refused as read-only). */
#include "mpi_check.h"

#include <unistd.h>

static void run_wrap(emb_mpi_sharding sh, uint64_t seed) {
    const int64_t V = 29, D = 6;
    emb_bag_options bo = emb_bag_options_default();
    bo.mode = EMB_BAG_MEAN;
    emb_mpi_shard_options so = emb_mpi_shard_options_default();
    so.sharding = sh;
    so.owner = size_ - 1;
    emb_manual_seed(seed);
    emb_bag *ref = NULL;
    OK(emb_bag_create(V, D, &bo, &ref));
    emb_tensor w;
    OK(emb_bag_weight(ref, &w));
    /* this rank's rows, as the placement gives them */
    int64_t b0 = sh == EMB_MPI_ROW_WISE ? V * rank_ / size_ : (rank_ <= so.owner ? 0 : V);
    int64_t b1 = sh == EMB_MPI_ROW_WISE ? V * (rank_ + 1) / size_ : (rank_ < so.owner ? 0 : V);
    int64_t rs[2] = {b1 - b0, D};
    float *mine = malloc((size_t)((b1 - b0) * D + 1) * sizeof *mine);
    memcpy(mine, (float *)w.data + b0 * D, (size_t)((b1 - b0) * D) * sizeof *mine);
    emb_tensor rows = view(EMB_FLOAT32, mine, 2, rs);
    emb_mpi_table *t = NULL;
    OK(emb_mpi_table_wrap(MPI_COMM_WORLD, V, &rows, &bo, &so, &t));
    if (!t) return;
    int64_t g0, g1;
    emb_mpi_table_rows(t, &g0, &g1);
    CHECK(g0 == b0 && g1 == b1, "wrapped rows [%" PRId64 ", %" PRId64 ")", g0, g1);
    emb_optimizer_options oo = emb_optimizer_options_default(EMB_OPTIMIZER_ADAGRAD);
    OK(emb_mpi_table_set_optimizer(t, &oo));
    emb_optimizer *ropt = NULL;
    OK(emb_optimizer_create(&oo, &ropt));
    OK(emb_optimizer_add_param(ropt, &w, NULL));
    emb_generator *g = NULL;
    OK(emb_generator_create(seed + 9, &g));
    for (int step = 0; step < 3; step++) {
        joined j;
        make_joined(&j, g, V, D, -1, false);
        OK(emb_bag_forward(ref, &j.gin, &j.goff, NULL, &j.ro, NULL));
        OK(emb_mpi_table_bag_forward(t, &j.q.input, &j.q.offsets, NULL, &j.lo, NULL));
        check_forward(&j, &j.b, false, "wrapped");
        OK(emb_optimizer_step_fused_bag(ropt, 0, ref, &j.gin, &j.goff, NULL, &j.ggo));
        OK(emb_mpi_table_bag_step(t, &j.q.input, &j.q.offsets, NULL, &j.q.gout));
        CHECK(same_rows(mine, (float *)w.data + b0 * D, (b1 - b0) * D),
              "the caller's rows differ from the single process's after a step");
        free_joined(&j);
    }
    emb_mpi_table_free(t);
    CHECK(same_rows(mine, (float *)w.data + b0 * D, (b1 - b0) * D),
          "freeing the table changed the caller's rows");
    /* a row count that is not this rank's */
    int64_t bad[2] = {b1 - b0 + (rank_ == 0), D};
    float *more = malloc((size_t)((b1 - b0 + 1) * D) * sizeof *more);
    emb_tensor wrong = view(EMB_FLOAT32, more, 2, bad);
    t = NULL;
    emb_status st = emb_mpi_table_wrap(MPI_COMM_WORLD, V, &wrong, &bo, &so, &t);
    CHECK(st == EMB_ERR_SHAPE && t == NULL, "a wrong row count on rank 0 gave %d", st);
    free(more);
    free(mine);
    emb_generator_free(g);
    emb_optimizer_free(ropt);
    emb_bag_free(ref);
}

static void run_map(emb_mpi_sharding sh, uint64_t seed) {
    const int64_t V = 31, D = 5;
    emb_bag_options bo = emb_bag_options_default();
    emb_mpi_shard_options so = emb_mpi_shard_options_default();
    so.sharding = sh;
    so.owner = 0;
    emb_manual_seed(seed);
    emb_bag *ref = NULL;
    OK(emb_bag_create(V, D, &bo, &ref));
    emb_tensor w;
    OK(emb_bag_weight(ref, &w));
    char path[256] = "";
    if (rank_ == 0) { /* one file, written by rank 0 */
        const char *tmp = getenv("TMPDIR");
        snprintf(path, sizeof path, "%s/emb_mpi_map_XXXXXX", tmp && *tmp ? tmp : "/tmp");
        int fd = mkstemp(path);
        if (fd >= 0) close(fd);
        const char *names[1] = {"table"};
        OK(emb_safetensors_write(path, 1, names, &w, 0, NULL, NULL));
    }
    MPI_Bcast(path, (int)sizeof path, MPI_CHAR, 0, MPI_COMM_WORLD);
    emb_mpi_table *t = NULL;
    OK(emb_mpi_table_map_safetensors(MPI_COMM_WORLD, path, "table", &bo, &so, &t));
    if (t) {
        check_shard(t, ref, "mapped");
        emb_generator *g = NULL;
        OK(emb_generator_create(seed + 3, &g));
        joined j;
        make_joined(&j, g, V, D, -1, false);
        OK(emb_bag_forward(ref, &j.gin, &j.goff, NULL, &j.ro, NULL));
        OK(emb_mpi_table_bag_forward(t, &j.q.input, &j.q.offsets, NULL, &j.lo, NULL));
        check_forward(&j, &j.b, false, "mapped");
        emb_optimizer_options oo = emb_optimizer_options_default(EMB_OPTIMIZER_SGD);
        OK(emb_mpi_table_set_optimizer(t, &oo));
        emb_status st = emb_mpi_table_bag_step(t, &j.q.input, &j.q.offsets, NULL, &j.q.gout);
        CHECK(st == EMB_ERR_READ_ONLY, "a step on a mapped table gave %d", st);
        free_joined(&j);
        emb_generator_free(g);
        emb_mpi_table_free(t);
    }
    /* no such tensor; max_norm on mapped rows */
    t = NULL;
    emb_status st = emb_mpi_table_map_safetensors(MPI_COMM_WORLD, path, "nope", &bo, &so, &t);
    CHECK(st == EMB_ERR_INVALID && t == NULL, "a missing tensor gave %d", st);
    bo.max_norm = 1.0;
    st = emb_mpi_table_map_safetensors(MPI_COMM_WORLD, path, "table", &bo, &so, &t);
    CHECK(st == EMB_ERR_READ_ONLY && t == NULL, "max_norm on a mapped table gave %d", st);
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank_ == 0) unlink(path);
    emb_bag_free(ref);
}

int main(int argc, char **argv) {
    mpi_check_init(&argc, &argv);
    for (int sh = 0; sh < 2; sh++) {
        run_wrap((emb_mpi_sharding)sh, 40 + (uint64_t)sh);
        run_map((emb_mpi_sharding)sh, 50 + (uint64_t)sh);
    }
    return mpi_check_finish(NULL);
}
