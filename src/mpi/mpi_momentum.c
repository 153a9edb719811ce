/* src/mpi/mpi_momentum.c: SGD with momentum on a sharded table, as libemb's sparse step
 * (src/optim/optim_sparse.c, PyTorch's sparse SGD) does it on the joined batch. Its
 * momentum buffer is one uncoalesced list of entries over the whole table, grown each step
 * by PyTorch's merge of two uncoalesced lists (add_out_sparse_cpu), which walks both lists
 * in step and pairs entries by comparing the heads: which entries of a row are paired
 * depends on the rows of every entry before them, owned or not. So every rank keeps the
 * buffer's whole row list (8 bytes per entry, the same on every rank) and the values of
 * the entries of its own rows only, and walks the merges over the whole lists, computing
 * values where it owns the row. The arithmetic is libemb's kernel bodies
 * (kernels/optim_body.h), so the bits are the single process's. */
#include "mpi_internal.h"
#include "kernels/optim_body.h"

#include <stdlib.h>
#include <string.h>

void emb__mpi_momentum_free(emb__mpi_momentum *m) {
    free(m->rows);
    free(m->vals);
    memset(m, 0, sizeof *m);
}

/* PyTorch's merge step over two uncoalesced row lists (optim_sparse.c's merge_next). */
typedef struct walk {
    const int64_t *t, *s;
    int64_t tn, sn, ti, si;
} walk;

static bool walk_next(walk *w, int64_t *ti, int64_t *si) {
    if (w->ti >= w->tn && w->si >= w->sn) return false;
    int cmp;
    if (w->ti >= w->tn)
        cmp = -1;
    else if (w->si >= w->sn)
        cmp = 1;
    else {
        int64_t a = w->t[w->ti], b = w->s[w->si];
        cmp = a < b ? 1 : (a > b ? -1 : 0);
    }
    *ti = cmp >= 0 ? w->ti++ : -1;
    *si = cmp <= 0 ? w->si++ : -1;
    return true;
}

/* optim_sparse.c's merge_value: r = t_sign * t + s_alpha * s, by the sizes of the lists. */
static void merge_value(float *r, int64_t dim, int64_t tn, const float *t, float t_sign, int64_t sn,
                        const float *s, float s_alpha) {
    if (sn == 0)
        coalesce_first_body(r, t, t_sign, dim);
    else if (tn == 0)
        scale_to_body(r, s, s_alpha, dim);
    else
        merge_entry_body(r, t, t_sign, s, s_alpha, dim);
}

/* For each entry of rows[0..n), its index among the entries of this rank's rows, or -1. */
static int64_t own_index(const emb_mpi_table *t, const int64_t *rows, int64_t n, int64_t *idx) {
    int64_t c = 0;
    for (int64_t k = 0; k < n; k++)
        idx[k] = rows[k] >= t->row_begin && rows[k] < t->row_end ? c++ : -1;
    return c;
}

emb_status emb__mpi_momentum_step(emb_mpi_table *t, const emb_optimizer_options *o,
                                  const int64_t *all, int64_t total, const float *gval) {
    emb__mpi_momentum *b = &t->mom;
    const int64_t D = t->dim;
    const float sign = o->maximize ? -1.0f : 1.0f, mom = (float)o->momentum,
                alpha = sign * (float)(1.0 - o->dampening), neg_lr = (float)(-o->lr);
    const bool first = !b->has, in_place = !first && total == 0;
    const int64_t bn = b->n;
    int64_t nn = total;
    if (!first && !in_place) { /* the merged list's length */
        walk w = {b->rows, all, bn, total, 0, 0};
        int64_t ti, si;
        for (nn = 0; walk_next(&w, &ti, &si);) nn++;
    }
    int64_t *gix = malloc((size_t)(total + 1) * sizeof *gix);
    int64_t *bix = malloc((size_t)((bn > nn ? bn : nn) + 1) * sizeof *bix);
    int64_t *nrows = in_place ? NULL : malloc((size_t)(nn + 1) * sizeof *nrows);
    float *nvals = NULL, *v = malloc((size_t)D * sizeof *v);
    emb_status st = gix && bix && v && (in_place || nrows)
                        ? EMB_OK
                        : emb_set_error(EMB_ERR_NOMEM, "cannot allocate the momentum buffer");
    int64_t nown = 0;
    if (!st && !in_place) { /* the new list's rows, and how many are this rank's */
        if (first) {
            memcpy(nrows, all, (size_t)total * sizeof *nrows);
        } else {
            walk w = {b->rows, all, bn, total, 0, 0};
            int64_t ti, si;
            for (int64_t k = 0; walk_next(&w, &ti, &si); k++)
                nrows[k] = ti >= 0 ? b->rows[ti] : all[si];
        }
        for (int64_t k = 0; k < nn; k++) nown += nrows[k] >= t->row_begin && nrows[k] < t->row_end;
        nvals = malloc((size_t)(nown * D + 1) * sizeof *nvals);
        if (!nvals) st = emb_set_error(EMB_ERR_NOMEM, "cannot allocate the momentum buffer");
    }
    if (st) {
        free(gix);
        free(bix);
        free(nrows);
        free(v);
        return st;
    }
    /* Nothing fails from here on. */
    own_index(t, all, total, gix);
    own_index(t, b->rows, bn, bix);
    if (first) { /* buf = clone(d_p) */
        for (int64_t k = 0; k < total; k++)
            if (gix[k] >= 0) coalesce_first_body(nvals + gix[k] * D, gval + gix[k] * D, sign, D);
    } else {
        if (b->nown > 0) scale_body(b->vals, mom, b->nown * D); /* buf.mul_(momentum) */
        if (!in_place) { /* buf.add_(d_p, alpha=1 - dampening) */
            walk w = {b->rows, all, bn, total, 0, 0};
            int64_t ti, si, k = 0;
            while (walk_next(&w, &ti, &si)) {
                const int64_t r = ti >= 0 ? b->rows[ti] : all[si];
                if (r >= t->row_begin && r < t->row_end) {
                    merge_value(nvals + k * D, D, bn, ti >= 0 ? b->vals + bix[ti] * D : NULL, 1.0f,
                                total, si >= 0 ? gval + gix[si] * D : NULL, alpha);
                    k++;
                }
            }
        }
    }
    if (!in_place) {
        emb__mpi_momentum_free(b);
        b->rows = nrows;
        b->vals = nvals;
        b->n = nn;
        b->nown = nown;
    }
    b->has = true;
    float *p = t->weight;
    if (!o->nesterov) { /* param.add_(buf, alpha=-lr), entry by entry */
        for (int64_t k = 0, c = 0; k < b->n; k++)
            if (b->rows[k] >= t->row_begin && b->rows[k] < t->row_end)
                axpy_body(p + (b->rows[k] - t->row_begin) * D, b->vals + c++ * D, neg_lr, D);
    } else { /* d = d_p.add(buf, alpha=momentum), streamed into the parameter */
        own_index(t, b->rows, b->n, bix);
        walk w = {all, b->rows, total, b->n, 0, 0};
        int64_t ti, si;
        while (walk_next(&w, &ti, &si)) {
            const int64_t r = ti >= 0 ? all[ti] : b->rows[si];
            if (r < t->row_begin || r >= t->row_end) continue;
            merge_value(v, D, total, ti >= 0 ? gval + gix[ti] * D : NULL, sign, b->n,
                        si >= 0 ? b->vals + bix[si] * D : NULL, mom);
            axpy_body(p + (r - t->row_begin) * D, v, neg_lr, D);
        }
    }
    free(gix);
    free(bix);
    free(v);
    return EMB_OK;
}
