"""The ctypes mirrors of include/sparsekv.h's structures (python/sparsekv/_lib.py) have the C
layout: a small C program compiled against the header prints sizeof and offsetof of every
field, which must equal ctypes' sizeof and offsets. A field added to, removed from or moved in
the header fails here (with its name) instead of corrupting memory at run time. Also: every
function the bindings declare is exported by the library."""

import ctypes
import os
import shutil
import subprocess

import pytest

from sparsekv import _lib

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
HEADER = os.path.join(REPO, "include", "sparsekv.h")


def _c_layout(tmp_path):
    cc = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
    assert cc, "a C compiler is needed to check the ctypes layouts"
    lines = ['#include <stddef.h>', '#include <stdio.h>', '#include "sparsekv.h"',
             'int main(void) {']
    for name, cls in _lib.STRUCTS.items():
        lines.append('printf("%s sizeof %%zu\\n", sizeof(%s));' % (name, name))
        for f in cls._fields_:
            lines.append('printf("%s %s %%zu %%zu\\n", offsetof(%s, %s), sizeof(((%s *)0)->%s));'
                         % (name, f[0], name, f[0], name, f[0]))
    lines += ["return 0;", "}"]
    src = tmp_path / "layout.c"
    src.write_text("\n".join(lines) + "\n")
    exe = tmp_path / "layout"
    p = subprocess.run([cc, "-std=c11", "-I", os.path.dirname(HEADER), str(src), "-o", str(exe)],
                       capture_output=True, text=True)
    assert p.returncode == 0, "a field of _lib.py is not in sparsekv.h:\n" + p.stderr
    return subprocess.run([str(exe)], capture_output=True, text=True, check=True).stdout


def test_struct_layouts_match_header(tmp_path):
    out = _c_layout(tmp_path)
    got = {}
    for line in out.splitlines():
        parts = line.split()
        if parts[1] == "sizeof":
            got[(parts[0], None)] = int(parts[2])
        else:
            got[(parts[0], parts[1])] = (int(parts[2]), int(parts[3]))
    for name, cls in _lib.STRUCTS.items():
        assert ctypes.sizeof(cls) == got[(name, None)], (
            "%s: C has %d bytes, _lib.py %d: the header changed (add the new fields to _lib.py)"
            % (name, got[(name, None)], ctypes.sizeof(cls)))
        for f in cls._fields_:
            desc = getattr(cls, f[0])
            assert (desc.offset, desc.size) == got[(name, f[0])], (name, f[0])


def test_declared_functions_are_exported():
    missing = [n for n in _lib._PROTOTYPES if not _lib.have(n)]
    assert not missing, "not exported by %s: %s" % (_lib.path, missing)


def test_header_declares_what_we_bind():
    text = open(HEADER).read()
    for n in _lib._PROTOTYPES:
        assert n + "(" in text, n
