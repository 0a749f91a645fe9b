#!/bin/sh
# symbols_check.sh LIB.a LIB.so — every global symbol the libraries define starts with skv_ (as
# sparsekv.h promises): an embedder linking the static library must not meet our helpers' names
# (vocab_lookup once clashed), and the shared library exports the API only.
set -u
a=${1:?usage: tests/symbols_check.sh LIB.a LIB.so}
so=${2:?usage: tests/symbols_check.sh LIB.a LIB.so}
command -v nm >/dev/null 2>&1 || { echo "symbols_check: nm not found (binutils)" >&2; exit 1; }
# (a sanitizer build adds its own markers, __odr_asan.NAME, for each of our globals)
bad_a=$(nm -g --defined-only "$a" 2>/dev/null | awk 'NF == 3 { print $3 }' |
        grep -v -E '^(__odr_asan[._])?skv_' | sort -u)
bad_so=$(nm -D --defined-only "$so" 2>/dev/null | awk 'NF == 3 && $2 != "A" { print $3 }' |
         grep -v -E '^((__odr_asan[._])?skv_|_init$|_fini$)' | sort -u)
if [ -n "$bad_a$bad_so" ]; then
    [ -n "$bad_a" ] && printf 'symbols_check: %s defines globals without the skv_ prefix:\n%s\n' "$a" "$bad_a"
    [ -n "$bad_so" ] && printf 'symbols_check: %s exports symbols without the skv_ prefix:\n%s\n' "$so" "$bad_so"
    exit 1
fi
echo "symbols_check: every global symbol of $(basename "$a") and $(basename "$so") starts with skv_"
