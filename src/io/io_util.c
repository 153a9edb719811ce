/* Files (mapping, atomic writing), numbers (parsing, printing, half/bfloat16) for src/io. */
#include "io_internal.h"
#include "half.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

uint64_t emb__io_fail_after = UINT64_MAX;

const char *emb__basename(const char *path) {
    const char *s = strrchr(path, '/');
    return s && s[1] ? s + 1 : path;
}

/* ---------------------------------------------------------------------------------------
 * Reading
 * ------------------------------------------------------------------------------------- */

static emb_status file_open(const char *path, emb__file *f, bool populate);

emb_status emb__file_open(const char *path, emb__file *f) { return file_open(path, f, false); }
emb_status emb__file_open_all(const char *path, emb__file *f) { return file_open(path, f, true); }

static emb_status file_open(const char *path, emb__file *f, bool populate) {
    memset(f, 0, sizeof *f);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return emb__error(EMB_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    struct stat sb;
    if (fstat(fd, &sb) != 0) {
        int e = errno;
        close(fd);
        return emb__error(EMB_ERR_IO, "%s: cannot stat: %s", path, strerror(e));
    }
    if (S_ISDIR(sb.st_mode)) {
        close(fd);
        return emb__error(EMB_ERR_IO, "%s: is a directory", path);
    }
    if (S_ISREG(sb.st_mode)) {
        if (sb.st_size == 0) {
            close(fd);
            return EMB_OK;
        }
        if ((uint64_t)sb.st_size > SIZE_MAX) {
            close(fd);
            return emb__error(EMB_ERR_IO, "%s: too large to map", path);
        }
        void *p = mmap(NULL, (size_t)sb.st_size, PROT_READ, MAP_PRIVATE | (populate ? MAP_POPULATE : 0), fd, 0);
        int e = errno;
        close(fd);
        if (p == MAP_FAILED) return emb__error(EMB_ERR_IO, "%s: cannot map: %s", path, strerror(e));
        madvise(p, (size_t)sb.st_size, MADV_SEQUENTIAL);
        f->data = p;
        f->size = (size_t)sb.st_size;
        f->mapped = true;
        return EMB_OK;
    }
    /* A pipe or a device: read it all. */
    size_t cap = 1 << 20, len = 0;
    unsigned char *buf = malloc(cap);
    if (!buf) {
        close(fd);
        return emb__error(EMB_ERR_NOMEM, "%s: out of memory", path);
    }
    for (;;) {
        if (len == cap) {
            unsigned char *nb = cap <= SIZE_MAX / 2 ? realloc(buf, cap * 2) : NULL;
            if (!nb) {
                free(buf);
                close(fd);
                return emb__error(EMB_ERR_NOMEM, "%s: out of memory reading %zu bytes", path, cap * 2);
            }
            buf = nb;
            cap *= 2;
        }
        ssize_t r = read(fd, buf + len, cap - len);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) {
            int e = errno;
            free(buf);
            close(fd);
            return emb__error(EMB_ERR_IO, "%s: read failed: %s", path, strerror(e));
        }
        if (r == 0) break;
        len += (size_t)r;
    }
    close(fd);
    f->data = buf;
    f->size = len;
    return EMB_OK;
}

emb_status emb__pread_all(const char *path, uint64_t offset, void *dst, size_t n) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return emb__error(EMB_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    size_t done = 0;
    while (done < n) {
        ssize_t r = pread(fd, (char *)dst + done, n - done, (off_t)(offset + done));
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) {
            int e = errno;
            close(fd);
            return r < 0 ? emb__error(EMB_ERR_IO, "%s: read failed: %s", path, strerror(e))
                         : emb__error(EMB_ERR_FORMAT, "%s: the file became shorter while it was read", path);
        }
        done += (size_t)r;
    }
    close(fd);
    return EMB_OK;
}

emb_status emb__alloc_table(emb_tensor *t, int64_t rows, int64_t dim) {
    int64_t n, shape[2] = {rows, dim};
    if (!emb__mul_i64(rows, dim, &n) || n > INT64_MAX / 4)
        return emb__error(EMB_ERR_OVERFLOW, "a table of %lld x %lld floats is too large", (long long)rows,
                          (long long)dim);
    void *d = NULL;
    if (n > 0 && !(d = emb__malloc((size_t)n * 4)))
        return emb__error(EMB_ERR_NOMEM, "out of memory for a table of %lld x %lld floats", (long long)rows,
                          (long long)dim);
    emb_status rc = emb_tensor_init(t, EMB_FLOAT32, d, 2, shape);
    if (rc) emb__free(d);
    return rc;
}

void emb__file_close(emb__file *f) {
    if (!f) return;
    if (f->mapped)
        munmap((void *)f->data, f->size);
    else
        free((void *)f->data);
    memset(f, 0, sizeof *f);
}

/* ---------------------------------------------------------------------------------------
 * Atomic writing
 * ------------------------------------------------------------------------------------- */

#define EMB__WBUF (1u << 20)

static mode_t process_umask(void) {
    /* umask() cannot be read without setting it (racy with other threads); Linux shows it. */
    mode_t m = 022;
    FILE *f = fopen("/proc/self/status", "r");
    if (!f) return m;
    char line[256];
    while (fgets(line, sizeof line, f))
        if (!strncmp(line, "Umask:", 6)) {
            m = (mode_t)strtoul(line + 6, NULL, 8);
            break;
        }
    fclose(f);
    return m;
}

emb_status emb__writer_open(emb__writer *w, const char *path) {
    memset(w, 0, sizeof *w);
    w->fd = -1;
    size_t n = strlen(path);
    if (n == 0) return w->status = emb__error(EMB_ERR_INVALID, "empty output file name");
    const char *base = emb__basename(path);
    size_t dirlen = (size_t)(base - path);
    w->dest = strdup(path);
    w->tmp = malloc(n + 32);
    w->buf = malloc(EMB__WBUF);
    if (!w->dest || !w->tmp || !w->buf) {
        emb__writer_abort(w);
        return w->status = emb__error(EMB_ERR_NOMEM, "%s: out of memory", path);
    }
    w->cap = EMB__WBUF;
    memcpy(w->tmp, path, dirlen);
    snprintf(w->tmp + dirlen, n + 32 - dirlen, ".%s.tmp.XXXXXX", base);
    w->fd = mkstemp(w->tmp);
    if (w->fd < 0) {
        int e = errno;
        free(w->tmp);
        w->tmp = NULL;
        emb__writer_abort(w);
        return w->status = emb__error(EMB_ERR_IO, "%s: cannot create a temporary file in its folder: %s",
                                      path, strerror(e));
    }
    struct stat sb;
    mode_t mode = stat(path, &sb) == 0 ? (sb.st_mode & 07777) : (0666 & ~process_umask());
    if (fchmod(w->fd, mode) != 0) { /* not fatal: the file keeps mode 0600 */
    }
    return EMB_OK;
}

static emb_status writer_flush(emb__writer *w) {
    if (w->status) return w->status;
    size_t off = 0;
    while (off < w->len) {
        size_t n = w->len - off;
        if (emb__io_fail_after != UINT64_MAX) {
            if (w->written >= emb__io_fail_after) {
                w->status = emb__error(EMB_ERR_IO, "%s: write failed: injected failure", w->dest);
                return w->status;
            }
            if (n > emb__io_fail_after - w->written) n = (size_t)(emb__io_fail_after - w->written);
        }
        ssize_t r = write(w->fd, w->buf + off, n);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) {
            w->status = emb__error(EMB_ERR_IO, "%s: write failed: %s", w->dest,
                                   r < 0 ? strerror(errno) : "no progress");
            return w->status;
        }
        off += (size_t)r;
        w->written += (uint64_t)r;
    }
    w->len = 0;
    return EMB_OK;
}

emb_status emb__writer_put(emb__writer *w, const void *data, size_t n) {
    const unsigned char *p = data;
    while (n) {
        if (w->status) return w->status;
        size_t room = w->cap - w->len, k = n < room ? n : room;
        memcpy(w->buf + w->len, p, k);
        w->len += k;
        p += k;
        n -= k;
        if (w->len == w->cap && writer_flush(w)) return w->status;
    }
    return w->status;
}

unsigned char *emb__writer_reserve(emb__writer *w, size_t n) {
    if (w->status) return NULL;
    if (w->cap - w->len < n && writer_flush(w)) return NULL;
    return w->buf + w->len;
}

emb_status emb__writer_pwrite(emb__writer *w, uint64_t offset, const void *data, size_t n) {
    if (writer_flush(w)) return w->status;
    const unsigned char *p = data;
    while (n) {
        ssize_t r = pwrite(w->fd, p, n, (off_t)offset);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0)
            return w->status = emb__error(EMB_ERR_IO, "%s: write failed: %s", w->dest,
                                          r < 0 ? strerror(errno) : "no progress");
        p += r;
        n -= (size_t)r;
        offset += (uint64_t)r;
    }
    return EMB_OK;
}

emb_status emb__writer_preallocate(emb__writer *w, uint64_t size) {
    if (w->status) return w->status;
    if (size == 0 || size > (uint64_t)INT64_MAX) return EMB_OK;
    int e = posix_fallocate(w->fd, 0, (off_t)size);
    if (e == ENOSPC || e == EFBIG)
        return w->status = emb__error(EMB_ERR_IO, "%s: cannot reserve %llu bytes for the file: %s", w->dest,
                                      (unsigned long long)size, strerror(e));
    return EMB_OK; /* EOPNOTSUPP, EINVAL: the file system cannot; write as usual */
}

void emb__writer_abort(emb__writer *w) {
    if (w->fd >= 0) close(w->fd);
    if (w->tmp) unlink(w->tmp);
    free(w->tmp);
    free(w->dest);
    free(w->buf);
    w->fd = -1;
    w->tmp = w->dest = NULL;
    w->buf = NULL;
}

emb_status emb__writer_commit(emb__writer *w) {
    emb_status st = writer_flush(w);
    if (!st && fsync(w->fd) != 0)
        st = emb__error(EMB_ERR_IO, "%s: fsync failed: %s", w->dest, strerror(errno));
    if (!st) {
        int r = close(w->fd);
        w->fd = -1;
        if (r != 0) st = emb__error(EMB_ERR_IO, "%s: close failed: %s", w->dest, strerror(errno));
    }
    if (!st && rename(w->tmp, w->dest) != 0)
        st = emb__error(EMB_ERR_IO, "%s: cannot rename the temporary file into place: %s", w->dest,
                        strerror(errno));
    if (!st) {
        /* Make the rename itself durable. */
        const char *base = emb__basename(w->dest);
        size_t dl = (size_t)(base - w->dest);
        char *dir = dl ? strndup(w->dest, dl) : strdup(".");
        if (dir) {
            int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
            if (dfd >= 0) {
                fsync(dfd);
                close(dfd);
            }
            free(dir);
        }
        free(w->tmp);
        w->tmp = NULL; /* renamed: nothing to remove */
    }
    emb__writer_abort(w);
    return st;
}

/* ---------------------------------------------------------------------------------------
 * Numbers
 * ------------------------------------------------------------------------------------- */

static const double emb__pow10[23] = {1e0,  1e1,  1e2,  1e3,  1e4,  1e5,  1e6,  1e7,
                                      1e8,  1e9,  1e10, 1e11, 1e12, 1e13, 1e14, 1e15,
                                      1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22};

static bool parse_float_slow(const char *s, size_t len, float *out) {
    char small[128];
    char *buf = len < sizeof small ? small : malloc(len + 1);
    if (!buf) return false;
    memcpy(buf, s, len);
    buf[len] = '\0';
    char *end;
    errno = 0;
    float f = strtof(buf, &end);
    bool ok = end == buf + len;
    if (buf != small) free(buf);
    if (ok) *out = f;
    return ok;
}

bool emb__parse_float(const char *s, size_t len, float *out) {
    if (!s || !out || len == 0) return false;
    /* strtof skips leading white space; a token never has any. */
    if (s[0] == ' ' || (s[0] >= '\t' && s[0] <= '\r')) return false;
    const char *p = s, *e = s + len;
    bool neg = false;
    if (*p == '-' || *p == '+') neg = *p++ == '-';
    uint64_t m = 0;
    int nd = 0, exp10 = 0;
    bool any = false, lost = false;
    while (p < e && (unsigned)(*p - '0') < 10) {
        unsigned d = (unsigned)(*p++ - '0');
        any = true;
        if (m == 0 && d == 0) continue;
        if (nd < 19) {
            m = m * 10 + d;
            nd++;
        } else {
            exp10++;
            lost |= d != 0;
        }
    }
    if (p < e && *p == '.') {
        p++;
        while (p < e && (unsigned)(*p - '0') < 10) {
            unsigned d = (unsigned)(*p++ - '0');
            any = true;
            if (m == 0 && d == 0) {
                exp10--;
                continue;
            }
            if (nd < 19) {
                m = m * 10 + d;
                nd++;
                exp10--;
            } else {
                lost |= d != 0;
            }
        }
    }
    if (!any) return parse_float_slow(s, len, out); /* nan, inf, or not a number */
    if (p < e && (*p == 'e' || *p == 'E')) {
        const char *q = p + 1;
        bool eneg = false;
        if (q < e && (*q == '-' || *q == '+')) eneg = *q++ == '-';
        if (q == e || (unsigned)(*q - '0') >= 10) return parse_float_slow(s, len, out);
        int x = 0;
        while (q < e && (unsigned)(*q - '0') < 10) {
            if (x < 100000) x = x * 10 + (*q - '0');
            q++;
        }
        exp10 += eneg ? -x : x;
        p = q;
    }
    if (p != e || lost) return parse_float_slow(s, len, out);
    if (m == 0) {
        *out = neg ? -0.0f : 0.0f;
        return true;
    }
    if (m > (1ull << 53) || exp10 < -22 || exp10 > 22) return parse_float_slow(s, len, out);
    /* m and 10^|exp10| are exact doubles, so d is the correctly rounded double of the value;
     * rounding d to float is then correct unless d lies exactly halfway between two floats
     * (the value's side of the midpoint was lost): that rare case goes to strtof. The fast
     * range (>= 1e-22, <= 2^53 * 1e22) has no float subnormals or overflow. */
    double d = exp10 < 0 ? (double)m / emb__pow10[-exp10] : (double)m * emb__pow10[exp10];
    float f = (float)d;
    if ((double)f != d) {
        /* f > 0 here: its neighbour towards d is one unit away in the bit pattern */
        uint32_t fb;
        memcpy(&fb, &f, 4);
        fb += d > (double)f ? 1 : -1;
        float g;
        memcpy(&g, &fb, 4);
        if (((double)f + (double)g) * 0.5 == d) return parse_float_slow(s, len, out);
    }
    *out = neg ? -f : f;
    return true;
}

int emb__format_float(char *buf, float f, int precision) {
    if (precision > 0) return snprintf(buf, 32, "%.*g", precision, (double)f);
    int n = 0;
    for (int p = 6; p <= 9; p++) {
        n = snprintf(buf, 32, "%.*g", p, (double)f);
        float back;
        if (isnan(f) || (emb__parse_float(buf, (size_t)n, &back) && back == f)) return n;
    }
    return n;
}


bool emb__to_f32(float *dst, const void *src, emb_dtype dtype, int64_t n) {
    const unsigned char *s = src;
    switch (dtype) {
    case EMB_FLOAT32: memcpy(dst, s, (size_t)n * 4); return true;
    case EMB_FLOAT64:
        for (int64_t i = 0; i < n; i++) {
            double d;
            memcpy(&d, s + 8 * i, 8);
            dst[i] = (float)d;
        }
        return true;
    case EMB_FLOAT16:
    case EMB_BFLOAT16:
        for (int64_t i = 0; i < n; i++) {
            uint16_t h;
            memcpy(&h, s + 2 * i, 2);
            dst[i] = dtype == EMB_FLOAT16 ? emb__f16_to_f32(h) : emb__bf16_to_f32(h);
        }
        return true;
    case EMB_INT64:
        for (int64_t i = 0; i < n; i++) {
            int64_t v;
            memcpy(&v, s + 8 * i, 8);
            dst[i] = (float)v;
        }
        return true;
    case EMB_INT32:
        for (int64_t i = 0; i < n; i++) {
            int32_t v;
            memcpy(&v, s + 4 * i, 4);
            dst[i] = (float)v;
        }
        return true;
    case EMB_INT16:
        for (int64_t i = 0; i < n; i++) {
            int16_t v;
            memcpy(&v, s + 2 * i, 2);
            dst[i] = (float)v;
        }
        return true;
    case EMB_INT8:
        for (int64_t i = 0; i < n; i++) dst[i] = (float)(int8_t)s[i];
        return true;
    case EMB_UINT8:
        for (int64_t i = 0; i < n; i++) dst[i] = (float)s[i];
        return true;
    case EMB_BOOL:
        for (int64_t i = 0; i < n; i++) dst[i] = s[i] ? 1.0f : 0.0f;
        return true;
    }
    return false;
}
