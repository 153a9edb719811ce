/* libFuzzer harness: .npy files (emb_npy_read, emb_vectors_read), with write/read round trips. */
#include "fuzz_read_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *path = fz_input_path(data, size);
    emb_tensor t, sentinel;
    memset(&t, 0x5a, sizeof t);
    sentinel = t;
    emb_clear_error();
    emb_status rc = emb_npy_read(path, &t);
    if (rc) {
        fz_check_error(rc, "emb_npy_read");
        if (memcmp(&t, &sentinel, sizeof t)) FINDING("emb_npy_read changed *out on failure");
    } else {
        if (emb_tensor_check(&t, "t"))
            FINDING("emb_npy_read returned an invalid tensor: %s", emb_errmsg());
        const char *out = fz_scratch("rt.npy");
        if (emb_npy_write(out, &t)) FINDING("cannot write back: %s", emb_errmsg());
        emb_tensor back;
        if (emb_npy_read(out, &back)) FINDING("cannot read back: %s", emb_errmsg());
        if (back.dtype != t.dtype || !emb__tensor_same_shape(&back, &t) ||
            (emb_tensor_nbytes(&t) && memcmp(back.data, t.data, emb_tensor_nbytes(&t))))
            FINDING("npy round trip changed the array");
        emb_tensor_release(&back);
        emb_tensor_release(&t);
    }
    emb_vectors v;
    if (fz_read_vectors(path, EMB_FORMAT_NPY, size % 3 == 0 ? 2 : 0, &v)) emb_vectors_release(&v);
    return 0;
}
