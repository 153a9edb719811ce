/* src/mpi/mpi_npy.c: a sharded table over a NumPy .npy file (emb_mpi_table_map_npy): every
 * rank reads the header itself and maps, read-only, only the pages of its own rows. The
 * file must hold a C-order little-endian float32 [V, D] array (descr '<f4',
 * fortran_order False): a rank's rows are then one contiguous byte range. */
#define _POSIX_C_SOURCE 200809L
#include "mpi_internal.h"
#include "core/bytes.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

void emb__mpi_unmap(void *base, size_t len) {
    if (base) munmap(base, len);
}

/* What the header says. */
typedef struct npy_head {
    char descr[16];
    int fortran; /* -1: not given */
    int ndim;    /* -1: not given */
    int64_t shape[8];
    size_t data_off;
} npy_head;

typedef struct scan {
    const char *p, *end, *path;
} scan;

static void skip_ws(scan *c) {
    while (c->p < c->end && (*c->p == ' ' || *c->p == '\t' || *c->p == '\n' || *c->p == '\r'))
        c->p++;
}

static emb_status bad(const scan *c, const char *what) {
    return emb_set_error(EMB_ERR_FORMAT, "%s: .npy header: %s", c->path, what);
}

/* A quoted Python string (no escapes in the keys and descrs numpy writes). */
static emb_status quoted(scan *c, const char **s, size_t *n) {
    skip_ws(c);
    if (c->p >= c->end || (*c->p != '\'' && *c->p != '"')) return bad(c, "expected a string");
    const char q = *c->p++;
    *s = c->p;
    while (c->p < c->end && *c->p != q) c->p++;
    if (c->p >= c->end) return bad(c, "unterminated string");
    *n = (size_t)(c->p++ - *s);
    return EMB_OK;
}

static emb_status shape_tuple(scan *c, npy_head *h) {
    skip_ws(c);
    if (c->p >= c->end || *c->p++ != '(') return bad(c, "the shape is not a tuple");
    h->ndim = 0;
    for (;;) {
        skip_ws(c);
        if (c->p < c->end && *c->p == ')') {
            c->p++;
            return EMB_OK;
        }
        if (h->ndim == 8) return bad(c, "more than 8 dimensions");
        int64_t v = 0;
        const char *d0 = c->p;
        while (c->p < c->end && *c->p >= '0' && *c->p <= '9') {
            if (v > (INT64_MAX - 9) / 10) return bad(c, "a dimension overflows");
            v = v * 10 + (*c->p++ - '0');
        }
        if (c->p == d0) return bad(c, "a dimension is not a number");
        if (c->p < c->end && *c->p == 'L') c->p++; /* Python 2's long */
        h->shape[h->ndim++] = v;
        skip_ws(c);
        if (c->p < c->end && *c->p == ',') c->p++;
    }
}

/* The dict literal of the header: 'descr', 'fortran_order' and 'shape'. */
static emb_status parse_dict(scan *c, npy_head *h) {
    skip_ws(c);
    if (c->p >= c->end || *c->p++ != '{') return bad(c, "not a dict literal");
    for (;;) {
        skip_ws(c);
        if (c->p < c->end && *c->p == '}') break;
        const char *k;
        size_t kn;
        emb_status st = quoted(c, &k, &kn);
        if (st) return st;
        skip_ws(c);
        if (c->p >= c->end || *c->p++ != ':') return bad(c, "expected ':'");
        skip_ws(c);
        if (kn == 5 && !memcmp(k, "descr", 5)) {
            const char *v;
            size_t vn;
            if (c->p < c->end && *c->p == '[')
                return emb_set_error(EMB_ERR_DTYPE,
                                     "%s: a structured .npy dtype; the table must "
                                     "be float32 ('<f4')",
                                     c->path);
            if ((st = quoted(c, &v, &vn))) return st;
            snprintf(h->descr, sizeof h->descr, "%.*s", (int)(vn < 15 ? vn : 15), v);
        } else if (kn == 13 && !memcmp(k, "fortran_order", 13)) {
            const bool t = c->end - c->p >= 4 && !memcmp(c->p, "True", 4);
            const bool f = c->end - c->p >= 5 && !memcmp(c->p, "False", 5);
            if (!t && !f) return bad(c, "fortran_order is not True or False");
            h->fortran = t;
            c->p += t ? 4 : 5;
        } else if (kn == 5 && !memcmp(k, "shape", 5)) {
            if ((st = shape_tuple(c, h))) return st;
        } else {
            return bad(c, "a key other than 'descr', 'fortran_order' and 'shape'");
        }
        skip_ws(c);
        if (c->p < c->end && *c->p == ',') c->p++;
    }
    if (!h->descr[0] || h->fortran < 0 || h->ndim < 0)
        return bad(c, "'descr', 'fortran_order' or 'shape' is missing");
    return EMB_OK;
}

/* Reads and checks the header of the file open as fd (size bytes). */
static emb_status read_head(int fd, const char *path, size_t size, npy_head *h) {
    unsigned char pre[12];
    memset(h, 0, sizeof *h);
    h->fortran = h->ndim = -1;
    if (size < 10 || pread(fd, pre, 10, 0) != 10 || memcmp(pre, "\x93NUMPY", 6))
        return emb_set_error(EMB_ERR_FORMAT, "%s: not an .npy file (no \\x93NUMPY magic)", path);
    size_t plen = 10, hlen;
    if (pre[6] == 1) {
        hlen = emb__get_u16le(pre + 8);
    } else if ((pre[6] == 2 || pre[6] == 3) && size >= 12 && pread(fd, pre, 12, 0) == 12) {
        plen = 12;
        hlen = emb__get_u32le(pre + 8);
    } else {
        return emb_set_error(EMB_ERR_FORMAT, "%s: unsupported .npy version %u", path, pre[6]);
    }
    if (hlen > size - plen)
        return emb_set_error(EMB_ERR_FORMAT, "%s: the .npy header is cut short", path);
    char *text = malloc(hlen + 1);
    if (!text) return emb_set_error(EMB_ERR_NOMEM, "cannot allocate the .npy header");
    emb_status st = pread(fd, text, hlen, (off_t)plen) == (ssize_t)hlen
                        ? EMB_OK
                        : emb_set_error(EMB_ERR_IO, "%s: cannot read the .npy header", path);
    scan c = {text, text + hlen, path};
    if (!st) st = parse_dict(&c, h);
    free(text);
    h->data_off = plen + hlen;
    return st;
}

/* The table's checks of a parsed header: '<f4', C order, 2-D, the file's size. */
static emb_status check_head(const npy_head *h, const char *path, size_t size) {
    if (strcmp(h->descr, "<f4") != 0)
        return emb_set_error(EMB_ERR_DTYPE,
                             "%s: the .npy array has dtype '%s'; a mapped table must be "
                             "little-endian float32 ('<f4')",
                             path, h->descr);
    if (h->fortran)
        return emb_set_error(EMB_ERR_UNSUPPORTED,
                             "%s: the .npy array is in Fortran order (column-major): a rank's "
                             "rows are not contiguous; save it in C order "
                             "(numpy.ascontiguousarray)",
                             path);
    if (h->ndim != 2)
        return emb_set_error(EMB_ERR_SHAPE,
                             "%s: the .npy array has %d dimensions; a table is 2-D [rows, dim]",
                             path, h->ndim);
    if (h->shape[0] < 1 || h->shape[1] < 1)
        return emb_set_error(EMB_ERR_SHAPE, "%s: an empty [%" PRId64 ", %" PRId64 "] table", path,
                             h->shape[0], h->shape[1]);
    const uint64_t need = (uint64_t)h->shape[0] * (uint64_t)h->shape[1];
    if (h->shape[0] > INT64_MAX / h->shape[1] || need > (UINT64_MAX - h->data_off) / 4 ||
        h->data_off + 4 * need != size)
        return emb_set_error(EMB_ERR_FORMAT,
                             "%s: the [%" PRId64 ", %" PRId64 "] float32 array needs %" PRIu64
                             " bytes after a %zu-byte header; the file has %zu",
                             path, h->shape[0], h->shape[1], 4 * need, h->data_off, size);
    if (h->data_off % 4)
        return emb_set_error(EMB_ERR_FORMAT, "%s: the array data is not 4-byte aligned", path);
    return EMB_OK;
}

emb_status emb_mpi_table_map_npy(MPI_Comm comm, const char *path, const emb_bag_options *bag_opts,
                                 const emb_mpi_shard_options *shard, emb_mpi_table **out) {
    emb__mpi_source src = {.qtype = EMB_QTYPE_F32, .read_only = true};
    emb_mpi_shard_options s = shard ? *shard : emb_mpi_shard_options_default();
    int size = 1, rank = 0;
    MPI_Comm_size(comm, &size);
    MPI_Comm_rank(comm, &rank);
    npy_head h;
    memset(&h, 0, sizeof h);
    emb_status st = path ? EMB_OK : emb_set_error(EMB_ERR_NULL, "path must not be NULL");
    int fd = -1;
    struct stat sb;
    if (!st && ((fd = open(path, O_RDONLY)) < 0 || fstat(fd, &sb) != 0))
        st = emb_set_error(EMB_ERR_IO, "%s: %s", path, strerror(errno));
    if (!st) st = read_head(fd, path, (size_t)sb.st_size, &h);
    if (!st) st = check_head(&h, path, (size_t)sb.st_size);
    const int64_t D = st ? 0 : h.shape[1];
    if (!st) { /* this rank's rows: the pages holding bytes [off, off + n) */
        int64_t b, e;
        emb__mpi_rows_of(rank, size, h.shape[0], &s, &b, &e);
        src.nrows = e - b;
        if (e > b) {
            const size_t off = h.data_off + (size_t)(b * D) * 4, n = (size_t)((e - b) * D) * 4;
            const size_t page = (size_t)sysconf(_SC_PAGESIZE), off0 = off - off % page;
            src.len = off - off0 + n;
            void *m = mmap(NULL, src.len, PROT_READ, MAP_SHARED, fd, (off_t)off0);
            if (m == MAP_FAILED)
                st = emb_set_error(EMB_ERR_IO, "%s: cannot map rows [%" PRId64 ", %" PRId64 "): %s",
                                   path, b, e, strerror(errno));
            else {
                src.base = m;
                src.rows = (float *)((unsigned char *)m + (off - off0));
            }
        }
    }
    if (fd >= 0) close(fd);
    st = emb__mpi_agree_comm(comm, s.timeout_ms >= 0 ? s.timeout_ms : EMB_MPI_TIMEOUT_MS_DEFAULT,
                             st, "to map the table");
    if (!st) st = emb__mpi_create(comm, h.shape[0], D, bag_opts, &s, &src, out);
    if (st) emb__mpi_unmap(src.base, src.len);
    return st;
}
