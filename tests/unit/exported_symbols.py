"""The shared library exports exactly the public API.

    exported_symbols.py LIBEMB_SO INCLUDE_DIR

Lists the dynamic symbols libemb.so defines (nm -D --defined-only) and fails on any that is
not a function declared EMB_API in INCLUDE_DIR/*.h, on any exported symbol that is not code,
and on any EMB_API declaration the library does not export. Before that, it checks itself on
synthetic inputs, so that a checker that cannot fail is caught too.
"""
import glob
import os
import re
import subprocess
import sys

API_FN_RE = re.compile(r"\bEMB_API\b[^;{}]*?\b([A-Za-z_]\w*)\s*\(")
API_ANY_RE = re.compile(r"\bEMB_API\b")
FUNC_TYPES = {"T", "t", "i"}  # text, or an indirect function (ifunc)


def strip_comments(text):
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
    text = re.sub(r"//[^\n]*", "", text)
    # preprocessor lines (the EMB_API definition itself, include guards)
    return re.sub(r"(?m)^[ \t]*#.*(?:\\\n.*)*", "", text)


def api_functions(header_texts):
    """Names of the functions declared EMB_API; raises on an EMB_API declaration that is not
    a function (the API exports functions only)."""
    names = set()
    for name, text in header_texts.items():
        text = strip_comments(text)
        n_api = len(API_ANY_RE.findall(text))
        found = API_FN_RE.findall(text)
        if len(found) != n_api:
            raise SystemExit(f"{name}: {n_api} EMB_API declarations but {len(found)} functions "
                             f"recognised; the checker needs updating")
        names.update(found)
    return names


def parse_nm(output):
    """[(name, type)] from `nm -D --defined-only` lines ("addr type name[@version]")."""
    syms = []
    for line in output.splitlines():
        parts = line.split()
        if len(parts) < 3:
            continue
        syms.append((parts[2].split("@")[0], parts[1]))
    return syms


def problems(api, syms):
    out = []
    exported = set()
    for name, typ in syms:
        exported.add(name)
        if name not in api:
            out.append(f"exported but not public API: {name} (nm type {typ})")
        elif typ not in FUNC_TYPES:
            out.append(f"exported public name is not a function: {name} (nm type {typ})")
    for name in sorted(api - exported):
        out.append(f"declared EMB_API but not exported: {name}")
    return out


def self_test():
    hdr = {"x.h": "/* EMB_API in a comment: emb_nope(void) */\n"
                  "#define EMB_API __attribute__((visibility(\"default\")))\n"
                  "EMB_API int emb_a(void);\n"
                  "EMB_API const char *\nemb_b(int x,\n      int y);\n"
                  "static inline int emb_inline(void) { return 0; }\n"}
    api = api_functions(hdr)
    assert api == {"emb_a", "emb_b"}, api
    good = parse_nm("0000000000001000 T emb_a\n0000000000001010 T emb_b@@EMB_0\n")
    assert problems(api, good) == [], problems(api, good)
    leak = good + [("emb__lookup_rows_ref", "T")]
    assert any("emb__lookup_rows_ref" in p for p in problems(api, leak))
    missing = good[:1]
    assert any("not exported: emb_b" in p for p in problems(api, missing))
    data = good + [("emb_a_table", "D")]
    assert any("emb_a_table" in p for p in problems(api, data))
    notfn = [("emb_a", "D"), ("emb_b", "T")]
    assert any("not a function: emb_a" in p for p in problems(api, notfn))
    try:
        api_functions({"y.h": "EMB_API extern int emb_counter;\n"})
    except SystemExit:
        pass
    else:
        raise AssertionError("an EMB_API variable was not noticed")


def main(argv):
    if len(argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    self_test()
    lib, include_dir = argv[1], argv[2]
    headers = {}
    for path in sorted(glob.glob(os.path.join(include_dir, "*.h"))):
        with open(path, encoding="utf-8") as f:
            headers[os.path.basename(path)] = f.read()
    if not headers:
        print(f"no headers in {include_dir}", file=sys.stderr)
        return 1
    api = api_functions(headers)
    nm = subprocess.run(["nm", "-D", "--defined-only", lib], check=True, capture_output=True,
                        text=True).stdout
    syms = parse_nm(nm)
    found = problems(api, syms)
    if found:
        print(f"{lib}: {len(found)} problem(s) with the exported symbols:", file=sys.stderr)
        for p in found:
            print("  " + p, file=sys.stderr)
        return 1
    print(f"{lib}: exports exactly the {len(api)} EMB_API functions of {len(headers)} headers")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
