"""The public API follows the naming rules of docs/api.md ("API rules") where a machine can tell.

    api_rules.py INCLUDE_DIR

Reads every EMB_API declaration of INCLUDE_DIR/*.h (and those of the add-on libraries' own
export macros, EMB_<X>_API, as <emb/mpi.h>'s EMB_MPI_API) and fails, naming the function, when:
  1. a handle is destroyed by anything but `void emb_T_free(emb_T *)` (opaque T), or a
     `_free` takes something that is not a handle, or a `_release` takes something that is
     not a struct the caller owns (defined in the headers); other destroy verbs
     (_close, _abort, _destroy, _delete) do not exist;
  2. a function whose first parameter is a handle of type T is not named emb_T_..., unless
     it constructs another handle; a constructor (its last pointer-to-pointer parameters
     receive handles) is named after the handle it makes;
  3. a getter is spelled get_ (except the PyTorch-named ones listed in GET_ALLOWED);
  4. a size is named with _size, _count or _bytes instead of num_<items>, dim or nbytes
     (SIZE_ALLOWED lists the names that mean something else);
  5. an options struct emb_X_options has no emb_X_options_default returning it;
  6. a handle out-parameter (emb_T **) is followed by a parameter that is not one.
Before that it checks itself on synthetic headers that break each rule, so that a checker
that cannot fail is caught too.
"""
import glob
import os
import re
import sys

# PyTorch's names: torch.get_num_threads, Generator.get_state/set_state; the kernel mode is
# the process-wide setting beside the thread count and is spelled like it.
GET_ALLOWED = {"emb_get_num_threads", "emb_get_kernel_mode", "emb_generator_get_state"}
# A word's frequency in the corpus is its count: not a size.
SIZE_ALLOWED = {"emb_vocab_count", "emb_vocab_set_count", "emb_vocab_sort_by_count"}
DESTROY_VERBS = ("_close", "_abort", "_destroy", "_delete")


def strip(text):
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
    text = re.sub(r"//[^\n]*", "", text)
    return re.sub(r"(?m)^[ \t]*#.*(?:\\\n.*)*", "", text)


# The export macros: libemb's EMB_API and an add-on library's EMB_<X>_API (EMB_MPI_API).
API_MACRO = r"\bEMB_(?:[A-Z0-9]+_)?API\b"


def parse(header_texts):
    """(functions, opaque types, struct types): functions as {name: (return, [params])}."""
    funcs, opaque, structs = {}, set(), set()
    for text in header_texts.values():
        text = strip(text)
        opaque.update(re.findall(r"typedef\s+struct\s+(emb_\w+)\s+\1\s*;", text))
        structs.update(re.findall(r"typedef\s+struct\s+(emb_\w+)\s*\{[^}]*\}\s*\1\s*;", text, flags=re.S))
        structs.update(re.findall(r"typedef\s+struct\s+emb_\w+\s*\{.*?\}\s*(emb_\w+)\s*;", text, flags=re.S))
        for m in re.finditer(API_MACRO + r"([^;{}]*?)\b(emb_\w+)\s*\(([^;{}]*?)\)\s*;", text, flags=re.S):
            params = [" ".join(p.split()) for p in m.group(3).split(",")]
            if params == ["void"]:
                params = []
            funcs[m.group(2)] = (" ".join(m.group(1).split()), params)
    return funcs, opaque, structs - opaque


def ptype(param):
    """The type of a parameter declaration, without const and the parameter name."""
    p = param.replace("const ", "").strip()
    m = re.match(r"(\w+)\s*(\**)\s*\w*$", p)
    return (m.group(1), len(m.group(2))) if m else (p, 0)


def family(name, opaque):
    """The longest opaque type that prefixes name (emb_qtable_writer before emb_qtable)."""
    best = None
    for t in opaque:
        if name.startswith(t + "_") and (best is None or len(t) > len(best)):
            best = t
    return best


def problems(funcs, opaque, structs):
    out = []
    for name, (ret, params) in sorted(funcs.items()):
        types = [ptype(p) for p in params]
        # 1. destroy / empty
        if name.endswith("_free"):
            t = name[: -len("_free")]
            if t not in opaque or types != [(t, 1)] or ret != "void":
                out.append(f"{name}: a _free destroys a handle: void {t}_free({t} *) with {t} opaque")
        if name.endswith("_release"):
            t = name[: -len("_release")]
            if t not in structs or types != [(t, 1)] or ret != "void":
                out.append(f"{name}: a _release empties a caller-owned struct: void {t}_release({t} *)")
        if name.endswith(DESTROY_VERBS):
            out.append(f"{name}: handles are destroyed by emb_T_free only")
        # 2. families; constructors are named after what they make
        made = [t for t, stars in types if stars == 2 and t in opaque]
        if made:
            if not name.startswith(made[0] + "_"):
                out.append(f"{name}: constructs a {made[0]}, so its name starts with {made[0]}_")
        elif types and types[0][1] == 1 and types[0][0] in opaque:
            t = types[0][0]
            if family(name, opaque) != t:
                out.append(f"{name}: its first parameter is a {t}, so its name starts with {t}_")
        # 3. getters
        if re.search(r"(^emb_|_)get_", name) and name not in GET_ALLOWED:
            out.append(f"{name}: getters are named by the attribute, without get_")
        # 4. sizes
        if re.search(r"_(size|count|bytes)$", name) and not name.endswith("_nbytes") \
                and name not in SIZE_ALLOWED:
            out.append(f"{name}: sizes are num_<items>, dim or nbytes")
        # 6. handle out-parameters last
        seen_out = False
        for t, stars in types:
            if stars == 2 and t in opaque:
                seen_out = True
            elif seen_out and stars != 2:
                out.append(f"{name}: handle out-parameters come last")
                break
    # 5. options structs
    for s in sorted(structs):
        if s.endswith("_options"):
            d = funcs.get(s + "_default")
            if not d or d[0] != s:
                out.append(f"{s}: needs {s}_default() returning it")
    return out


def self_test():
    good = {"g.h": """
typedef struct emb_thing emb_thing;
typedef struct emb_view { int n; } emb_view;
typedef struct emb_thing_options { int a; } emb_thing_options;
EMB_API emb_thing_options emb_thing_options_default(void);
EMB_API emb_status emb_thing_create(const emb_thing_options *opts, emb_thing **out);
EMB_API emb_status emb_other_create_from_thing(const emb_thing *t, emb_other **out);
EMB_API void emb_thing_free(emb_thing *t);
EMB_API void emb_view_release(emb_view *v);
EMB_API int64_t emb_thing_num_rows(const emb_thing *t);
EMB_API size_t emb_thing_state_nbytes(const emb_thing *t);
EMB_API int emb_get_num_threads(void);
typedef struct emb_other emb_other;
"""}
    assert problems(*parse(good)) == [], problems(*parse(good))
    bad = {
        "free of a struct": "EMB_API void emb_view_free(emb_view *v);",
        "release of a handle": "EMB_API void emb_thing_release(emb_thing *t);",
        "close": "EMB_API void emb_thing_close(emb_thing *t);",
        "foreign family": "EMB_API int64_t emb_rows_of_thing(const emb_thing *t);",
        "constructor name": "EMB_API emb_status emb_open_thing(const char *p, emb_thing **out);",
        "get_": "EMB_API double emb_thing_get_lr(const emb_thing *t);",
        "size": "EMB_API int64_t emb_thing_size(const emb_thing *t);",
        "out not last": "EMB_API emb_status emb_thing_create2(emb_thing **out, int n);",
        "no default": "typedef struct emb_view_options { int a; } emb_view_options;",
        "add-on macro": "EMB_MPI_API int64_t emb_rows_of_thing(const emb_thing *t);",
    }
    for what, decl in bad.items():
        p = problems(*parse({"g.h": good["g.h"], "b.h": decl}))
        assert p, f"the check misses: {what}"


def main():
    self_test()
    inc = sys.argv[1]
    texts = {os.path.basename(p): open(p, encoding="utf-8").read()
             for p in sorted(glob.glob(os.path.join(inc, "*.h")))}
    funcs, opaque, structs = parse(texts)
    n_api = sum(len(re.findall(API_MACRO, strip(t))) for t in texts.values())
    if n_api != len(funcs) or not funcs:
        sys.exit(f"{n_api} EMB_API declarations but {len(funcs)} parsed; the checker needs updating")
    out = problems(funcs, opaque, structs)
    for p in out:
        print(p)
    if out:
        sys.exit(f"{len(out)} names break the API rules (docs/api.md)")
    print(f"{len(funcs)} functions, {len(opaque)} handle types, {len(structs)} structs follow the rules")


if __name__ == "__main__":
    main()
