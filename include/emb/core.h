/* emb/core.h: status codes, errors, versions, dtypes, tensor views, threads.
 *
 * Everything else in emb builds on these definitions. Include <emb/emb.h> to get the
 * whole public API.
 */
#ifndef EMB_CORE_H
#define EMB_CORE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(_WIN32) && defined(EMB_SHARED_BUILD)
#define EMB_API __declspec(dllexport)
#elif defined(__GNUC__)
#define EMB_API __attribute__((visibility("default")))
#else
#define EMB_API
#endif

/* ---------------------------------------------------------------------------------------
 * Versions
 * ------------------------------------------------------------------------------------- */

/* The one place the version is written: CMakeLists.txt reads these three lines. */
#define EMB_VERSION_MAJOR 0
#define EMB_VERSION_MINOR 1
#define EMB_VERSION_PATCH 0
/* "MAJOR.MINOR.PATCH", from the three numbers above. */
#define EMB_VERSION_STRING                                                                         \
    EMB_VERSION_QUOTE_(EMB_VERSION_MAJOR)                                                          \
    "." EMB_VERSION_QUOTE_(EMB_VERSION_MINOR) "." EMB_VERSION_QUOTE_(EMB_VERSION_PATCH)
#define EMB_VERSION_QUOTE_(n)  EMB_VERSION_QUOTE2_(n)
#define EMB_VERSION_QUOTE2_(n) #n
/* One integer, comparable: major*10000 + minor*100 + patch. */
#define EMB_VERSION_NUMBER (EMB_VERSION_MAJOR * 10000 + EMB_VERSION_MINOR * 100 + EMB_VERSION_PATCH)

/* The version of the library actually linked, as a string (EMB_VERSION_STRING of the
 * library's build, "MAJOR.MINOR.PATCH") and a number (EMB_VERSION_NUMBER). */
EMB_API const char *emb_version(void);
EMB_API int emb_version_number(void);

/* ---------------------------------------------------------------------------------------
 * Status codes. Values are pinned: never renumbered, new ones are appended.
 * ------------------------------------------------------------------------------------- */

typedef enum emb_status {
    EMB_OK = 0,
    EMB_ERR_INVALID = -1,     /* an argument has a value that is not allowed */
    EMB_ERR_NULL = -2,        /* a required pointer is NULL */
    EMB_ERR_NOMEM = -3,       /* memory allocation failed */
    EMB_ERR_INDEX = -4,       /* an index is out of range */
    EMB_ERR_DTYPE = -5,       /* a tensor has a dtype the call does not accept */
    EMB_ERR_SHAPE = -6,       /* a tensor has a shape the call does not accept */
    EMB_ERR_OVERFLOW = -7,    /* a size computation overflows */
    EMB_ERR_UNSUPPORTED = -8, /* a valid request that this build or call cannot serve */
    EMB_ERR_STATE = -9,       /* the object is not in a state that allows the call */
    EMB_ERR_IO = -10,         /* reading or writing a file failed */
    EMB_ERR_FORMAT = -11,     /* a file or string is malformed */
    EMB_ERR_READ_ONLY = -12,  /* the call would write memory that is read-only */
    EMB_ERR_CANCELLED = -13,  /* a long operation was stopped by its caller's callback */
    EMB_ERR_NUMERIC = -14,    /* a computation became NaN or infinite (training diverged) */
} emb_status;

/* A static, human-readable name of a status code ("index out of range" ...). Never NULL;
 * unknown codes give "unknown status". Thread-safe. */
EMB_API const char *emb_status_str(int status);

/* The detailed message of the calling thread's most recent failure, for example
 * "index 10 at position 0 is out of range for an embedding with 10 rows (valid: [0, 10))".
 * Empty string if no call on this thread has failed. The pointer stays valid until the
 * next failing emb call on the same thread. Thread-safe (per-thread storage). */
EMB_API const char *emb_errmsg(void);

/* Clears the calling thread's last error message. */
EMB_API void emb_clear_error(void);

/* Sets the calling thread's message (printf format) and returns status: for libraries
 * built on emb (libemb_mpi), whose failures emb_errmsg() reports like emb's own. */
EMB_API emb_status emb_set_error(emb_status status, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

/* ---------------------------------------------------------------------------------------
 * Data types
 * ------------------------------------------------------------------------------------- */

typedef enum emb_dtype {
    EMB_FLOAT32 = 0,
    EMB_INT64 = 1,
    EMB_INT32 = 2,
    EMB_FLOAT64 = 3,
    EMB_FLOAT16 = 4,
    EMB_BFLOAT16 = 5,
    EMB_INT8 = 6,
    EMB_UINT8 = 7,
    EMB_INT16 = 8,
    EMB_BOOL = 9,
} emb_dtype;

/* Size of one element in bytes; 0 for an unknown dtype. */
EMB_API size_t emb_dtype_nbytes(emb_dtype dtype);
/* PyTorch's name without the prefix: "float32", "int64", ... ; "unknown" otherwise. */
EMB_API const char *emb_dtype_name(emb_dtype dtype);

/* ---------------------------------------------------------------------------------------
 * Tensor views
 * ------------------------------------------------------------------------------------- */

/* Maximum rank of a tensor. Index tensors may have up to 8 dimensions
 * (EMB_MAX_INDEX_DIMS); a lookup adds one, hence 9. */
#define EMB_MAX_DIMS 9

/* Maximum rank of an index tensor (embedding lookups, one_hot). Lookups add one
 * dimension, so tensors themselves may have up to EMB_MAX_DIMS (9) dimensions. */
#define EMB_MAX_INDEX_DIMS 8

/* A non-owning view of contiguous row-major data. shape[0..ndim) in PyTorch order; a 0-d
 * tensor (ndim == 0) holds one element. The struct can be filled by hand or by the helpers
 * below; emb never frees `data` unless it came from emb_tensor_alloc. */
typedef struct emb_tensor {
    emb_dtype dtype;
    int ndim;
    int64_t shape[EMB_MAX_DIMS];
    void *data;
} emb_tensor;

/* Fills *t as a view of `data` with the given dtype and shape (no copy, no allocation).
 * Errors: EMB_ERR_NULL (t NULL, or shape NULL with ndim > 0, or data NULL with numel > 0),
 * EMB_ERR_SHAPE (ndim < 0 or > EMB_MAX_DIMS, a negative dimension), EMB_ERR_DTYPE (unknown
 * dtype), EMB_ERR_OVERFLOW (the byte size does not fit in int64). *t is unchanged on error. */
EMB_API emb_status emb_tensor_init(emb_tensor *t, emb_dtype dtype, void *data, int ndim,
                                   const int64_t *shape);

/* Like emb_tensor_init, but allocates zero-filled, 64-byte aligned storage that the caller
 * releases with emb_tensor_release. A zero-element tensor gets data == NULL. */
EMB_API emb_status emb_tensor_alloc(emb_tensor *t, emb_dtype dtype, int ndim, const int64_t *shape);

/* Frees storage obtained from emb_tensor_alloc (or another call that says so) and sets
 * t->data to NULL; the struct can be filled again by emb_tensor_init/alloc. NULL is fine.
 * Do not call it on views of memory you own. */
EMB_API void emb_tensor_release(emb_tensor *t);

/* Number of elements (1 for a 0-d tensor); -1 when t is NULL or its shape is invalid (ndim
 * outside [0, EMB_MAX_DIMS], a negative dimension, a product that overflows int64). */
EMB_API int64_t emb_tensor_numel(const emb_tensor *t);

/* Number of bytes of data: numel * dtype size; 0 when numel is -1, the dtype unknown or the
 * product overflows size_t. */
EMB_API size_t emb_tensor_nbytes(const emb_tensor *t);

/* Validates a tensor struct filled by hand: known dtype, 0 <= ndim <= EMB_MAX_DIMS, no negative
 * dimension, no overflow, data non-NULL when numel > 0. `what` names the argument in the
 * error message (e.g. "indices"). */
EMB_API emb_status emb_tensor_check(const emb_tensor *t, const char *what);

/* Removes the temporary files of every atomic file write in progress in this process
 * (emb/io.h: tables, checkpoints; the writes then fail). For a program's handler of SIGINT,
 * SIGTERM or SIGHUP that then exits: async-signal-safe and thread-safe. A process killed by
 * SIGKILL leaves its temporaries; the next write of the same file removes them. */
EMB_API void emb_remove_temp_files(void);

/* ---------------------------------------------------------------------------------------
 * Threads and kernels
 * ------------------------------------------------------------------------------------- */

/* Number of threads emb's parallel loops may use; 0 restores the default (the OpenMP
 * default, usually the number of CPUs). Results never depend on this number. Safe to call
 * from any thread; operations already running keep the split they started with. */
EMB_API void emb_set_num_threads(int n);
EMB_API int emb_get_num_threads(void);

typedef enum emb_kernel_mode {
    EMB_KERNELS_AUTO = 0, /* the fastest variant this CPU supports */
    EMB_KERNELS_REF = 1,  /* the scalar reference kernels only */
    EMB_KERNELS_AVX2 = 2, /* at most the AVX2+FMA variants, never the AVX-512 ones */
} emb_kernel_mode;

/* Selects which kernel variants run. Every variant gives the same bits, except those of
 * log_softmax and the losses built on it, which follow PyTorch's two CPU builds
 * (docs/semantics.md §10, §12). The environment variable EMB_KERNELS=ref (or =avx2) selects
 * EMB_KERNELS_REF (or EMB_KERNELS_AVX2) when the mode is first needed, unless it was set
 * before. Unknown modes count as EMB_KERNELS_AUTO. Safe to call from any thread; an operation
 * picks its kernels when it runs, so one running meanwhile may use either mode's. */
EMB_API void emb_set_kernel_mode(emb_kernel_mode mode);
EMB_API emb_kernel_mode emb_get_kernel_mode(void);

#ifdef __cplusplus
}
#endif

#endif /* EMB_CORE_H */
