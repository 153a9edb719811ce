#!/usr/bin/python3
"""Writes src/text/casefold_table.c, the tables of emb's Unicode lowercasing
(src/text/casefold.c), from the Python that runs it (Debian's python3): what str.lower() does
to each code point, and the two character classes its final-sigma rule looks at.

    /usr/bin/python3 scripts/gen-casefold.py > src/text/casefold_table.c

The tables are derived from str.lower()'s own behaviour, so that emb lowercases as that
Python does:
  - lower runs: every code point whose lowercase is one other code point, as runs
    (first, last, delta, stride): the code points first, first + stride, ..., last map to
    code point + delta; runs do not overlap. The one code point whose lowercase is two code
    points (U+0130 -> "i" U+0307) is handled in casefold.c and checked here.
  - ignorable / cased ranges: str.lower() turns a capital sigma into final sigma when the
    nearest character before it that is not case-ignorable is cased, and the nearest one after
    it that is not case-ignorable is not cased (or there is none). A character x is
    "ignorable" when "A" + x + SIGMA lowers to a final sigma because x is skipped, i.e.
    ("1" + x + SIGMA) does not end in final sigma but ("A" + x + SIGMA) does while x is not
    cased-and-not-ignorable; "cased" (and not ignorable) when "1" + x + SIGMA ends in final
    sigma.
Every table is checked against str.lower() over all code points before it is written.
"""
import sys
import unicodedata

SIGMA, FINAL = "\u03a3", "\u03c2"
CODE_POINTS = [c for c in range(0x110000) if not 0xD800 <= c <= 0xDFFF]


def lower_runs():
    single = {}
    for c in CODE_POINTS:
        low = chr(c).lower()
        if len(low) == 1 and ord(low) != c:
            single[c] = ord(low)
        elif len(low) > 1 and c != 0x130:
            sys.exit("gen-casefold.py: U+%04X lowers to %d code points: not handled" % (c, len(low)))
    assert chr(0x130).lower() == "i\u0307"
    runs, keys, i = [], sorted(single), 0
    while i < len(keys):
        first = keys[i]
        delta = single[first] - first
        stride, last, j = 1, first, i + 1
        if j < len(keys) and keys[j] == first + 1 and single[keys[j]] - keys[j] == delta:
            stride = 1
        elif (j < len(keys) and keys[j] == first + 2 and single[keys[j]] - keys[j] == delta
              and first + 1 not in single):
            stride = 2
        while (j < len(keys) and keys[j] == last + stride and single[keys[j]] - keys[j] == delta
               and (stride == 1 or last + 1 not in single)):
            last = keys[j]
            j += 1
        runs.append((first, last, delta, stride))
        i = j
    return single, runs


def classes():
    ignorable, cased = set(), set()
    for c in CODE_POINTS:
        x = chr(c)
        if ("1" + x + SIGMA).lower()[-1] == FINAL:
            cased.add(c)
        elif ("A" + x + SIGMA).lower()[-1] == FINAL:
            ignorable.add(c)
    return ignorable, cased


def ranges(points):
    out = []
    for c in sorted(points):
        if out and out[-1][1] == c - 1:
            out[-1][1] = c
        else:
            out.append([c, c])
    return out


def check(single, runs, ignorable, cased):
    def lookup(c):
        lo, hi = 0, len(runs)
        while lo < hi:
            mid = (lo + hi) // 2
            if runs[mid][0] <= c:
                lo = mid + 1
            else:
                hi = mid
        if lo == 0:
            return c
        first, last, delta, stride = runs[lo - 1]
        return c + delta if c <= last and (c - first) % stride == 0 else c
    for c in CODE_POINTS:
        assert lookup(c) == single.get(c, c), hex(c)
    # the derived classes reproduce str.lower()'s sigma in a few contexts of each class
    for c in list(ignorable)[:200] + list(cased)[:200]:
        for s in ["A" + chr(c) + SIGMA, SIGMA + chr(c), "A" + SIGMA + chr(c) + "b"]:
            want = s.lower()
            got = []
            for k, ch in enumerate(s):
                if ch != SIGMA:
                    got.append(ch.lower())
                    continue
                b = k - 1
                while b >= 0 and ord(s[b]) in ignorable:
                    b -= 1
                f = k + 1
                while f < len(s) and ord(s[f]) in ignorable:
                    f += 1
                final = b >= 0 and ord(s[b]) in cased and not (f < len(s) and ord(s[f]) in cased)
                got.append(FINAL if final else "\u03c3")
            assert "".join(got) == want, (hex(c), s)


def table(name, rows, fmt):
    lines = ["const uint32_t %s[][%d] = {" % (name, len(rows[0]))]
    line = "   "
    for r in rows:
        item = " {" + ", ".join(fmt(v) for v in r) + "},"
        if len(line) + len(item) > 96:
            lines.append(line)
            line = "   "
        line += item
    lines.append(line)
    lines.append("};")
    lines.append("const size_t %s_n = %d;" % (name, len(rows)))
    return "\n".join(lines)


def main():
    single, runs = lower_runs()
    ignorable, cased = classes()
    check(single, runs, ignorable, cased)
    hexa = lambda v: "0x%X" % v
    # delta as uint32_t (modulo 2^32): the C side adds it with wrap-around
    rows = [(f, l, d & 0xFFFFFFFF, s) for f, l, d, s in runs]
    print("/* Generated by scripts/gen-casefold.py from Python %s (Unicode %s): do not edit. */"
          % (sys.version.split()[0], unicodedata.unidata_version))
    print('#include "casefold.h"\n')
    print("/* clang-format off */")
    print("const char emb__casefold_unicode[] = \"%s\";\n" % unicodedata.unidata_version)
    print("/* {first, last, delta mod 2^32, stride}: first, first + stride, ..., last map to")
    print(" * code point + delta */")
    print(table("emb__lower_runs", rows, hexa) + "\n")
    print("/* case-ignorable code points (for the final sigma), {first, last} */")
    print(table("emb__ignorable_ranges", ranges(ignorable), hexa) + "\n")
    print("/* cased code points that are not case-ignorable, {first, last} */")
    print(table("emb__cased_ranges", ranges(cased), hexa))
    print("/* clang-format on */")


if __name__ == "__main__":
    main()
