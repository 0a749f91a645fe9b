#!/bin/sh
# tsan_run.sh BINARY... — runs test binaries built with -fsanitize=thread; any race report fails
# the run (halt_on_error, exit code 66). Kernels with more ASLR entropy than the TSan runtime
# knows (vm.mmap_rnd_bits above 28 with GCC 12's) make it abort at start with "unexpected memory
# mapping": then each binary is rerun with address randomization off (setarch -R), which
# changes nothing else about the run.
set -u
export TSAN_OPTIONS="${TSAN_OPTIONS:-halt_on_error=1 second_deadlock_stack=1}"
rc=0
for bin in "$@"; do
    out=$("$bin" 2>&1)
    st=$?
    if [ $st -ne 0 ] && printf '%s' "$out" | grep -q 'unexpected memory mapping'; then
        echo "tsan_run: $bin: the TSan runtime cannot map its shadow with ASLR on; rerunning under setarch -R"
        out=$(setarch "$(uname -m)" -R "$bin" 2>&1)
        st=$?
    fi
    printf '%s\n' "$out"
    if [ $st -ne 0 ]; then
        echo "tsan_run: FAIL $bin (exit $st)"
        rc=1
    else
        echo "tsan_run: ok $bin"
    fi
done
exit $rc
