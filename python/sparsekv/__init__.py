"""sparsekv: Python bindings of libsparsekv (ctypes), NumPy arrays in and out.

    import sparsekv
    model = sparsekv.Model()                     # the embedded stories260K
    ctx = model.new_context(n_ctx=512)
    logits = ctx.forward(model.tokenize("Once upon a time"), logits="last")
    info = ctx.compress("streaming", keep=0.5)   # per layer and kv head selection
"""

try:
    import numpy  # noqa: F401 (every array in and out is a NumPy array)
except ImportError as _e:
    import glob as _glob
    import os as _os
    import sys as _sys
    # Debian's python3-numpy serves /usr/bin/python3 only: say so when it is there and this is
    # another Python (a pyenv or venv one)
    _sys_has = bool(_glob.glob("/usr/lib/python3/dist-packages/numpy/__init__.py"))
    _is_sys = _os.path.realpath(_sys.executable).startswith("/usr/bin/")
    raise ImportError(
        "sparsekv needs NumPy, which this Python (%s) does not have: %s" %
        (_sys.executable,
         "the system's /usr/bin/python3 has it (python3-numpy): run with /usr/bin/python3, "
         "or make a venv with --system-site-packages from it" if _sys_has and not _is_sys else
         "apt-get install python3-numpy for the system Python, or pip install numpy")) from _e

from . import _lib
from ._core import (Context, Error, FormatError, Generation, InvalidArgumentError, Model,
                    OutOfMemoryError, StateError, UnsupportedError, default_model_path)
from ._core import _policy_rows, _text
from ._core import IOError_ as IOError  # noqa: A001 (sparsekv.IOError, also an OSError)
from ._eval import EvalResults, compare_logits, evaluate, evaluate_budget, log_softmax
from ._policy import PolicyHead, register_policy

__version__ = _lib.lib.skv_version().decode()
library_path = _lib.path


def version():
    """The loaded libsparsekv's version string."""
    return _lib.lib.skv_version().decode()


def simd_level():
    """The SIMD level libsparsekv's kernels run at ("scalar", "avx2", "avx512")."""
    if not _lib.have("skv_simd_level"):
        return None
    return _lib.lib.skv_simd_level().decode()


def policies():
    """The library's policy registry: one dict per policy (name, alias, paper, rule, cost,
    params, needs_window, needs_prefill_attention, decode, layer_budgets, builtin,
    needs_values), the ones register_policy added included."""
    return _policy_rows()


def policy_canonical(name):
    """The canonical name of a policy or alias ("snapkv" -> "attention"), or None."""
    s = _lib.lib.skv_policy_canonical(_text(name, "name"))
    return s.decode() if s else None


def policy_needs_window(name):
    """Whether a policy (or alias) scores with the window's queries: compress then needs
    window= (token ids in the seed protocol, W in the engine one)."""
    return bool(_lib.lib.skv_policy_needs_window(_text(name, "name")))


__all__ = ["Model", "Context", "Generation", "Error", "InvalidArgumentError", "IOError",
           "FormatError", "UnsupportedError", "OutOfMemoryError", "StateError", "evaluate",
           "evaluate_budget",
           "EvalResults", "compare_logits", "log_softmax", "default_model_path", "version",
           "policy_canonical", "policy_needs_window", "library_path", "simd_level", "policies",
           "register_policy", "PolicyHead"]
