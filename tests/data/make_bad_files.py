#!/usr/bin/env python3
"""Writes the known-bad (and a few known-good) files in tests/data/bad/. Each file is
committed; test_io.c checks the error for each, and the fuzz harnesses use them as seeds.
Run from anywhere: python3 tests/data/make_bad_files.py"""
import json
import os
import struct

D = os.path.join(os.path.dirname(os.path.abspath(__file__)), "bad")
os.makedirs(D, exist_ok=True)


def put(name, data):
    with open(os.path.join(D, name), "wb") as f:
        f.write(data if isinstance(data, bytes) else data.encode())


def st(header, data=b"", raw=None, pad=True):
    h = raw if raw is not None else json.dumps(header, separators=(",", ":")).encode()
    if pad:
        h += b" " * (-len(h) % 8)
    return struct.pack("<Q", len(h)) + h + data


f32x6 = struct.pack("<6f", *range(6))
ok = {"weight": {"dtype": "F32", "shape": [2, 3], "data_offsets": [0, 24]}}
# --- safetensors ---
put("st_short.safetensors", b"\x10\x00\x00")
put("st_header_too_long.safetensors", struct.pack("<Q", 1 << 40) + b"{}")
put("st_header_past_end.safetensors", struct.pack("<Q", 64) + b'{"a":1}')
put("st_not_json.safetensors", st(None, raw=b"{not json}"))
put("st_not_object.safetensors", st(None, raw=b"[1, 2]   "))
put("st_duplicate.safetensors", st(None, raw=b'{"weight":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},'
                                             b'"weight":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}}',
                                   data=b"\0" * 8))
put("st_bad_dtype.safetensors", st({"weight": {"dtype": "F33", "shape": [2, 3], "data_offsets": [0, 24]}}, f32x6))
put("st_unsupported_dtype.safetensors", st({"weight": {"dtype": "F8_E4M3", "shape": [2, 3], "data_offsets": [0, 6]}},
                                           b"\0" * 6))
put("st_size_mismatch.safetensors", st({"weight": {"dtype": "F32", "shape": [2, 3], "data_offsets": [0, 20]}},
                                       f32x6[:20]))
put("st_truncated.safetensors", st(ok, f32x6[:12]))
put("st_trailing.safetensors", st(ok, f32x6 + b"xx"))
put("st_overlap.safetensors", st({"a": {"dtype": "F32", "shape": [3], "data_offsets": [0, 12]},
                                  "b": {"dtype": "F32", "shape": [3], "data_offsets": [8, 20]}}, f32x6[:20]))
put("st_hole.safetensors", st({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
                               "b": {"dtype": "F32", "shape": [2], "data_offsets": [16, 24]}}, f32x6))
put("st_out_of_range.safetensors", st({"weight": {"dtype": "F32", "shape": [2, 3],
                                                  "data_offsets": [4096, 4120]}}, f32x6))
put("st_negative.safetensors", st({"weight": {"dtype": "F32", "shape": [-2, 3], "data_offsets": [0, 24]}}, f32x6))
put("st_float_offset.safetensors", st({"weight": {"dtype": "F32", "shape": [2, 3], "data_offsets": [0.0, 24]}},
                                      f32x6))
put("st_huge_shape.safetensors", st({"weight": {"dtype": "F32", "shape": [2**62, 2**62],
                                                "data_offsets": [0, 24]}}, f32x6))
put("st_big_number.safetensors", st(None, raw=b'{"weight":{"dtype":"F32","shape":[2,3],'
                                               b'"data_offsets":[0,18446744073709551640]}}', data=f32x6))
put("st_meta_not_string.safetensors", st({"__metadata__": {"format": 1}, **ok}, f32x6))
put("st_bad_utf8.safetensors", st(None, raw=b'{"w\xff":{"dtype":"F32","shape":[2,3],"data_offsets":[0,24]}}',
                                  data=f32x6))
put("st_vocab_short.safetensors", st({"__metadata__": {"format": "pt", "emb.vocab": "a"}, **ok}, f32x6))
put("st_no_table.safetensors", st({"a": {"dtype": "F32", "shape": [2, 3], "data_offsets": [0, 24]},
                                   "b": {"dtype": "F32", "shape": [2, 3], "data_offsets": [24, 48]}}, f32x6 + f32x6))
put("st_int_table.safetensors", st({"weight": {"dtype": "I32", "shape": [2, 3], "data_offsets": [0, 24]}}, f32x6))
put("st_sub_byte.safetensors", st({"weight": {"dtype": "F4", "shape": [3], "data_offsets": [0, 1]}}, b"\0"))

# --- npy ---
def npy(header, data, version=(1, 0)):
    h = header.encode("latin-1") if isinstance(header, str) else header
    h += b"\n"
    if version[0] == 1:
        return b"\x93NUMPY" + bytes(version) + struct.pack("<H", len(h)) + h + data
    return b"\x93NUMPY" + bytes(version) + struct.pack("<I", len(h)) + h + data


put("npy_bad_magic.npy", b"\x93NUMPX\x01\x00" + b"\0" * 40)
put("npy_bad_version.npy", npy("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }", f32x6, (9, 0)))
put("npy_header_past_end.npy", b"\x93NUMPY\x01\x00\xff\x7f{'descr'")
put("npy_object.npy", npy("{'descr': '|O', 'fortran_order': False, 'shape': (2,), }", b"\0" * 16))
put("npy_truncated.npy", npy("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }", f32x6[:20]))
put("npy_trailing.npy", npy("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }", f32x6 + b"zz"))
put("npy_shape_list.npy", npy("{'descr': '<f4', 'fortran_order': False, 'shape': [2, 3], }", f32x6))
put("npy_huge_shape.npy", npy("{'descr': '<f4', 'fortran_order': False, 'shape': (4611686018427387904, 4), }", f32x6))
put("npy_missing_key.npy", npy("{'descr': '<f4', 'shape': (2, 3), }", f32x6))
put("npy_bad_descr.npy", npy("{'descr': '<c8', 'fortran_order': False, 'shape': (2, 3), }", f32x6 * 2))
put("npy_too_many_dims.npy", npy("{'descr': '<f4', 'fortran_order': False, 'shape': (1,1,1,1,1,1,1,1,1,1), }",
                                 f32x6[:4]))
put("npy_1d_table.npy", npy("{'descr': '<f4', 'fortran_order': False, 'shape': (6,), }", f32x6))

# --- word2vec / GloVe ---
put("w2v_truncated.bin", b"2 2\nalpha " + struct.pack("<2f", 1, 2) + b"\nbeta " + struct.pack("<2f", 3, 4)[:5])
put("w2v_fewer_rows.bin", b"3 2\na " + struct.pack("<2f", 1, 2) + b"\nb " + struct.pack("<2f", 3, 4) + b"\n")
put("w2v_huge_header.bin", b"100000000000 300\na " + struct.pack("<2f", 1, 2))
put("w2v_absurd_dim.txt", b"1 100000000000\na 1 2\n")
put("w2v_zero_dim.txt", b"1 0\na\n")
put("w2v_bad_header.txt", b"two three\na 1 2\n")
put("w2v_fewer_rows.txt", b"3 2\nalpha 1.5 2.5\nbeta 3.5 4.5\n")
put("w2v_more_rows.txt", b"1 2\na 1 2\nb 3 4\n")
put("w2v_short_row.txt", b"2 3\na 1 2 3\nb 4 5\n")
put("w2v_long_row.txt", b"2 3\na 1 2 3\nb 4 5 6 7\n")
put("w2v_not_number.txt", b"1 3\na 1 x2 3\n")
put("w2v_bad_utf8.txt", b"1 2\n\xff\xfe 1 2\n")
put("w2v_bad_utf8.bin", b"1 2\n\xc3( " + struct.pack("<2f", 1, 2) + b"\n")
put("glove_ragged.txt", b"a 1 2 3\nb 4 5\n")
put("glove_one_field.txt", b"lonely\n")
put("empty.txt", b"")

# --- hostile edge cases: zero and huge dimensions, lying offsets, repeated keys ---
put("st_zero_width_huge.safetensors", st({"weight": {"dtype": "F32", "shape": [2**58, 0], "data_offsets": [0, 0]}}))
put("st_zero_width_f16.safetensors", st({"weight": {"dtype": "F16", "shape": [2**59, 0], "data_offsets": [0, 0]}}))
put("st_zero_dim.safetensors", st({"__metadata__": {"emb.vocab": "a\nb\nc"},
                                   "weight": {"dtype": "F32", "shape": [3, 0], "data_offsets": [0, 0]}}))
put("st_zero_rows.safetensors", st({"__metadata__": {"emb.vocab": ""},
                                    "weight": {"dtype": "BF16", "shape": [0, 3], "data_offsets": [0, 0]}}))
put("st_overflow_then_zero.safetensors", st({"weight": {"dtype": "F64", "shape": [2**62, 2**62, 0],
                                                        "data_offsets": [0, 0]}}))
put("st_lying_offsets.safetensors", st({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
                                        "weight": {"dtype": "F32", "shape": [2**38], "data_offsets": [8, 2**40 + 8]}},
                                       f32x6))
put("st_huge_count.safetensors", st({"__metadata__": {"emb.vocab": "a\nb", "emb.counts": "1 99999999999999999999"},
                                     "weight": {"dtype": "F32", "shape": [2, 3], "data_offsets": [0, 24]}}, f32x6))
put("st_unaligned.safetensors", st({"a": {"dtype": "U8", "shape": [1], "data_offsets": [0, 1]},
                                    "weight": {"dtype": "F32", "shape": [2, 3], "data_offsets": [1, 25]}},
                                   b"\x07" + f32x6))
put("st_truncated_named.bin", st(ok, f32x6)[:30])
put("q_no_rows_huge_dim.safetensors", st({"__metadata__": {"format": "pt", "emb.qtype": "int8", "emb.dim": str(2**40)},
                                          "weight": {"dtype": "U8", "shape": [0, 2**40 + 8], "data_offsets": [0, 0]}}))
put("q_dim_beyond_int64.safetensors", st({"__metadata__": {"emb.qtype": "int8", "emb.dim": "99999999999999999999"},
                                          "weight": {"dtype": "U8", "shape": [0, 9], "data_offsets": [0, 0]}}))
put("npy_zero_width_huge.npy", npy("{'descr': '<f4', 'fortran_order': False, 'shape': (288230376151711744, 0), }", b""))
put("npy_zero_dim.npy", npy("{'descr': '<f2', 'fortran_order': True, 'shape': (3, 0), }", b""))
put("npy_repeated_key.npy", npy("{'descr': '<f4', 'fortran_order': False, 'shape': (9, 9), 'shape': (2, 3), }",
                                f32x6))
