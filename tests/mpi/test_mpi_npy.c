/* Tables over .npy files (emb_mpi_table_map_npy) under mpirun at 1, 2 and 4 ranks: every
 * rank maps its rows of a file rank 0 wrote, and its shard, lookups, bags and dense
 * gradients equal the single process's table read from the same file (emb_npy_read); steps
 * and max_norm are refused. Files that are not C-order float32 [V, D] arrays are refused
 * on every rank. */
#include "mpi_check.h"

#include <unistd.h>

static char dir_[200];

/* A path in the test's directory (made by rank 0, known to all). */
static void path_of(char *p, size_t n, const char *name) {
    snprintf(p, n, "%s/%s", dir_, name);
}

/* Rewrites the first `from` in the file with `to` (same length). */
static void patch(const char *path, const char *from, const char *to) {
    FILE *f = fopen(path, "r+b");
    char head[256] = {0};
    size_t n = f ? fread(head, 1, sizeof head - 1, f) : 0;
    for (size_t i = 0; f && i + strlen(from) <= n; i++)
        if (!memcmp(head + i, from, strlen(from))) {
            fseek(f, (long)i, SEEK_SET);
            fwrite(to, 1, strlen(to), f);
            break;
        }
    if (f) fclose(f);
}

static void run_map(int64_t V, int64_t D, emb_mpi_sharding sh, uint64_t seed) {
    char what[96], path[256];
    snprintf(what, sizeof what, "V=%" PRId64 " D=%" PRId64 " sharding=%d", V, D, (int)sh);
    path_of(path, sizeof path, "table.npy");
    if (rank_ == 0) {
        emb_manual_seed(seed);
        emb_bag *b = NULL;
        emb_tensor w;
        OK(emb_bag_create(V, D, NULL, &b));
        OK(emb_bag_weight(b, &w));
        OK(emb_npy_write(path, &w));
        emb_bag_free(b);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    /* the single process: the table read from the file */
    emb_tensor w;
    emb_bag *ref = NULL;
    OK(emb_npy_read(path, &w));
    OK(emb_bag_from_pretrained(&w, false, NULL, &ref));
    emb_mpi_shard_options so = emb_mpi_shard_options_default();
    so.sharding = sh;
    so.owner = size_ - 1;
    emb_mpi_table *t = NULL;
    OK(emb_mpi_table_map_npy(MPI_COMM_WORLD, path, NULL, &so, &t));
    if (t && ref) {
        CHECK(emb_mpi_table_num_embeddings(t) == V && emb_mpi_table_dim(t) == D, "%s: shape", what);
        check_shard(t, ref, "mapped from .npy");
        emb_generator *g = NULL;
        OK(emb_generator_create(seed + 9, &g));
        joined j;
        make_joined(&j, g, V, D, -1, false);
        OK(emb_bag_forward(ref, &j.gin, &j.goff, NULL, &j.ro, NULL));
        OK(emb_mpi_table_bag_forward(t, &j.q.input, &j.q.offsets, NULL, &j.lo, NULL));
        check_forward(&j, &j.b, false, what);
        /* a lookup of the same ids */
        float *lk = malloc((size_t)(j.q.n * D + 1) * sizeof(float));
        float *rk = malloc((size_t)(j.b.npos * D + 1) * sizeof(float));
        const int64_t lks[2] = {j.q.n, D}, rks[2] = {j.b.npos, D};
        emb_tensor lkt = view(EMB_FLOAT32, lk, 2, lks), rkt = view(EMB_FLOAT32, rk, 2, rks);
        OK(emb_embedding_forward(emb_bag_embedding(ref), &j.gin, &rkt));
        OK(emb_mpi_table_lookup(t, &j.q.input, &lkt));
        CHECK(same_rows(lk, rk + j.b.pos0[rank_] * D, j.q.n * D), "%s: lookup differs", what);
        /* the dense gradient (the rows are not read) */
        int64_t b0, b1;
        emb_mpi_table_rows(t, &b0, &b1);
        float *lg = calloc((size_t)((b1 - b0) * D + 1), sizeof(float));
        float *rg = calloc((size_t)(V * D), sizeof(float));
        const int64_t ls[2] = {b1 - b0, D}, rs[2] = {V, D};
        emb_tensor lgt = view(EMB_FLOAT32, b1 > b0 ? lg : NULL, 2, ls),
                   rgt = view(EMB_FLOAT32, rg, 2, rs);
        OK(emb_bag_backward(ref, &j.gin, &j.goff, NULL, NULL, &j.ggo, &rgt));
        OK(emb_mpi_table_bag_backward_dense(t, &j.q.input, &j.q.offsets, NULL, NULL, &j.q.gout,
                                            &lgt));
        CHECK(same_rows(lg, rg + b0 * D, (b1 - b0) * D), "%s: dense gradient differs", what);
        /* read-only: steps refused */
        emb_optimizer_options oo = emb_optimizer_options_default(EMB_OPTIMIZER_ADAM);
        OK(emb_mpi_table_set_optimizer_dense(t, &oo));
        emb_status st = emb_mpi_table_step_dense(t, &lgt);
        CHECK(st == EMB_ERR_READ_ONLY, "%s: a step on a mapped table gave %d", what, st);
        check_shard(t, ref, "after a refused step");
        free(lk);
        free(rk);
        free(lg);
        free(rg);
        free_joined(&j);
        emb_generator_free(g);
    }
    emb_mpi_table_free(t);
    /* max_norm would write mapped rows */
    emb_bag_options bo = emb_bag_options_default();
    bo.max_norm = 1.0;
    t = NULL;
    emb_status st = emb_mpi_table_map_npy(MPI_COMM_WORLD, path, &bo, &so, &t);
    CHECK(st == EMB_ERR_READ_ONLY && t == NULL, "%s: max_norm on a mapped table gave %d", what, st);
    emb_bag_free(ref);
    emb_tensor_release(&w);
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank_ == 0) unlink(path);
}

/* A file rank 0 writes (a float32 or float64 [3, 4] or [2, 2, 2] array, then patched);
 * every rank must refuse it with `want` and the message must name `words`. */
static void refused(const char *name, emb_dtype dt, int ndim, const char *from, const char *to,
                    long cut, emb_status want, const char *words) {
    char path[256];
    path_of(path, sizeof path, name);
    if (rank_ == 0) {
        double buf[12] = {0};
        const int64_t s2[2] = {3, 4}, s3[3] = {2, 2, 2};
        emb_tensor x = view(dt, buf, ndim, ndim == 2 ? s2 : s3);
        OK(emb_npy_write(path, &x));
        if (from) patch(path, from, to);
        if (cut) {
            FILE *f = fopen(path, "rb");
            fseek(f, 0, SEEK_END);
            long n = ftell(f);
            fclose(f);
            if (truncate(path, n - cut)) CHECK(false, "cannot cut %s", path);
        }
    }
    MPI_Barrier(MPI_COMM_WORLD);
    emb_mpi_table *t = NULL;
    emb_status st = emb_mpi_table_map_npy(MPI_COMM_WORLD, path, NULL, NULL, &t);
    CHECK(st == want && t == NULL, "%s: got %d, expected %d", name, st, want);
    CHECK(strstr(emb_errmsg(), words) != NULL, "%s: message: %s", name, emb_errmsg());
    emb_mpi_table_free(t);
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank_ == 0) unlink(path);
}

static void run_refusals(void) {
    refused("f64.npy", EMB_FLOAT64, 2, NULL, NULL, 0, EMB_ERR_DTYPE, "'<f8'");
    refused("bigendian.npy", EMB_FLOAT32, 2, "<f4", ">f4", 0, EMB_ERR_DTYPE, "'>f4'");
    refused("fortran.npy", EMB_FLOAT32, 2, "False", "True ", 0, EMB_ERR_UNSUPPORTED,
            "Fortran order");
    refused("cube.npy", EMB_FLOAT32, 3, NULL, NULL, 0, EMB_ERR_SHAPE, "3 dimensions");
    refused("short.npy", EMB_FLOAT32, 2, NULL, NULL, 4, EMB_ERR_FORMAT, "the file has");
    refused("magic.npy", EMB_FLOAT32, 2, "NUMPY", "NUMPX", 0, EMB_ERR_FORMAT, "not an .npy");
    /* a file only the last rank cannot open: refused on every rank */
    char good[256], path[256];
    path_of(good, sizeof good, "small.npy");
    if (rank_ == 0) {
        float x[12] = {0};
        const int64_t s[2] = {4, 3};
        emb_tensor v = view(EMB_FLOAT32, x, 2, s);
        OK(emb_npy_write(good, &v));
    }
    MPI_Barrier(MPI_COMM_WORLD);
    path_of(path, sizeof path, "missing.npy");
    emb_mpi_table *t = NULL;
    emb_status st =
        emb_mpi_table_map_npy(MPI_COMM_WORLD, rank_ == size_ - 1 ? path : good, NULL, NULL, &t);
    CHECK(st == EMB_ERR_IO && t == NULL, "a file missing on rank %d gave %d", size_ - 1, st);
    if (rank_ != size_ - 1)
        CHECK(strstr(emb_errmsg(), "refused") != NULL, "message: %s", emb_errmsg());
    /* a row-wise table of fewer rows than ranks (a 1-row file) */
    if (rank_ == 0) {
        float x[3] = {0};
        const int64_t s[2] = {1, 3};
        emb_tensor v = view(EMB_FLOAT32, x, 2, s);
        OK(emb_npy_write(good, &v));
    }
    MPI_Barrier(MPI_COMM_WORLD);
    t = NULL;
    st = emb_mpi_table_map_npy(MPI_COMM_WORLD, good, NULL, NULL, &t);
    CHECK(size_ == 1 ? st == EMB_OK : st == EMB_ERR_INVALID, "1 row at %d ranks gave %d", size_,
          st);
    emb_mpi_table_free(t);
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank_ == 0) unlink(good);
}

int main(int argc, char **argv) {
    mpi_check_init(&argc, &argv);
    if (rank_ == 0) {
        const char *tmp = getenv("TMPDIR");
        snprintf(dir_, sizeof dir_, "%s/emb_mpi_npy_XXXXXX", tmp && *tmp ? tmp : "/tmp");
        if (!mkdtemp(dir_)) dir_[0] = '\0';
    }
    MPI_Bcast(dir_, (int)sizeof dir_, MPI_CHAR, 0, MPI_COMM_WORLD);
    /* 1000 x 7 floats span several pages, and the shards start inside pages */
    const int64_t shapes[][2] = {{31, 5}, {1000, 7}};
    uint64_t seed = 3;
    for (int si = 0; si < 2; si++)
        for (int sh = 0; sh < 2; sh++)
            run_map(shapes[si][0], shapes[si][1], (emb_mpi_sharding)sh, seed++);
    run_refusals();
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank_ == 0) rmdir(dir_);
    return mpi_check_finish(NULL);
}
