/* The scalar reference of the word2vec step (sgns.h) and the sigmoid table (dispatch.c
 * chooses between the variants). */
#include "sgns.h"

#include "internal.h"

#include <math.h>

/* Two sets of eight lanes (elements k..k+7 and k+8..k+15 of each block of 16), each lane an
 * fmaf chain; a last block of 8 goes to the first set; the sets are added lane by lane, the
 * lanes summed pairwise; then the tail, element by element. */
static float sgns_dot(const float *a, const float *b, int64_t n) {
    float l0[8] = {0, 0, 0, 0, 0, 0, 0, 0}, l1[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    int64_t k = 0;
    for (; k + 16 <= n; k += 16)
        for (int q = 0; q < 8; q++) {
            l0[q] = fmaf(a[k + q], b[k + q], l0[q]);
            l1[q] = fmaf(a[k + 8 + q], b[k + 8 + q], l1[q]);
        }
    if (k + 8 <= n) {
        for (int q = 0; q < 8; q++) l0[q] = fmaf(a[k + q], b[k + q], l0[q]);
        k += 8;
    }
    float l[8];
    for (int q = 0; q < 8; q++) l[q] = l0[q] + l1[q];
    float s = ((l[0] + l[1]) + (l[2] + l[3])) + ((l[4] + l[5]) + (l[6] + l[7]));
    for (; k < n; k++) s = fmaf(a[k], b[k], s);
    return s;
}

#define EMB__SGNS_NAME emb__sgns_step_ref
#define EMB__SGNS_ATTR
#include "sgns_body.h"

void emb__sgns_sigmoid_table(float *table) {
    for (int i = 0; i <= EMB__SGNS_TABLE; i++) {
        double x = ((double)i / EMB__SGNS_TABLE * 2 - 1) * EMB__SGNS_MAX_EXP;
        double e = exp(x);
        table[i] = (float)(e / (e + 1));
    }
}
