/* src/text/casefold.h: lowercasing UTF-8 as Python's str.lower() does (src/text/casefold.c;
 * the tables in casefold_table.c are written by scripts/gen-casefold.py). */
#ifndef EMB_TEXT_CASEFOLD_H
#define EMB_TEXT_CASEFOLD_H

#include <stddef.h>
#include <stdint.h>

extern const char emb__casefold_unicode[]; /* the Unicode version of the tables */
extern const uint32_t emb__lower_runs[][4];
extern const size_t emb__lower_runs_n;
extern const uint32_t emb__ignorable_ranges[][2];
extern const size_t emb__ignorable_ranges_n;
extern const uint32_t emb__cased_ranges[][2];
extern const size_t emb__cased_ranges_n;

/* The lowercase of one code point when it is one code point (U+0130 is "i" U+0307 in
 * emb__utf8_lower; a capital sigma is sigma here, final sigma in context there). */
uint32_t emb__lower_cp(uint32_t c);

/* Writes the lowercase of the valid UTF-8 text s[0, n) to out, as Python's s.lower():
 * code point by code point, U+0130 as "i" U+0307, and a capital sigma as final sigma when
 * the nearest code point before it that is not case-ignorable is cased and the nearest one
 * after it that is not case-ignorable is not cased. out has room for EMB__LOWER_MAX(n)
 * bytes; returns the bytes written. */
#define EMB__LOWER_MAX(n) ((n) / 2 * 3 + 4)
size_t emb__utf8_lower(const char *s, size_t n, char *out);

#endif /* EMB_TEXT_CASEFOLD_H */
