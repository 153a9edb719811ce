/* bench_mpi: bytes sent and per-rank throughput of a sharded EmbeddingBag's training step
 * (forward + Adagrad step) at the communicator's size.
 *
 *   mpirun -np 4 --oversubscribe build/bench/bench_mpi [--rows V] [--dim D] [--bags B]
 *          [--pool L] [--steps S] [--sharding row|table]
 *
 * Each rank trains on its own batch of B bags of L ids (uniform over the table, from a
 * per-rank seed); the table has V rows of D floats, sharded row-wise (or whole on rank 0).
 * Prints one JSON line (from rank 0): the ranks, the slowest rank's seconds per step, the
 * bags per second per rank and in all, and the bytes per step each rank sent (counted by
 * libemb_mpi: ids, rows, gradient rows, agreements), averaged over the ranks, with the
 * maximum. Timings on a shared machine are noisy; the bytes are exact.
 */
#include <emb/emb.h>
#include <emb/mpi.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TRY(call)                                                                                  \
    do {                                                                                           \
        if ((call) != EMB_OK) {                                                                    \
            fprintf(stderr, "%s: %s\n", #call, emb_errmsg());                                      \
            MPI_Abort(MPI_COMM_WORLD, 1);                                                          \
        }                                                                                          \
    } while (0)

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    int64_t V = 200000, D = 64, B = 2048, L = 20;
    int steps = 20;
    emb_mpi_sharding sharding = EMB_MPI_ROW_WISE;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--rows"))
            V = atoll(argv[i + 1]);
        else if (!strcmp(argv[i], "--dim"))
            D = atoll(argv[i + 1]);
        else if (!strcmp(argv[i], "--bags"))
            B = atoll(argv[i + 1]);
        else if (!strcmp(argv[i], "--pool"))
            L = atoll(argv[i + 1]);
        else if (!strcmp(argv[i], "--steps"))
            steps = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--sharding"))
            sharding = strcmp(argv[i + 1], "table") ? EMB_MPI_ROW_WISE : EMB_MPI_TABLE_WISE;
    }
    emb_set_num_threads(1);
    emb_bag_options bo = emb_bag_options_default();
    bo.mode = EMB_BAG_SUM;
    emb_mpi_shard_options so = emb_mpi_shard_options_default();
    so.sharding = sharding;
    emb_mpi_table *t;
    emb_manual_seed(0);
    TRY(emb_mpi_table_create(MPI_COMM_WORLD, V, D, &bo, &so, &t));
    emb_optimizer_options oo = emb_optimizer_options_default(EMB_OPTIMIZER_ADAGRAD);
    TRY(emb_mpi_table_set_optimizer(t, &oo));
    int64_t n = B * L, os[2] = {B, D};
    int64_t *ids = malloc((size_t)n * sizeof *ids), *offs = malloc((size_t)B * sizeof *offs);
    float *out = malloc((size_t)(B * D) * sizeof *out);
    emb_generator *g;
    TRY(emb_generator_create(100 + (uint64_t)rank, &g));
    for (int64_t b = 0; b < B; b++) offs[b] = b * L;
    emb_tensor in, off, to;
    TRY(emb_tensor_init(&in, EMB_INT64, ids, 1, &n));
    TRY(emb_tensor_init(&off, EMB_INT64, offs, 1, &B));
    TRY(emb_tensor_init(&to, EMB_FLOAT32, out, 2, os));
    double busy = 0;
    for (int s = -2; s < steps; s++) { /* two warm-up steps */
        for (int64_t i = 0; i < n; i++) ids[i] = (int64_t)(emb_generator_random64(g) % (uint64_t)V);
        if (s == 0) emb_mpi_table_reset_stats(t);
        MPI_Barrier(MPI_COMM_WORLD);
        double t0 = MPI_Wtime();
        TRY(emb_mpi_table_bag_forward(t, &in, &off, NULL, &to, NULL));
        for (int64_t i = 0; i < B * D; i++) out[i] *= 1e-3f; /* a stand-in gradient */
        TRY(emb_mpi_table_bag_step(t, &in, &off, NULL, &to));
        double dt = MPI_Wtime() - t0, worst = 0;
        MPI_Allreduce(&dt, &worst, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
        if (s >= 0) busy += worst;
    }
    emb_mpi_stats st = emb_mpi_table_stats(t);
    double mine[5] = {(double)st.bytes_sent, (double)st.id_bytes, (double)st.row_bytes,
                      (double)st.grad_bytes, (double)st.bytes_sent};
    double sum[5], mx[5];
    MPI_Reduce(mine, sum, 5, MPI_DOUBLE, MPI_SUM, 0, MPI_COMM_WORLD);
    MPI_Reduce(mine, mx, 5, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
    if (rank == 0) {
        double per = busy / steps;
        printf("{\"ranks\": %d, \"rows\": %lld, \"dim\": %lld, \"bags_per_rank\": %lld, "
               "\"pool\": %lld, \"sharding\": \"%s\", \"seconds_per_step\": %.6f, "
               "\"bags_per_s_per_rank\": %.0f, \"bags_per_s_total\": %.0f, "
               "\"bytes_per_step_per_rank\": %.0f, \"id_bytes\": %.0f, \"row_bytes\": %.0f, "
               "\"grad_bytes\": %.0f, \"max_bytes_per_step\": %.0f}\n",
               size, (long long)V, (long long)D, (long long)B, (long long)L,
               sharding == EMB_MPI_ROW_WISE ? "row" : "table", per, B / per, B * size / per,
               sum[0] / size / steps, sum[1] / size / steps, sum[2] / size / steps,
               sum[3] / size / steps, mx[4] / steps);
    }
    emb_generator_free(g);
    free(ids);
    free(offs);
    free(out);
    emb_mpi_table_free(t);
    MPI_Finalize();
    return 0;
}
