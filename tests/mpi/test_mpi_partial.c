/* The inexact bag forward (shard option partial_sums) against the exact one, under mpirun at
 * 1, 2 and 4 ranks, over random cases: table shapes, bag lengths up to 64, modes sum and
 * mean, per_sample_weights, a padding row, both shardings. Every element must lie within
 * the worst-case bound of a float sum of k terms taken in any order,
 * |partial - exact| <= 2 gamma(k) sum |w x| (gamma(k) = k u / (1 - k u), u = 2^-24, k the
 * bag's positions plus the ranks' partial sums; mean divides both by the count). The
 * largest absolute, relative and ulp differences seen are printed (docs/semantics.md
 * reports them). */
#include "mpi_check.h"

#include <math.h>

static double max_abs, max_rel, max_ulps, n_diff, n_all;

static int64_t ulps(float a, float b) {
    int32_t x, y;
    memcpy(&x, &a, sizeof x);
    memcpy(&y, &b, sizeof y);
    if (x < 0) x = INT32_MIN - x;
    if (y < 0) y = INT32_MIN - y;
    return x > y ? (int64_t)x - y : (int64_t)y - x;
}

static void run(int64_t V, int64_t D, emb_bag_mode mode, bool use_psw, int64_t pad,
                emb_mpi_sharding sh, int64_t maxlen, uint64_t seed) {
    emb_bag_options bo;
    emb_mpi_shard_options so;
    table_options(mode, pad, sh, &bo, &so);
    emb_mpi_table *ex = NULL, *pa = NULL;
    emb_manual_seed(seed);
    OK(emb_mpi_table_create(MPI_COMM_WORLD, V, D, &bo, &so, &ex));
    so.partial_sums = true;
    emb_manual_seed(seed);
    OK(emb_mpi_table_create(MPI_COMM_WORLD, V, D, &bo, &so, &pa));
    if (!ex || !pa) return;
    /* the whole table on every rank, for the bound */
    float *full = malloc((size_t)(V * D) * sizeof *full);
    int64_t fs[2] = {V, D};
    emb_tensor ft = view(EMB_FLOAT32, full, 2, fs);
    OK(emb_mpi_table_gather(ex, 0, rank_ == 0 ? &ft : NULL));
    MPI_Bcast(full, (int)(V * D), MPI_FLOAT, 0, MPI_COMM_WORLD);
    /* this rank's batch */
    emb_generator *g = NULL;
    OK(emb_generator_create(seed * 101 + (uint64_t)rank_, &g));
    int64_t B = 1 + emb_generator_random(g) % 24, n = 0;
    int64_t *offs = malloc((size_t)B * sizeof *offs);
    int64_t *ids = malloc((size_t)(B * maxlen + 1) * sizeof *ids);
    float *w = malloc((size_t)(B * maxlen + 1) * sizeof *w);
    for (int64_t b = 0; b < B; b++) {
        offs[b] = n;
        int64_t len = emb_generator_random(g) % (uint32_t)(maxlen + 1);
        for (int64_t k = 0; k < len; k++, n++) {
            ids[n] = emb_generator_random(g) % (uint32_t)V;
            w[n] = (float)(emb_generator_random(g) % 2001) / 500.0f - 2.0f;
        }
    }
    int64_t os[2] = {B, D};
    float *oe = malloc((size_t)(B * D) * sizeof *oe), *op = malloc((size_t)(B * D) * sizeof *op);
    emb_tensor in = view(EMB_INT64, ids, 1, &n), of = view(EMB_INT64, offs, 1, &B),
               pw = view(EMB_FLOAT32, w, 1, &n), te = view(EMB_FLOAT32, oe, 2, os),
               tp = view(EMB_FLOAT32, op, 2, os);
    OK(emb_mpi_table_bag_forward(ex, &in, &of, use_psw ? &pw : NULL, &te, NULL));
    OK(emb_mpi_table_bag_forward(pa, &in, &of, use_psw ? &pw : NULL, &tp, NULL));
    const double u = ldexp(1.0, -24);
    for (int64_t b = 0; b < B; b++) {
        const int64_t p1 = b + 1 < B ? offs[b + 1] : n;
        int64_t cnt = 0;
        for (int64_t p = offs[b]; p < p1; p++) cnt += ids[p] != pad;
        const double k = (double)(cnt + size_), gamma = k * u / (1 - k * u);
        for (int64_t d = 0; d < D; d++) {
            double mag = 0;
            for (int64_t p = offs[b]; p < p1; p++)
                if (ids[p] != pad) mag += fabs((use_psw ? w[p] : 1.0) * full[ids[p] * D + d]);
            if (mode == EMB_BAG_MEAN && cnt) mag /= (double)cnt;
            const float e = oe[b * D + d], q = op[b * D + d];
            const double err = fabs((double)e - (double)q);
            CHECK(err <= 2 * gamma * mag + 2 * u * fabs((double)e),
                  "V=%" PRId64 " D=%" PRId64 " mode=%d bag %" PRId64 " dim %" PRId64
                  ": partial %.9g exact %.9g, bound %.3g",
                  V, D, (int)mode, b, d, (double)q, (double)e, 2 * gamma * mag);
            max_abs = fmax(max_abs, err);
            if (e != 0) max_rel = fmax(max_rel, err / fabs((double)e));
            max_ulps = fmax(max_ulps, (double)ulps(e, q));
            n_diff += e != q;
            n_all += 1;
        }
    }
    free(full);
    free(offs);
    free(ids);
    free(w);
    free(oe);
    free(op);
    emb_generator_free(g);
    emb_mpi_table_free(ex);
    emb_mpi_table_free(pa);
}

int main(int argc, char **argv) {
    mpi_check_init(&argc, &argv);
    uint64_t seed = 500;
    const int64_t shapes[][2] = {{50, 4}, {1000, 16}, {300, 64}};
    for (int rep = 0; rep < 4; rep++)
        for (int si = 0; si < 3; si++)
            for (int mode = 0; mode < 2; mode++)
                for (int psw = 0; psw < (mode == 0 ? 2 : 1); psw++)
                    run(shapes[si][0], shapes[si][1], (emb_bag_mode)mode, psw,
                        rep % 2 ? shapes[si][0] / 2 : -1, (emb_mpi_sharding)(rep / 2),
                        rep == 3 ? 64 : 16, seed++);
    double mine[3] = {max_abs, max_rel, max_ulps}, all[3], cnt[2] = {n_diff, n_all}, tot[2];
    MPI_Allreduce(mine, all, 3, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    MPI_Allreduce(cnt, tot, 2, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    char detail[200];
    snprintf(detail, sizeof detail,
             "%.0f of %.0f elements differ from the exact path; max abs %.3g, max rel %.3g, "
             "max %.0f ulps",
             tot[0], tot[1], all[0], all[1], all[2]);
    return mpi_check_finish(detail);
}
