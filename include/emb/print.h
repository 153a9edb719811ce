/* emb/print.h: render tensors exactly as PyTorch 1.13's repr() does. */
#ifndef EMB_PRINT_H
#define EMB_PRINT_H

#include "core.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum emb_sci_mode {
    EMB_SCI_AUTO = 0, /* PyTorch's default rule (sci_mode=None) */
    EMB_SCI_ON = 1,
    EMB_SCI_OFF = 2,
} emb_sci_mode;

/* torch.set_printoptions, plus suffixes. Fill with emb_print_options_default(). */
typedef struct emb_print_options {
    int precision; /* digits after the decimal point, 0 to 100; default 4 */
    int threshold; /* summarise when numel > threshold, >= 0; default 1000 */
    int edgeitems; /* items shown at each end when summarising, >= 0; default 3.
                    * With 0, a summarised dimension shows only "..." (PyTorch 1.13
                    * then prints a whole vector after the "..." and fails for
                    * higher ranks). */
    int linewidth; /* characters per line, >= 1; default 80 */
    emb_sci_mode sci_mode;
    /* Extra items after the data, as PyTorch appends them: for example
     * "requires_grad=True" or "grad_fn=<EmbeddingBackward0>". emb adds "size=(...)" for
     * empty tensors and "dtype=torch.int32" (etc.) for non-default dtypes itself, in
     * PyTorch's order (size, dtype, then these). NULL entries are skipped. */
    const char *suffixes[4];
} emb_print_options;

EMB_API emb_print_options emb_print_options_default(void);

/* Writes repr(t) (without a trailing newline) into buf, truncating like snprintf, always
 * NUL-terminated when size > 0. *needed (may be NULL) receives the full length excluding
 * the NUL, so a call with size 0 is a size query. opts NULL: the defaults.
 * Supported dtypes: float32, float64, int64, int32, int16, int8, uint8, bool.
 * Errors: EMB_ERR_NULL (t NULL, buf NULL with size > 0, data NULL with numel > 0),
 * EMB_ERR_DTYPE, EMB_ERR_SHAPE / EMB_ERR_OVERFLOW (a malformed tensor struct),
 * EMB_ERR_INVALID (bad options), EMB_ERR_NOMEM; buf and *needed are unchanged on error.
 * Thread-safe (no shared state). */
EMB_API emb_status emb_tensor_repr(const emb_tensor *t, const emb_print_options *opts, char *buf,
                                   size_t size, size_t *needed);

/* print(t): repr followed by a newline, written to `f`. Errors as emb_tensor_repr, and
 * EMB_ERR_IO if writing fails. */
EMB_API emb_status emb_tensor_print(FILE *f, const emb_tensor *t, const emb_print_options *opts);

/* Formats a shape as PyTorch prints torch.Size: "torch.Size([1, 25, 10])", into buf of
 * `size` bytes (NUL-terminated when size > 0; buf may be NULL when size is 0). Returns the
 * number of characters the full string needs (not counting the NUL), like snprintf. At most
 * EMB_MAX_DIMS dimensions are shown; shape NULL prints as "torch.Size([])". */
EMB_API size_t emb_shape_repr(int ndim, const int64_t *shape, char *buf, size_t size);

#ifdef __cplusplus
}
#endif

#endif /* EMB_PRINT_H */
