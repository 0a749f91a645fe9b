"""ctypes declarations of libsparsekv's public API (include/sparsekv.h).

Every structure mirrored here is checked against the C header by tests/python/test_bindings_abi.py
(a small C program prints sizeof/offsetof of each field), so a field added to the header shows
up as a failing test rather than as memory corruption. To extend the bindings: add the field to
the structure below (same order as the header) or the function to _PROTOTYPES.
"""

import ctypes
import os
import sys
from ctypes import (POINTER, Structure, c_bool, c_char, c_char_p, c_double, c_float, c_int,
                    c_int32, c_size_t, c_uint64, c_void_p)

SONAME = "libsparsekv.so.0"

# enum values (include/sparsekv.h)
OK = 0
LOGITS_NONE, LOGITS_LAST, LOGITS_ALL = 0, 1, 2
PROTOCOL_SEED, PROTOCOL_ENGINE = 0, 1
POOL_MAX, POOL_AVG = 0, 1
POSITIONS_ORIGINAL, POSITIONS_REROTATE = 0, 1
ROPE_MODES = {0: "adjacent", 1: "neox"}
ROPE_SCALINGS = {0: "none", 1: "linear", 2: "yarn", 3: "longrope"}
INT_MIN, INT_MAX = -(2**31), 2**31 - 1
UINT64_MAX = 2**64 - 1


class skv_err(Structure):
    _fields_ = [("status", c_int), ("msg", c_char * 512)]


class skv_hparams(Structure):
    _fields_ = [
        ("n_vocab", c_int),
        ("n_ctx_train", c_int),
        ("n_embd", c_int),
        ("n_layer", c_int),
        ("n_head", c_int),
        ("n_head_kv", c_int),
        ("head_dim", c_int),
        ("n_ff", c_int),
        ("n_rot", c_int),
        ("rope_theta", c_float),
        ("norm_eps", c_float),
        ("tied_output", c_bool),
        ("arch", c_char * 16),
        ("rope_mode", c_int),
        ("rope_freq_scale", c_float),
        ("rope_freq_factors", c_bool),
        ("qkv_bias", c_bool),
        ("qk_norm", c_bool),
        ("rope_scaling", c_int),
        ("n_ctx_orig", c_int),
        ("rope_attn_factor", c_float),
        ("attn_temp_scale", c_float),
    ]


class skv_context_params(Structure):
    _fields_ = [
        ("n_ctx", c_int),
        ("n_threads", c_int),
        ("kv_type", c_int),
        ("capture_window", c_int),
    ]


class skv_compress_params(Structure):
    _fields_ = [
        ("policy", c_char_p),
        ("keep_frac", c_double),
        ("protocol", c_int),
        ("window_tokens", POINTER(c_int32)),
        ("n_window", c_int),
        ("seed", c_uint64),
        ("sinks", c_int),
        ("pooling", c_int),
        ("kernel", c_int),
        ("window_keep", c_int),
        ("positions", c_int),
    ]


class skv_compress_info(Structure):
    _fields_ = [
        ("policy", c_char * 32),
        ("keep_frac", c_double),
        ("T", c_int),
        ("keep", c_int),
        ("compress_ms", c_double),
        ("window_ms", c_double),
        ("window_tokens", c_int),
        ("n_layer", c_int),
        ("n_head_kv", c_int),
        ("layer_budgets", POINTER(c_int)),
        ("kept", POINTER(c_int)),
        ("bytes_before", c_uint64),
        ("bytes_after", c_uint64),
        ("forced", POINTER(c_int)),
        ("by_score", POINTER(c_int)),
        ("selection_hash", c_uint64),
        ("cache_ms", c_double),
    ]


class skv_policy_about(Structure):
    _fields_ = [
        ("name", c_char_p),
        ("alias", c_char_p),
        ("paper", c_char_p),
        ("rule", c_char_p),
        ("cost", c_char_p),
        ("params", c_char_p),
        ("needs_window", c_bool),
        ("needs_prefill_attention", c_bool),
        ("decode", c_bool),
        ("layer_budgets", c_bool),
        ("builtin", c_bool),
        ("needs_values", c_bool),
    ]


class skv_policy_head(Structure):
    _fields_ = [
        ("layer", c_int),
        ("kv_head", c_int),
        ("head_dim", c_int),
        ("n", c_int),
        ("keys", POINTER(c_float)),
        ("queries", POINTER(c_float)),
        ("group", c_int),
        ("n_window", c_int),
        ("query_head_stride", c_size_t),
        ("values", POINTER(c_float)),
        ("positions", POINTER(c_int32)),
    ]


# skv_policy_score_fn
POLICY_SCORE_FN = ctypes.CFUNCTYPE(c_int, c_void_p, POINTER(skv_policy_head), POINTER(c_double),
                                   POINTER(skv_err))


class skv_policy_def(Structure):
    _fields_ = [
        ("name", c_char_p),
        ("paper", c_char_p),
        ("needs_window", c_bool),
        ("needs_values", c_bool),
        ("score", POLICY_SCORE_FN),
        ("user", c_void_p),
    ]


class skv_sampler_params(Structure):
    _fields_ = [
        ("temperature", c_float),
        ("top_k", c_int),
        ("top_p", c_float),
        ("seed", c_uint64),
    ]


# Structures the ABI test checks (name in the header -> ctypes class).
STRUCTS = {
    "skv_err": skv_err,
    "skv_hparams": skv_hparams,
    "skv_context_params": skv_context_params,
    "skv_compress_params": skv_compress_params,
    "skv_compress_info": skv_compress_info,
    "skv_sampler_params": skv_sampler_params,
    "skv_policy_about": skv_policy_about,
    "skv_policy_head": skv_policy_head,
    "skv_policy_def": skv_policy_def,
}

P_err = POINTER(skv_err)
P_i32 = POINTER(c_int32)
P_f32 = POINTER(c_float)

# name: (restype, argtypes)
_PROTOTYPES = {
    "skv_status_str": (c_char_p, [c_int]),
    "skv_type_name": (c_char_p, [c_int]),
    "skv_type_from_name": (c_bool, [c_char_p, POINTER(c_int)]),
    "skv_version": (c_char_p, []),
    "skv_simd_level": (c_char_p, []),
    "skv_version_number": (c_int, []),
    "skv_model_load": (c_void_p, [c_char_p, P_err]),
    "skv_model_free": (None, [c_void_p]),
    "skv_model_hparams": (POINTER(skv_hparams), [c_void_p]),
    "skv_model_vocab": (c_void_p, [c_void_p]),
    "skv_model_weight_bytes": (c_uint64, [c_void_p]),
    "skv_model_weight_type": (c_int, [c_void_p]),
    "skv_vocab_n_tokens": (c_int, [c_void_p]),
    "skv_vocab_bos": (c_int32, [c_void_p]),
    "skv_vocab_eos": (c_int32, [c_void_p]),
    "skv_vocab_piece": (c_char_p, [c_void_p, c_int32]),
    "skv_tokenize": (c_int, [c_void_p, c_char_p, c_size_t, c_bool, P_i32, c_int]),
    "skv_tokenize_ex": (c_int, [c_void_p, c_char_p, c_size_t, c_bool, c_bool, P_i32, c_int]),
    "skv_vocab_add_bos": (c_bool, [c_void_p]),
    "skv_vocab_is_eog": (c_bool, [c_void_p, c_int32]),
    "skv_detokenize": (c_int, [c_void_p, P_i32, c_int, c_bool, c_char_p, c_int]),
    "skv_token_to_piece": (c_int, [c_void_p, c_int32, c_int32, c_char_p, c_int]),
    "skv_context_default_params": (skv_context_params, []),
    "skv_context_new": (c_void_p, [c_void_p, POINTER(skv_context_params), P_err]),
    "skv_context_free": (None, [c_void_p]),
    "skv_context_clone": (c_void_p, [c_void_p, P_err]),
    "skv_context_n_past": (c_int, [c_void_p]),
    "skv_context_n_ctx": (c_int, [c_void_p]),
    "skv_context_n_threads": (c_int, [c_void_p]),
    "skv_context_reset": (None, [c_void_p]),
    "skv_context_reserve": (c_int, [c_void_p, c_int, P_err]),
    "skv_forward": (c_int, [c_void_p, P_i32, c_int, c_int, P_f32, P_err]),
    "skv_context_captured_queries": (P_f32, [c_void_p, c_int, POINTER(c_int), POINTER(c_int)]),
    "skv_context_cache": (c_void_p, [c_void_p]),
    "skv_cache_n_layer": (c_int, [c_void_p]),
    "skv_cache_n_head_kv": (c_int, [c_void_p]),
    "skv_cache_head_dim": (c_int, [c_void_p]),
    "skv_cache_type": (c_int, [c_void_p]),
    "skv_cache_n_past": (c_int, [c_void_p]),
    "skv_cache_position_mode": (c_int, [c_void_p]),
    "skv_cache_head_len": (c_int, [c_void_p, c_int, c_int]),
    "skv_cache_head_positions": (P_i32, [c_void_p, c_int, c_int]),
    "skv_cache_head_read": (c_int, [c_void_p, c_int, c_int, P_f32, P_f32, P_i32, P_err]),
    "skv_cache_select_layer": (c_int, [c_void_p, c_int, P_i32, c_int, P_err]),
    "skv_cache_select_head": (c_int, [c_void_p, c_int, c_int, P_i32, c_int, P_err]),
    "skv_cache_rerotate": (c_int, [c_void_p, P_err]),
    "skv_cache_bytes": (c_uint64, [c_void_p, c_int]),
    "skv_cache_bytes_allocated": (c_uint64, [c_void_p]),
    "skv_compress_default_params": (skv_compress_params, []),
    "skv_compress_info_free": (None, [POINTER(skv_compress_info)]),
    "skv_compress": (c_int, [c_void_p, POINTER(skv_compress_params),
                             POINTER(skv_compress_info), P_err]),
    "skv_policy_canonical": (c_char_p, [c_char_p]),
    "skv_policy_needs_window": (c_bool, [c_char_p]),
    "skv_policy_count": (c_int, []),
    "skv_policy_describe": (c_int, [c_int, POINTER(skv_policy_about), P_err]),
    "skv_policy_register": (c_int, [POINTER(skv_policy_def), P_err]),
    "skv_context_accumulate_attention": (c_int, [c_void_p, c_bool, P_err]),
    "skv_context_set_budget": (c_int, [c_void_p, POINTER(skv_compress_params), c_int, c_int,
                                       P_err]),
    "skv_context_budget_cuts": (c_int, [c_void_p]),
    "skv_context_budget_piece": (c_int, [c_void_p]),
    "skv_sampler_default_params": (skv_sampler_params, []),
    "skv_sampler_new": (c_void_p, [POINTER(skv_sampler_params), P_err]),
    "skv_sampler_free": (None, [c_void_p]),
    "skv_sampler_sample": (c_int32, [c_void_p, P_f32, c_int]),
}


def _candidates():
    """Where the shared library is looked for, in order."""
    env = os.environ.get("SKV_LIB")
    if env:
        if os.path.isdir(env):
            yield os.path.join(env, SONAME)
            yield os.path.join(env, "libsparsekv.so")
        else:
            yield env
        return  # an explicit choice is not second-guessed
    here = os.path.dirname(os.path.abspath(__file__))
    yield os.path.join(here, SONAME)  # pip install: copied into the package
    repo = os.path.dirname(os.path.dirname(here))  # python/sparsekv -> repo root
    yield os.path.join(repo, "build", SONAME)
    yield SONAME  # the system's loader path (make install + ldconfig)


def _load():
    tried = []
    for path in _candidates():
        if os.path.sep in path and not os.path.exists(path):
            tried.append(path + " (missing)")
            continue
        try:
            lib = ctypes.CDLL(path)
        except OSError as e:
            tried.append("%s (%s)" % (path, e))
            continue
        lib._skv_path = path
        return lib
    raise ImportError(
        "sparsekv: cannot load libsparsekv (run `make` at the repository root, or set SKV_LIB "
        "to the library file or its directory); tried: " + "; ".join(tried))


def _declare(lib):
    for name, (res, args) in _PROTOTYPES.items():
        fn = getattr(lib, name, None)
        if fn is None:
            continue  # an older library: the wrapper that needs it raises when called
        fn.restype = res
        fn.argtypes = args
    return lib


lib = _declare(_load())
path = lib._skv_path


def have(name):
    return hasattr(lib, name)
