/* emb/emb.h: the whole public API of emb, embedding layers in C.
 *
 *   #include <emb/emb.h>
 *
 * Conventions (docs/api.md): fallible calls return emb_status (EMB_OK == 0, errors
 * negative) and leave a detailed message in emb_errmsg(); outputs go into caller buffers;
 * backward adds into gradient buffers the caller zeroes; handles are freed with their
 * *_free function and structs the library filled are emptied with their *_release
 * function, both of which accept NULL. The naming rules are docs/api.md's "API rules".
 */
#ifndef EMB_EMB_H
#define EMB_EMB_H

#include "core.h"
#include "embedding.h"
#include "bag.h"
#include "fasttext.h"
#include "io.h"
#include "linear.h"
#include "loss.h"
#include "optim.h"
#include "phrases.h"
#include "print.h"
#include "quant.h"
#include "random.h"
#include "search.h"
#include "util.h"
#include "similarity.h"
#include "vocab.h"
#include "word2vec.h"

#endif /* EMB_EMB_H */
