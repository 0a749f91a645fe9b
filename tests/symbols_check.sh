#!/bin/sh
# symbols_check.sh LIB.a LIB.so — every global symbol the libraries define starts with skv_ (as
# sparsekv.h promises): an embedder linking the static library must not meet our helpers' names
# (vocab_lookup once clashed), and the shared library exports the API only. NM may name another
# nm (a cross build's).
set -u
a=${1:?usage: tests/symbols_check.sh LIB.a LIB.so}
so=${2:?usage: tests/symbols_check.sh LIB.a LIB.so}
nm=${NM:-nm}
command -v "$nm" >/dev/null 2>&1 || { echo "symbols_check: $nm not found (binutils)" >&2; exit 1; }
for f in "$a" "$so"; do
    [ -f "$f" ] || { echo "symbols_check: $f: no such file" >&2; exit 1; }
done
# a failing nm must not read as "nothing to complain about"
syms_a=$("$nm" -g --defined-only "$a") || { echo "symbols_check: $nm cannot read $a" >&2; exit 1; }
syms_so=$("$nm" -D --defined-only "$so") || { echo "symbols_check: $nm cannot read $so" >&2; exit 1; }
# allowed besides skv_*: a sanitizer build's markers (__odr_asan.NAME), and what linkers put
# into every shared object (_init, _fini; gold also exports __bss_start, _edata, _end as data)
ok='^((__odr_asan[._])?skv_|_init$|_fini$|__bss_start$|_edata$|_end$)'
bad_a=$(printf '%s\n' "$syms_a" | awk 'NF == 3 { print $3 }' | grep -v -E "$ok" | sort -u)
bad_so=$(printf '%s\n' "$syms_so" | awk 'NF == 3 && $2 != "A" { print $3 }' | grep -v -E "$ok" |
         sort -u)
n_api=$(printf '%s\n' "$syms_so" | awk 'NF == 3 && $3 ~ /^skv_/' | wc -l)
if [ "$n_api" -eq 0 ]; then
    echo "symbols_check: $so exports no skv_ function: not the library?" >&2
    exit 1
fi
if [ -n "$bad_a$bad_so" ]; then
    [ -n "$bad_a" ] && printf 'symbols_check: %s defines globals without the skv_ prefix:\n%s\n' "$a" "$bad_a"
    [ -n "$bad_so" ] && printf 'symbols_check: %s exports symbols without the skv_ prefix:\n%s\n' "$so" "$bad_so"
    exit 1
fi
echo "symbols_check: every global symbol of $(basename "$a") and $(basename "$so") starts with skv_ ($n_api exported)"
