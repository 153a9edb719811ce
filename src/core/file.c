/* The one file reader and the one atomic file writer (contracts in internal.h; behaviour in
 * docs/file-formats.md, "Reading" and "Writing").
 *
 * Reading: a regular file is opened once and mapped read-only; the descriptor stays open
 * with the mapping so that whatever else a reader needs of the file (pread of a large
 * table, pre-faulting) comes from the same file even if the path is replaced meanwhile. A
 * pipe, FIFO, socket, terminal or block device is read into memory up to a limit; a
 * character device that is not a terminal (/dev/zero, /dev/urandom) is refused: it has no
 * end.
 *
 * Writing: a regular destination is replaced atomically through a temporary file
 * ".<name>.tmp.XXXXXX" in its folder; the writer holds an exclusive flock on it until it
 * is renamed into place or removed, so that a later writer of the same destination can
 * tell the temporaries of processes that died (no lock) from those of live writers, and
 * removes the former. A symbolic link is followed: its final target is replaced, the link
 * stays. Any other destination (a device, a FIFO, a link to one) is written straight
 * through, as cp does. Temporaries in progress are listed in a fixed table that
 * emb_remove_temp_files (async-signal-safe) walks. */
#include "internal.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

uint64_t emb__io_fail_after = UINT64_MAX;
uint64_t emb__stream_limit = 0;
void (*emb__io_test_hook)(const char *path) = NULL;

const char *emb__basename(const char *path) {
    const char *s = strrchr(path, '/');
    return s && s[1] ? s + 1 : path;
}

/* ---------------------------------------------------------------------------------------
 * Reading
 * ------------------------------------------------------------------------------------- */

/* Half of the physical memory (at least 64 MiB), unless a test set a limit. */
static uint64_t stream_limit(void) {
    if (emb__stream_limit) return emb__stream_limit;
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    uint64_t half =
        pages > 0 && page > 0 ? (uint64_t)pages * (uint64_t)page / 2 : (uint64_t)1 << 32;
    return half < ((uint64_t)64 << 20) ? (uint64_t)64 << 20 : half;
}

static emb_status read_stream(const char *path, int fd, emb__file *f) {
    const uint64_t limit = stream_limit();
    size_t cap = 1 << 20, len = 0;
    unsigned char *buf = malloc(cap);
    if (!buf) return emb__error(EMB_ERR_NOMEM, "%s: out of memory", path);
    for (;;) {
        if (len == cap) {
            size_t want = cap <= SIZE_MAX / 2 ? cap * 2 : SIZE_MAX;
            if (want > limit + 1) want = (size_t)limit + 1;
            unsigned char *nb = want > cap ? realloc(buf, want) : NULL;
            if (!nb) {
                free(buf);
                return emb__error(EMB_ERR_NOMEM, "%s: out of memory reading %zu bytes", path, want);
            }
            buf = nb;
            cap = want;
        }
        ssize_t r = read(fd, buf + len, cap - len);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) {
            int e = errno;
            free(buf);
            return emb__error(EMB_ERR_IO, "%s: read failed: %s", path, strerror(e));
        }
        if (r == 0) break;
        len += (size_t)r;
        if (len > limit) {
            free(buf);
            return emb__error(EMB_ERR_IO,
                              "%s: more than %llu bytes from a pipe or device, the limit for input "
                              "that is not a regular file (half of this machine's memory); save it "
                              "to a file and read that",
                              path, (unsigned long long)limit);
        }
    }
    f->data = buf;
    f->size = len;
    return EMB_OK;
}

static emb_status read_all(const char *path, int fd, size_t size, emb__file *f) {
    unsigned char *buf = malloc(size ? size : 1);
    if (!buf) return emb__error(EMB_ERR_NOMEM, "%s: out of memory reading %zu bytes", path, size);
    size_t done = 0;
    while (done < size) {
        ssize_t r = read(fd, buf + done, size - done);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) {
            int e = errno;
            free(buf);
            return r < 0 ? emb__error(EMB_ERR_IO, "%s: read failed: %s", path, strerror(e))
                         : emb__error(EMB_ERR_FORMAT,
                                      "%s: the file became shorter while it was read", path);
        }
        done += (size_t)r;
    }
    f->data = buf;
    f->size = size;
    return EMB_OK;
}

emb_status emb__file_open(const char *path, emb__file *f, int flags) {
    memset(f, 0, sizeof *f);
    f->fd = -1;
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY);
    if (fd < 0) return emb__error(EMB_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    struct stat sb;
    if (fstat(fd, &sb) != 0) {
        int e = errno;
        close(fd);
        return emb__error(EMB_ERR_IO, "%s: cannot stat: %s", path, strerror(e));
    }
    emb_status rc = EMB_OK;
    if (S_ISDIR(sb.st_mode)) {
        rc = emb__error(EMB_ERR_IO, "%s: is a directory", path);
    } else if (S_ISCHR(sb.st_mode) && !isatty(fd)) {
        rc = emb__error(
            EMB_ERR_IO,
            "%s: is a character device; emb reads regular files, pipes and terminals (a device "
            "such as /dev/zero has no end)",
            path);
    } else if (!S_ISREG(sb.st_mode)) {
        rc = read_stream(path, fd, f); /* a pipe, FIFO, socket, terminal or block device */
    } else if ((uint64_t)sb.st_size > SIZE_MAX) {
        rc = emb__error(EMB_ERR_IO, "%s: too large for this machine's address space", path);
    } else if (sb.st_size == 0) {
        f->fd = fd;
        return EMB_OK;
    } else if (flags & EMB__FILE_READ) {
        rc = read_all(path, fd, (size_t)sb.st_size, f);
    } else {
        size_t n = (size_t)sb.st_size;
        void *p = mmap(NULL, n, PROT_READ,
                       MAP_PRIVATE | ((flags & EMB__FILE_POPULATE) ? MAP_POPULATE : 0), fd, 0);
        if (p == MAP_FAILED) {
            rc = emb__error(EMB_ERR_IO, "%s: cannot map: %s", path, strerror(errno));
        } else {
            madvise(p, n, MADV_SEQUENTIAL);
            f->data = p;
            f->size = n;
            f->mapped = true;
            f->fd = fd;
            return EMB_OK;
        }
    }
    close(fd);
    if (rc) memset(f, 0, sizeof *f), f->fd = -1;
    return rc;
}

void emb__file_populate(emb__file *f) {
    if (!f->mapped || f->size == 0) return;
#ifdef MADV_POPULATE_READ
    if (madvise((void *)f->data, f->size, MADV_POPULATE_READ) == 0) return;
#endif
    if (f->fd >= 0) /* the same file, mapped again in place, pre-faulted */
        mmap((void *)f->data, f->size, PROT_READ, MAP_PRIVATE | MAP_FIXED | MAP_POPULATE, f->fd, 0);
}

emb_status emb__file_pread(const emb__file *f, const char *path, uint64_t offset, void *dst,
                           size_t n) {
    if (offset > f->size || n > f->size - offset)
        return emb__error(EMB_ERR_FORMAT, "%s: bytes [%llu, %llu) are beyond the end of the file",
                          path, (unsigned long long)offset, (unsigned long long)(offset + n));
    if (f->fd < 0) { /* read into memory: a copy */
        if (n) memcpy(dst, f->data + offset, n);
        return EMB_OK;
    }
    size_t done = 0;
    while (done < n) {
        ssize_t r = pread(f->fd, (char *)dst + done, n - done, (off_t)(offset + done));
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0)
            return r < 0 ? emb__error(EMB_ERR_IO, "%s: read failed: %s", path, strerror(errno))
                         : emb__error(EMB_ERR_FORMAT,
                                      "%s: the file became shorter while it was read", path);
        done += (size_t)r;
    }
    return EMB_OK;
}

void emb__file_drop_fd(emb__file *f) {
    if (f->fd >= 0) close(f->fd);
    f->fd = -1;
}

void emb__file_close(emb__file *f) {
    if (!f) return;
    if (f->mapped)
        munmap((void *)f->data, f->size);
    else
        free((void *)f->data);
    emb__file_drop_fd(f);
    memset(f, 0, sizeof *f);
    f->fd = -1;
}

/* ---------------------------------------------------------------------------------------
 * Temporaries in progress, for emb_remove_temp_files
 * ------------------------------------------------------------------------------------- */

#define TMP_SLOTS 32
#define TMP_PATH  4096

/* state: 0 free, 1 being filled or emptied, 2 holds a temporary to remove on a signal */
static struct {
    atomic_int state;
    char path[TMP_PATH];
} tmp_slots[TMP_SLOTS];

static int tmp_register(const char *path) {
    size_t n = strlen(path);
    if (n >= TMP_PATH) return -1; /* not removed on a signal; a later writer cleans it */
    for (int i = 0; i < TMP_SLOTS; i++) {
        int expect = 0;
        if (atomic_compare_exchange_strong(&tmp_slots[i].state, &expect, 1)) {
            memcpy(tmp_slots[i].path, path, n + 1);
            atomic_store(&tmp_slots[i].state, 2);
            return i;
        }
    }
    return -1;
}

static void tmp_unregister(int slot) {
    if (slot >= 0) atomic_store(&tmp_slots[slot].state, 0);
}

void emb_remove_temp_files(void) {
    for (int i = 0; i < TMP_SLOTS; i++)
        if (atomic_load(&tmp_slots[i].state) == 2) unlink(tmp_slots[i].path);
}

/* ---------------------------------------------------------------------------------------
 * Atomic writing
 * ------------------------------------------------------------------------------------- */

/* The write buffer starts at EMB__WBUF_MIN bytes and doubles, up to EMB__WBUF, each time it
 * fills: a small file costs no large allocation, a large one is written in 1 MiB calls. The
 * bytes written do not depend on it. */
#define EMB__WBUF     (1u << 20)
#define EMB__WBUF_MIN (1u << 16)

static mode_t process_umask(void) {
    /* umask() cannot be read without setting it (racy with other threads); Linux shows it. */
    mode_t m = 022;
    FILE *f = fopen("/proc/self/status", "re");
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

/* The folder part of path ("" for a bare name) and its length. */
static size_t dir_len(const char *path) {
    return (size_t)(emb__basename(path) - path);
}

/* Is `name` ".<base>.tmp." followed by six letters or digits (as the writer chooses them)? */
static bool is_temp_of(const char *name, const char *base) {
    size_t b = strlen(base), n = strlen(name);
    if (n != b + 12 || name[0] != '.' || memcmp(name + 1, base, b) ||
        memcmp(name + 1 + b, ".tmp.", 5))
        return false;
    for (size_t k = b + 6; k < n; k++) {
        char c = name[k];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9')))
            return false;
    }
    return true;
}

/* Removes the temporaries of `target` whose writers are gone: nobody holds their lock. A
 * file system without locks keeps them all. */
static void remove_stale_temporaries(const char *target) {
    size_t dl = dir_len(target);
    const char *base = emb__basename(target);
    char dir[TMP_PATH];
    if (dl >= sizeof dir) return;
    if (dl)
        memcpy(dir, target, dl), dir[dl] = '\0';
    else
        strcpy(dir, ".");
    DIR *d = opendir(dir);
    if (!d) return;
    for (struct dirent *e; (e = readdir(d));) {
        if (!is_temp_of(e->d_name, base)) continue;
        char p[TMP_PATH];
        if (snprintf(p, sizeof p, "%.*s%s", (int)dl, target, e->d_name) >= (int)sizeof p) continue;
        int fd = open(p, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY);
        if (fd < 0) continue;
        struct stat a, b;
        if (fstat(fd, &a) == 0 && S_ISREG(a.st_mode) && flock(fd, LOCK_EX | LOCK_NB) == 0 &&
            lstat(p, &b) == 0 && a.st_dev == b.st_dev && a.st_ino == b.st_ino)
            unlink(p);
        close(fd);
    }
    closedir(d);
}

/* "<folder of target>.<name of target>.tmp.XXXXXX" (malloc'd; XXXXXX still to be chosen). */
static char *temp_template(const char *target) {
    size_t n = strlen(target), dl = dir_len(target);
    char *t = malloc(n + 16);
    if (t) {
        memcpy(t, target, dl);
        snprintf(t + dl, n + 16 - dl, ".%s.tmp.XXXXXX", emb__basename(target));
    }
    return t;
}

/* Creates the file `path` (its last six characters chosen here) exclusively. The name is
 * listed for emb_remove_temp_files before the file exists, so that a signal at any moment
 * finds it. Returns the descriptor, or -1 with errno. */
static int temp_create(char *path, int *slot) {
    static atomic_uint_fast64_t counter;
    static const char digits[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
    char *x = path + strlen(path) - 6;
    for (int attempt = 0; attempt < 100; attempt++) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        uint64_t z = (uint64_t)ts.tv_nsec ^ ((uint64_t)ts.tv_sec << 30) ^
                     ((uint64_t)getpid() << 40) ^
                     (atomic_fetch_add(&counter, 1) * 0x9e3779b97f4a7c15ull);
        z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
        z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
        z ^= z >> 31;
        for (int k = 0; k < 6; k++, z /= 62) x[k] = digits[z % 62];
        *slot = tmp_register(path);
        int fd = open(path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
        if (fd >= 0) return fd;
        int e = errno;
        tmp_unregister(*slot);
        *slot = -1;
        if (e != EEXIST) {
            errno = e;
            return -1;
        }
    }
    errno = EEXIST;
    return -1;
}

/* Creates the locked temporary of w->target. */
static emb_status open_temporary(emb__writer *w) {
    if (!(w->tmp = temp_template(w->target)))
        return emb__error(EMB_ERR_NOMEM, "%s: out of memory", w->dest);
    for (int attempt = 0; attempt < 8; attempt++) {
        w->fd = temp_create(w->tmp, &w->slot);
        if (w->fd < 0) {
            int e = errno;
            free(w->tmp);
            w->tmp = NULL;
            return emb__error(EMB_ERR_IO, "%s: cannot create a temporary file in its folder: %s",
                              w->dest, strerror(e));
        }
        /* Lock it; if another writer's cleanup removed it before the lock was taken, the
         * name no longer leads to this file: take another. */
        struct stat a, b;
        int locked = flock(w->fd, LOCK_EX);
        if (locked != 0 || (fstat(w->fd, &a) == 0 && lstat(w->tmp, &b) == 0 &&
                            a.st_dev == b.st_dev && a.st_ino == b.st_ino))
            return EMB_OK;
        tmp_unregister(w->slot);
        w->slot = -1;
        close(w->fd);
        w->fd = -1;
    }
    free(w->tmp);
    w->tmp = NULL;
    return emb__error(EMB_ERR_IO,
                      "%s: cannot keep a temporary file in its folder (removed as it was created)",
                      w->dest);
}

emb_status emb__writer_open(emb__writer *w, const char *path) {
    memset(w, 0, sizeof *w);
    w->fd = -1;
    w->slot = -1;
    if (!*path) return w->status = emb__error(EMB_ERR_INVALID, "empty output file name");
    w->dest = strdup(path);
    w->buf = malloc(EMB__WBUF_MIN);
    if (!w->dest || !w->buf) {
        emb__writer_abort(w);
        return w->status = emb__error(EMB_ERR_NOMEM, "%s: out of memory", path);
    }
    w->cap = EMB__WBUF_MIN;
    emb_status rc = EMB_OK;
    struct stat lsb, sb;
    bool exists = false;
    if (lstat(path, &lsb) != 0) {
        if (errno != ENOENT) rc = emb__error(EMB_ERR_IO, "%s: %s", path, strerror(errno));
    } else if (stat(path, &sb) != 0) {
        rc = S_ISLNK(lsb.st_mode) && errno == ENOENT
                 ? emb__error(
                       EMB_ERR_IO,
                       "%s: a symbolic link to a file that does not exist (emb does not write "
                       "through a dangling link)",
                       path)
                 : emb__error(EMB_ERR_IO, "%s: %s", path, strerror(errno));
    } else if (S_ISDIR(sb.st_mode)) {
        rc = emb__error(EMB_ERR_IO, "%s: is a directory", path);
    } else if (!S_ISREG(sb.st_mode)) {
        /* a device, a FIFO or a socket (or a link to one): written through, as cp does */
        w->fd = open(path, O_WRONLY | O_CLOEXEC | O_NOCTTY);
        if (w->fd < 0)
            rc = emb__error(EMB_ERR_IO, "%s: cannot open for writing: %s", path, strerror(errno));
        w->stream = true;
    } else {
        exists = true;
        if (S_ISLNK(lsb.st_mode)) { /* replace the link's final target, keep the link */
            w->target = realpath(path, NULL);
            if (!w->target)
                rc = emb__error(EMB_ERR_IO, "%s: cannot resolve the symbolic link: %s", path,
                                strerror(errno));
        }
    }
    if (!rc && !w->stream) {
        if (!w->target && !(w->target = strdup(path)))
            rc = emb__error(EMB_ERR_NOMEM, "%s: out of memory", path);
        if (!rc) {
            remove_stale_temporaries(w->target);
            rc = open_temporary(w);
        }
        if (!rc) {
            mode_t mode = exists ? (sb.st_mode & 07777) : (0666 & ~process_umask());
            if (fchmod(w->fd, mode) != 0) { /* not fatal: the file keeps mode 0600 */
            }
        }
    }
    if (rc) {
        emb__writer_abort(w);
        w->status = rc;
    }
    return rc;
}

bool emb__writer_seekable(const emb__writer *w) {
    return !w->stream;
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
        if (w->len == w->cap && w->cap < EMB__WBUF) { /* a larger file: a larger buffer */
            unsigned char *b = realloc(w->buf, w->cap * 2);
            if (b) {
                w->buf = b, w->cap *= 2;
                continue;
            }
        }
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
    if (w->stream)
        return w->status =
                   emb__error(EMB_ERR_UNSUPPORTED,
                              "%s: not a regular file: cannot go back to rewrite bytes", w->dest);
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
    if (w->stream || size == 0 || size > (uint64_t)INT64_MAX) return EMB_OK;
    int e = posix_fallocate(w->fd, 0, (off_t)size);
    if (e == ENOSPC || e == EFBIG)
        return w->status = emb__error(EMB_ERR_IO, "%s: cannot reserve %llu bytes for the file: %s",
                                      w->dest, (unsigned long long)size, strerror(e));
    return EMB_OK; /* EOPNOTSUPP, EINVAL: the file system cannot; write as usual */
}

void emb__writer_abort(emb__writer *w) {
    if (w->tmp) unlink(w->tmp); /* before the lock goes with the descriptor */
    tmp_unregister(w->slot);
    if (w->fd >= 0) close(w->fd);
    free(w->tmp);
    free(w->dest);
    free(w->target);
    free(w->buf);
    w->fd = -1;
    w->slot = -1;
    w->tmp = w->dest = w->target = NULL;
    w->buf = NULL;
}

emb_status emb__writer_finish(emb__writer *w) {
    emb_status st = writer_flush(w);
    if (!st && fsync(w->fd) != 0 &&
        !(w->stream && (errno == EINVAL || errno == EROFS || errno == ENOTSUP)))
        st = w->status = emb__error(EMB_ERR_IO, "%s: fsync failed: %s", w->dest, strerror(errno));
    return st;
}

static void sync_folder(const char *path) {
    size_t dl = dir_len(path);
    char *dir = dl ? strndup(path, dl) : strdup(".");
    if (!dir) return;
    int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd >= 0) {
        fsync(dfd);
        close(dfd);
    }
    free(dir);
}

emb_status emb__writer_rename(emb__writer *w) {
    emb_status st = w->status;
    if (!st && w->stream) {
        if (close(w->fd) != 0)
            st = emb__error(EMB_ERR_IO, "%s: close failed: %s", w->dest, strerror(errno));
        w->fd = -1;
    } else if (!st) {
        /* renamed while the lock is held: no other writer's cleanup can take it meanwhile */
        if (rename(w->tmp, w->target) != 0) {
            st = emb__error(EMB_ERR_IO, "%s: cannot rename the temporary file into place: %s",
                            w->dest, strerror(errno));
        } else {
            sync_folder(w->target); /* make the rename itself durable */
            tmp_unregister(w->slot);
            w->slot = -1;
            free(w->tmp);
            w->tmp = NULL; /* renamed: nothing to remove */
        }
    }
    emb__writer_abort(w);
    return st;
}

emb_status emb__writer_commit(emb__writer *w) {
    emb_status st = emb__writer_finish(w);
    if (st) {
        emb__writer_abort(w);
        return st;
    }
    return emb__writer_rename(w);
}

emb_status emb__writer_commit_pair(emb__writer *a, emb__writer *b) {
    emb_status st = emb__writer_finish(a);
    if (!st) st = emb__writer_finish(b);
    if (st || a->stream || b->stream) {
        if (st) {
            emb__writer_abort(a);
            emb__writer_abort(b);
            return st;
        }
        st = emb__writer_rename(a);
        emb_status s2 = emb__writer_rename(b);
        return st ? st : s2;
    }
    /* Both files are complete on disk. Keep the first one's previous version under a
     * temporary name (a hard link, locked like a temporary) until the second is in place,
     * so that a failed second rename puts it back. */
    char *keep = NULL;
    int keep_fd = -1, keep_slot = -1;
    struct stat sb;
    if (lstat(a->target, &sb) == 0 && S_ISREG(sb.st_mode) && (keep = temp_template(a->target))) {
        int fd = temp_create(keep, &keep_slot); /* a name of the scheme, listed for signals */
        if (fd >= 0) close(fd);
        if (fd < 0 || unlink(keep) != 0 || link(a->target, keep) != 0) {
            tmp_unregister(keep_slot);
            keep_slot = -1;
            free(keep);
            keep = NULL;
        } else {
            keep_fd = open(keep, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
            if (keep_fd >= 0) flock(keep_fd, LOCK_EX);
        }
    }
    st = emb__writer_rename(a);
    if (!st) {
        st = emb__writer_rename(b);
        if (st) { /* put the first file's previous version back (or remove the new one) */
            if (keep)
                rename(keep, a->target);
            else
                unlink(a->target);
        }
    } else {
        emb__writer_abort(b);
    }
    if (keep) unlink(keep); /* no-op when it was renamed back */
    tmp_unregister(keep_slot);
    if (keep_fd >= 0) close(keep_fd);
    free(keep);
    return st;
}

/* ---------------------------------------------------------------------------------------
 * Numbers in files
 * ------------------------------------------------------------------------------------- */

bool emb__parse_count(const char *s, size_t n, int64_t *out) {
    if (n == 0) return false;
    int64_t v = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned d = (unsigned)(s[i] - '0');
        if (d > 9 || v > (INT64_MAX - (int64_t)d) / 10) return false;
        v = v * 10 + (int64_t)d;
    }
    *out = v;
    return true;
}
