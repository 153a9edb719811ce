/* assets.h: the page's files (tools/emb/serve/web/), compiled into the program: CMake turns
 * each file into a byte array (cmake/embed_files.cmake) in a generated source that defines
 * serve_asset_find. */
#ifndef EMB_TOOLS_SERVE_ASSETS_H
#define EMB_TOOLS_SERVE_ASSETS_H

#include <stddef.h>

typedef struct serve_asset {
    const char *path; /* "/index.html", "/app.js", ... */
    const char *type; /* its Content-Type */
    const unsigned char *data;
    size_t size;
} serve_asset;

/* The file served at `path`, or NULL. */
const serve_asset *serve_asset_find(const char *path);

#endif /* EMB_TOOLS_SERVE_ASSETS_H */
