/* Status codes, per-thread error messages and versions. */
#include "internal.h"

#include <stdio.h>
#include <string.h>

#define EMB__ERRMSG_SIZE 1024

static _Thread_local char emb__errbuf[EMB__ERRMSG_SIZE];

const char *emb_version(void) {
    return EMB_VERSION_STRING;
}

int emb_version_number(void) {
    return EMB_VERSION_NUMBER;
}

const char *emb_status_str(int status) {
    switch (status) {
    case EMB_OK:
        return "ok";
    case EMB_ERR_INVALID:
        return "invalid argument";
    case EMB_ERR_NULL:
        return "null pointer";
    case EMB_ERR_NOMEM:
        return "out of memory";
    case EMB_ERR_INDEX:
        return "index out of range";
    case EMB_ERR_DTYPE:
        return "wrong dtype";
    case EMB_ERR_SHAPE:
        return "wrong shape";
    case EMB_ERR_OVERFLOW:
        return "size overflow";
    case EMB_ERR_UNSUPPORTED:
        return "unsupported";
    case EMB_ERR_STATE:
        return "invalid state";
    case EMB_ERR_IO:
        return "i/o error";
    case EMB_ERR_FORMAT:
        return "malformed input";
    case EMB_ERR_READ_ONLY:
        return "read-only";
    case EMB_ERR_CANCELLED:
        return "cancelled";
    case EMB_ERR_NUMERIC:
        return "non-finite result";
    default:
        return "unknown status";
    }
}

const char *emb_errmsg(void) {
    return emb__errbuf;
}

void emb_clear_error(void) {
    emb__errbuf[0] = '\0';
}

emb_status emb__error(emb_status status, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(emb__errbuf, sizeof emb__errbuf, fmt, ap);
    va_end(ap);
    return status;
}

emb_status emb_set_error(emb_status status, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(emb__errbuf, sizeof emb__errbuf, fmt, ap);
    va_end(ap);
    return status;
}

emb_status emb__null(const char *what) {
    return emb__error(EMB_ERR_NULL, "%s must not be NULL", what);
}
