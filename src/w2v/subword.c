/* fastText's character n-grams (src/w2v/subword.h). */
#include "subword.h"

int64_t emb__subword_ngrams(const char *word, size_t len, int minn, int maxn, uint32_t bucket,
                            int64_t nwords, int64_t *rows, int64_t cap) {
    if (maxn < 1 || minn > maxn || bucket == 0) return 0;
    /* The bracketed word "<word>" without building it: byte k of it. */
    const size_t L = len + 2;
#define AT(k) ((k) == 0 ? (unsigned char)'<' : (k) == L - 1 ? (unsigned char)'>' : (unsigned char)word[(k) - 1])
    int64_t count = 0;
    for (size_t i = 0; i < L; i++) {
        if ((AT(i) & 0xC0) == 0x80) continue; /* not the first byte of a character */
        uint32_t h = EMB__FNV1A_INIT;
        size_t j = i;
        for (int n = 1; j < L && n <= maxn; n++) {
            h = emb__fnv1a_byte(h, AT(j));
            j++;
            while (j < L && (AT(j) & 0xC0) == 0x80) h = emb__fnv1a_byte(h, AT(j)), j++;
            if (n >= minn && !(n == 1 && (i == 0 || j == L))) {
                if (count < cap) rows[count] = nwords + (int64_t)(h % bucket);
                count++;
            }
        }
    }
#undef AT
    return count;
}
