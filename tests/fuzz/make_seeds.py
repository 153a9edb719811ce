#!/usr/bin/env python3
"""Writes the hostile seeds of the fuzz corpora in tests/fuzz/corpus/ (the files are
committed; run again after changing tests/data/make_bad_files.py or this script):

  - the edge cases of tests/data/bad (zero and huge dimensions, lying offsets, repeated
    keys, counts beyond int64, unaligned tensors) for the reader harnesses, w2v files with
    the harness's leading option byte;
  - fuzz_read_corpus: text with non-UTF-8 bytes, every kind of whitespace, NUL, a long
    token;
  - fuzz_read_corpora: gzip, bzip2, xz and zstd corpora (whole, concatenated, truncated,
    with trailing bytes), lists and directories of plain and compressed files;
  - fuzz_optim_state: an Adam state with a parameter count, a step count, a shape entry or
    a rank at their limits, and a NaN learning rate;
  - fuzz_train: option blocks (valid ones, and rates, samples and sentence lengths that are
    not) in front of tiny corpora;
  - fuzz_checkpoint, given a fuzz build: the checkpoints the harness's own setup writes
    (EMB_FUZZ_WRITE_SEEDS), plus copies with a NaN in a table, an epoch of 2^32, progress
    near INT64_MAX or beyond the run, and a zero random state (the harness re-seals the
    checksum, so the bytes need not).

    python3 tests/fuzz/make_seeds.py [BUILD-FUZZ-DIR]
"""
import os
import struct
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
BAD = os.path.join(HERE, "..", "data", "bad")
CORPUS = os.path.join(HERE, "corpus")

# tests/data/bad files made for the hostile cases, by the harness that reads them
HOSTILE = {
    "fuzz_read_safetensors": ["st_zero_width_huge.safetensors", "st_zero_width_f16.safetensors",
                              "st_zero_dim.safetensors", "st_zero_rows.safetensors",
                              "st_overflow_then_zero.safetensors", "st_lying_offsets.safetensors",
                              "st_huge_count.safetensors", "st_unaligned.safetensors",
                              "st_truncated_named.bin", "st_duplicate.safetensors", "st_bad_utf8.safetensors"],
    "fuzz_read_qtable": ["q_no_rows_huge_dim.safetensors", "q_dim_beyond_int64.safetensors",
                         "st_zero_width_f16.safetensors", "st_unaligned.safetensors"],
    "fuzz_read_npy": ["npy_zero_width_huge.npy", "npy_zero_dim.npy", "npy_repeated_key.npy"],
}


def put(harness, name, data):
    d = os.path.join(CORPUS, harness)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


def readers():
    for harness, names in HOSTILE.items():
        for n in names:
            with open(os.path.join(BAD, n), "rb") as f:
                put(harness, n, f.read())
    # word2vec: the option byte 0 (auto-detect, UTF-8 check, no limit) then the file
    put("fuzz_read_w2v", "w2v_zero_dim_glove.txt", b"\0" + "a\tb\n".encode())
    put("fuzz_read_w2v", "w2v_non_utf8_binary.bin", b"\4" + b"1 2\n\xff\xfe " + struct.pack("<2f", 1, 2))
    put("fuzz_read_w2v", "w2v_huge_rows.txt", b"\0" + b"288230376151711744 1\na 1\n")
    put("fuzz_read_w2v", "w2v_repeated_words.txt", b"\0" + b"3 1\na 1\na 2\nb 3\n")


def corpora():
    """fuzz_read_corpus: the option byte (min_count, case, punctuation, max_vocab, model,
    lenient),
    then text with the whitespace, punctuation and bytes a tokenizer must handle."""
    put("fuzz_read_corpus", "utf8_and_not", b"\x04" + "café cafe\u0301 naïve\nthe The THE\n".encode() + b"bad \xff\xfe\n")
    put("fuzz_read_corpus", "whitespace_kinds", b"\x08" + b"a\tb\x0bc\x0cd\r\ne  f\n\n\ng.h, (i)\n")
    put("fuzz_read_corpus", "nul_and_long", b"\x00" + b"a\x00b c " + b"x" * 3000 + b"\n")
    # lenient (option bit 128): a byte-order mark, then tokens to skip and tokens to keep
    put("fuzz_read_corpus", "bom_lenient", b"\x80" + b"\xef\xbb\xbfa b \xff c\nb \xc3( a\n")


def compressed_corpora():
    """fuzz_read_corpora: the option byte (files - 1, directory, lowercase, lenient,
    subfolder), the length of each file but the last (2 bytes), then the files: each compression, two
    gzip members and two zstd frames, a truncated stream, trailing bytes, mixed lists."""
    import bz2
    import gzip
    import lzma
    text = "The cat ΣΟΦΟΣ İstanbul\nthe dog Straße\n".encode() * 20
    # Small windows: a decoder allocates the window its data declares for every input mutated
    # from it, and under AddressSanitizer that allocation (8 MiB for xz's default dictionary,
    # 3.6 MB for bzip2 -9, 2 MiB for a zstd frame of unknown size) cost most of an execution.
    # So xz with a 4 KiB dictionary, bzip2 -1, and zstd frames that state their size (a
    # single segment: the window is the content).
    zstd = lambda d: subprocess.run(["zstd", "-q", "-19", "-c", f"--stream-size={len(d)}"],
                                    input=d, capture_output=True, check=True).stdout
    xz = lambda d: lzma.compress(d, filters=[{"id": lzma.FILTER_LZMA2, "preset": 9,
                                              "dict_size": 4096}])
    le = lambda n: bytes([n & 255, n >> 8])
    kinds = {"gz": lambda d: gzip.compress(d, mtime=0), "bz2": lambda d: bz2.compress(d, 1),
             "xz": xz, "zst": zstd}
    for name, f in kinds.items():
        data = f(text)
        put("fuzz_read_corpora", "one_" + name, b"\x08" + data)
        put("fuzz_read_corpora", "two_" + name, b"\x00" + f(text[:50]) + f(text[50:]))
        put("fuzz_read_corpora", "cut_" + name, b"\x00" + data[: len(data) // 2])
        put("fuzz_read_corpora", "tail_" + name, b"\x10" + data + b"\0\0\0\0")
        # a plain file and a compressed one in a subfolder of a directory
        put("fuzz_read_corpora", "dir_" + name, b"\x25" + le(100) + text[:100] + data)
    # four files of a directory: plain, gzip, xz (in the subfolder), zstd
    a, b, c = gzip.compress(text[:60], mtime=0), xz(text[60:200]), zstd(text[200:])
    put("fuzz_read_corpora", "four_mixed",
        b"\x2F" + le(30) + le(len(a)) + le(len(b)) + text[:30] + a + b + c)


def options(model=0, dim=8, window=2, negative=2, epochs=2, min_count=1, max_vocab=0, alpha=0,
            min_alpha=1, sample=0, max_sentence=1000, seed=1, subwords=None):
    """The 32-byte option block of fuzz_train.c (alpha and sample index its tables; subwords:
    (maxn, minn, bucket byte 28, bucket byte 29))."""
    sub = bytes([0x80 | subwords[0], subwords[1], subwords[2], subwords[3]]) if subwords else bytes(4)
    return (bytes([model, dim, window, negative, epochs, min_count, max_vocab, alpha, min_alpha, sample])
            + struct.pack("<q", max_sentence) + struct.pack("<Q", seed) + sub + bytes(2))


TOPICS = ("red green blue red the green blue\ncat dog the horse cat dog\n" * 12).encode()
TINY = b"a b a b c\nb c a\n"


def train():
    seeds = {
        "sg": options() + TOPICS,
        "cbow": options(model=1) + TOPICS,
        "shared_threads2": options(model=4 | 32) + TOPICS,
        "cbow_sum_threads3": options(model=1 | 2 | 64) + TOPICS,
        "lower_strip": options(model=8 | 16) + b"The, THE the. Cat cat! dog\n" * 8,
        "tiny": options(dim=1, window=1, negative=1, epochs=1) + TINY,
        "dim0": options(dim=0) + TINY,
        "alpha1_no_sample": options(alpha=3, epochs=3, dim=20, window=5, negative=5) + TOPICS,
        "alpha_above_1": options(alpha=7) + TINY,
        "alpha_huge": options(alpha=10) + TOPICS,
        "alpha_nan": options(alpha=12) + TINY,
        "sample_nan": options(sample=5) + TINY,
        "max_sentence_2p62": options(max_sentence=2 ** 62) + TOPICS,
        "max_sentence_2p62_plus_1": options(max_sentence=2 ** 62 + 1) + TINY,
        "max_sentence_int32": options(max_sentence=2 ** 31 - 1) + TINY,
        "max_sentence_1": options(max_sentence=1) + TOPICS,
        "not_utf8": options() + b"ok \xff\xfe bad\n",
        "empty": options(),
        # fastText's subwords: maxn, minn, buckets (1 + the 12 low bits of bytes 28-29; bit 7
        # of byte 29: a refused count from a table)
        "subwords_sg": options(subwords=(4, 2, 99, 0)) + TOPICS,
        "subwords_cbow_threads2": options(model=1 | 32, subwords=(6, 3, 0xff, 0x0f)) + TOPICS,
        "subwords_minn_above_maxn": options(subwords=(2, 5, 10, 0)) + TOPICS,
        "subwords_bucket_int32_max": options(subwords=(4, 3, 2, 0x80)) + TOPICS,
    }
    for name, data in seeds.items():
        put("fuzz_train", name, data)


def checkpoints(build):
    exe = os.path.join(build, "fuzz", "fuzz_checkpoint")
    with tempfile.TemporaryDirectory() as tmp:
        env = dict(os.environ, EMB_FUZZ_WRITE_SEEDS=tmp, ASAN_OPTIONS="detect_leaks=0")
        subprocess.run([exe, "-runs=0"], env=env, check=True, stdout=subprocess.DEVNULL)
        names = sorted(os.listdir(tmp))
        for n in names:
            with open(os.path.join(tmp, n), "rb") as f:
                put("fuzz_checkpoint", n, f.read())
        with open(os.path.join(tmp, "t1-r2.ckpt"), "rb") as f:
            base = f.read()
    # version 3: 64 bytes of subword and phrase options after the 17 options; version 4: then
    # the list of corpus files (a count, and each its name's length, name, bytes, fingerprint)
    opts_end = 8 + 8 + 17 * 8
    (version,) = struct.unpack_from("<Q", base, 8)
    extra = 64 if version >= 3 else 0
    if version >= 4:
        (nfiles,) = struct.unpack_from("<Q", base, opts_end + extra)
        at = opts_end + extra + 8
        for _ in range(nfiles):
            (length,) = struct.unpack_from("<Q", base, at)
            at += 8 + length + 16
        extra = at - opts_end
    if version >= 3:  # the same run as a version 2 file (the harness re-seals the checksum)
        v2 = bytearray(base[:opts_end] + base[opts_end + extra:])
        struct.pack_into("<Q", v2, 8, 2)
        put("fuzz_checkpoint", "v2-t1-r2.ckpt", bytes(v2))
    words_done = opts_end + extra + 3 * 8
    lane0 = words_done + 8
    (V,) = struct.unpack_from("<Q", base, opts_end + extra)
    dim = 4
    table = len(base) - 8 - 2 * V * dim * 4

    def patched(name, *edits):
        b = bytearray(base)
        for off, fmt, v in edits:
            struct.pack_into(fmt, b, off, v)
        put("fuzz_checkpoint", name, bytes(b))

    patched("nan_input_table", (table + 5 * 4, "<f", float("nan")))
    patched("inf_output_table", (len(base) - 12, "<f", float("inf")))
    patched("epoch_2p32", (lane0 + 24, "<Q", 2 ** 32))
    patched("words_done_near_int64_max", (words_done, "<q", 2 ** 63 - 5))
    patched("words_done_beyond_the_run", (words_done, "<q", 10 ** 6))
    patched("rng_zero", (lane0 + 32, "<Q", 0))


def optim_state():
    """Hostile copies of a committed Adam state (harness input: kind byte, option byte with
    0x80 = re-seal the checksum, then the state; layout in docs/optimizer-state.md)."""
    d = os.path.join(CORPUS, "fuzz_optim_state")
    base = None
    for n in sorted(os.listdir(d)):
        with open(os.path.join(d, n), "rb") as f:
            b = f.read()
        if len(b) > 2 + 96 + 32 and b[0] % 5 == 2 and b[2:10] == b"EMBOPTST":
            base = b
            break
    if base is None:
        return
    rec = 2 + 96  # the first parameter record: ndim, flags, steps, kind, reserved, nnz, shape

    def patched(name, *edits):
        b = bytearray(base)
        b[1] |= 0x80
        for off, fmt, v in edits:
            struct.pack_into(fmt, b, off, v)
        put("fuzz_optim_state", name, bytes(b))

    patched("params_u32_max", (2 + 92, "<I", 0xFFFFFFFF))
    patched("steps_int64_max", (rec + 8, "<q", 2 ** 63 - 1))
    patched("shape_zero", (rec + 32, "<q", 0))
    patched("shape_huge", (rec + 32, "<q", 2 ** 62))
    patched("ndim_too_many", (rec, "<I", 64))
    patched("lr_nan", (2 + 16, "<d", float("nan")))


if __name__ == "__main__":
    readers()
    corpora()
    compressed_corpora()
    optim_state()
    train()
    if len(sys.argv) > 1:
        checkpoints(sys.argv[1])
    elif not os.path.isdir(os.path.join(CORPUS, "fuzz_checkpoint")):
        print("make_seeds.py: give the fuzz build folder to write the checkpoint seeds", file=sys.stderr)
