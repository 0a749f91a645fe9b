# sparsekv — plain GNU make. `make` builds the library and CLI, `make test` runs the suite,
# `make asan` runs it again under AddressSanitizer + UndefinedBehaviorSanitizer, `make clang`
# builds everything with clang, `make fuzz` builds the libFuzzer targets, `make bench` writes
# bench/results.md, `make install PREFIX=...`.

CC       ?= cc
BUILD    ?= build
PREFIX   ?= /usr/local
OPT      ?= -O2
SAN      ?=
CSTD     := -std=c11 -D_GNU_SOURCE
WARN     := -Wall -Wextra -Werror -Wshadow -Wno-unused-parameter
# Only the SKV_API declarations of include/sparsekv.h are exported from the shared library.
CFLAGS   += $(CSTD) $(OPT) -g $(WARN) -fPIC -fvisibility=hidden -Iinclude -Isrc -I. $(SAN) -pthread
# Each object's header dependencies, written by the compiler beside it (X.d) and read below; an
# object also depends on this Makefile, whose flags it was built with.
DEPFLAGS := -MMD -MP
LDFLAGS  += $(SAN) -pthread
LDLIBS   += -lpcre2-8 -lm
# The *_avx2.c files alone are built for AVX2/FMA/F16C; the dispatcher picks it only when the CPU has
# them, so the library still runs on any x86-64 (and builds elsewhere without that file's SIMD).
SIMD_FLAGS := -mavx2 -mfma -mf16c
# The *_avx512.c files: AVX-512 F/BW/VL/DQ on top; *_avx512vnni.c: and VNNI; *_avx512bf16.c: and
# AVX512_BF16; *_amx.c: and AMX-TILE/AMX-BF16 (each picked only when the CPU has them).
AVX512_FLAGS := $(SIMD_FLAGS) -mavx512f -mavx512bw -mavx512vl -mavx512dq
VNNI_FLAGS   := $(AVX512_FLAGS) -mavx512vnni
BF16_FLAGS   := $(AVX512_FLAGS) -mavx512bf16
AMX_FLAGS    := $(BF16_FLAGS) -mamx-tile -mamx-bf16

LIB_SRC  := $(sort $(wildcard src/*.c src/*/*.c))
LIB_OBJ  := $(patsubst %.c,$(BUILD)/%.o,$(LIB_SRC))
# The evaluation harness (protocols, metrics, reports, plots) is not part of libsparsekv: it is
# its own static library on top of the engine, linked into the CLI and the tests.
EVAL_SRC := $(sort $(wildcard eval/*.c))
EVAL_OBJ := $(patsubst %.c,$(BUILD)/%.o,$(EVAL_SRC))
TOOL_SRC := $(sort $(wildcard tools/*.c))
TOOL_OBJ := $(patsubst %.c,$(BUILD)/%.o,$(TOOL_SRC))
TEST_SRC := $(sort $(wildcard tests/test_*.c))
TEST_BIN := $(patsubst tests/%.c,$(BUILD)/tests/%,$(TEST_SRC))
TEST_SUPPORT_SRC := $(filter-out $(TEST_SRC) tests/fuzz_%.c,$(wildcard tests/*.c))
TEST_SUPPORT_OBJ := $(patsubst %.c,$(BUILD)/%.o,$(TEST_SUPPORT_SRC))

ver_part  = $(shell sed -n 's/^\#define SKV_VERSION_$(1) *\([0-9][0-9]*\).*/\1/p' include/sparsekv.h)
MAJOR    := $(call ver_part,MAJOR)
VERSION  := $(MAJOR).$(call ver_part,MINOR).$(call ver_part,PATCH)
ifeq ($(filter-out .,$(subst ., ,$(VERSION))),)
$(error cannot read SKV_VERSION_MAJOR/MINOR/PATCH from include/sparsekv.h)
endif
SONAME   := libsparsekv.so.$(MAJOR)
STATIC   := $(BUILD)/libsparsekv.a
EVALLIB  := $(BUILD)/libsparsekv_eval.a
SHARED   := $(BUILD)/libsparsekv.so
CLI      := $(BUILD)/sparsekv

.SECONDARY:
.PHONY: all lib test asan tsan clang fuzz check bench install uninstall clean format pytest
EXAMPLES := $(patsubst examples/%.c,$(BUILD)/examples/%,$(wildcard examples/*.c))
all: $(STATIC) $(SHARED) $(CLI) $(EXAMPLES) $(BUILD)/bench_decode_ab $(BUILD)/bench_lib_ab
lib: $(STATIC) $(SHARED)

$(BUILD)/%.o: %.c Makefile
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(DEPFLAGS) -c $< -o $@

# The tests' float64 reference forward is test arithmetic, not the product: built at -O2 without
# the sanitizers in the sanitizer builds too (in make asan it was a tenth of the suite's time);
# the plain build and its -Werror still check it, and the library it calls stays instrumented.
$(BUILD)/tests/ref_forward.o: tests/ref_forward.c Makefile
	@mkdir -p $(dir $@)
	$(CC) $(filter-out $(SAN) $(OPT),$(CFLAGS)) -O2 $(DEPFLAGS) -c $< -o $@

$(BUILD)/src/%_avx2.o: src/%_avx2.c Makefile
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(SIMD_FLAGS) $(DEPFLAGS) -c $< -o $@

$(BUILD)/src/%_avx512.o: src/%_avx512.c Makefile
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(AVX512_FLAGS) $(DEPFLAGS) -c $< -o $@

$(BUILD)/src/%_avx512vnni.o: src/%_avx512vnni.c Makefile
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(VNNI_FLAGS) $(DEPFLAGS) -c $< -o $@

$(BUILD)/src/%_avx512bf16.o: src/%_avx512bf16.c Makefile
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(BF16_FLAGS) $(DEPFLAGS) -c $< -o $@

$(BUILD)/src/%_amx.o: src/%_amx.c Makefile
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(AMX_FLAGS) $(DEPFLAGS) -c $< -o $@

$(STATIC): $(LIB_OBJ)
	@rm -f $@
	ar rcs $@ $^

# build/libsparsekv.so.X.Y.Z with SONAME libsparsekv.so.X, and the two usual links to it.
$(SHARED): $(LIB_OBJ)
	$(CC) -shared -Wl,-soname,$(SONAME) -o $@.$(VERSION) $^ $(LDFLAGS) $(LDLIBS)
	ln -sf libsparsekv.so.$(VERSION) $(BUILD)/$(SONAME)
	ln -sf libsparsekv.so.$(VERSION) $@

$(EVALLIB): $(EVAL_OBJ)
	@rm -f $@
	ar rcs $@ $^

$(CLI): $(TOOL_OBJ) $(EVALLIB) $(STATIC)
	$(CC) -o $@ $(TOOL_OBJ) $(EVALLIB) $(STATIC) $(LDFLAGS) $(LDLIBS)

$(BUILD)/tests/%: $(BUILD)/tests/%.o $(TEST_SUPPORT_OBJ) $(EVALLIB) $(STATIC)
	$(CC) -o $@ $< $(TEST_SUPPORT_OBJ) $(EVALLIB) $(STATIC) $(LDFLAGS) -lcmocka $(LDLIBS)

# Tests find the CLI through SKV_CLI and the shared models through SKV_MODELS.
# The kernel tests (and the loaded layouts: fusion, k16 records) once more at the AVX2 level: on
# an AVX-512 machine the first run tests the AVX-512 code, this one the AVX2 code (elsewhere it
# repeats the first).
# tests/run.sh runs them on every core, the slowest (under ASan) first so that none is left
# alone at the end.
SIMD_TESTS := $(patsubst %,$(BUILD)/tests/%,test_matmul test_kernels test_attn_prefill test_quant test_quantize_model)
SLOW_TESTS := $(patsubst %,$(BUILD)/tests/%,test_matmul test_hostile_metadata test_eval_resume \
                test_quantize_model test_cli_args test_decode_paths test_policies_new)
TEST_RUN := $(foreach t,$(SLOW_TESTS),$(filter $(t),$(TEST_BIN))) SKV_SIMD=avx2 $(firstword $(SIMD_TESTS)) \
            $(filter-out $(SLOW_TESTS),$(TEST_BIN)) $(addprefix SKV_SIMD=avx2 ,$(wordlist 2,9,$(SIMD_TESTS)))
test: $(TEST_BIN) $(CLI) $(SHARED) $(BUILD)/bench_lib_ab
	@tests/symbols_check.sh $(STATIC) $(SHARED)
	@SKV_CLI=$(abspath $(CLI)) SKV_BUILD=$(abspath $(BUILD)) tests/run.sh $(TEST_RUN)

# The Python bindings (python/sparsekv, ctypes over $(SHARED)) under pytest, checked against
# the CLI of the same build. PYTHON3: the first of python3, /usr/bin/python3 with numpy + pytest.
PYTHON3 ?= $(shell for p in python3 /usr/bin/python3; do $$p -c 'import numpy, pytest' \
              >/dev/null 2>&1 && { command -v $$p; break; }; done)
pytest: all
	@test -n "$(PYTHON3)" || { echo "make pytest: no python3 with numpy and pytest" \
	    "(apt-get install python3-numpy python3-pytest)" >&2; exit 1; }
	@test -n "$$(ls tests/python/test_*.py 2>/dev/null)" || { echo "make pytest: no tests" >&2; exit 1; }
	PYTHONPATH=$(abspath python) SKV_CLI=$(abspath $(CLI)) SKV_LIB=$(abspath $(SHARED)) \
	    PYTHONDONTWRITEBYTECODE=1 $(PYTHON3) -m pytest -p no:cacheprovider tests/python -q

asan:
	$(MAKE) BUILD=build-asan OPT=-O1 SAN="-fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=all" test

# Several contexts on one model from several threads, under ThreadSanitizer (own build dir).
TSAN_TESTS := test_contexts_threads
tsan:
	$(MAKE) BUILD=build-tsan OPT=-O1 SAN="-fsanitize=thread -fno-omit-frame-pointer" \
	    $(patsubst %,build-tsan/tests/%,$(TSAN_TESTS))
	tests/tsan_run.sh $(patsubst %,build-tsan/tests/%,$(TSAN_TESTS))

# Everything built with clang too (library, CLI, examples, benchmarks, the tests' programs; own
# build dir, -Werror as always): clang warns where gcc does not, and its target macros differ
# (the AMX files once compiled empty under it). Built, not run: the gcc builds run the suite.
clang:
	$(MAKE) BUILD=build-clang CC=clang all $(patsubst $(BUILD)/%,build-clang/%,$(TEST_BIN))

FUZZ_CC ?= clang
fuzz: $(BUILD)/fuzz_gguf $(BUILD)/fuzz_results $(BUILD)/fuzz_model
# model and vocabulary loading: the loader's files instrumented, the rest of the engine from the
# static library
FUZZ_MODEL_SRC := src/model/model.c src/model/arch.c src/rope.c src/gguf.c src/tokenizer.c \
                  $(wildcard src/tokenizer/*.c)
$(BUILD)/fuzz_model: tests/fuzz_model.c $(FUZZ_MODEL_SRC) $(STATIC)
	$(FUZZ_CC) $(CSTD) -O1 -g -Iinclude -Isrc -fsanitize=fuzzer,address,undefined \
	    -o $@ tests/fuzz_model.c $(FUZZ_MODEL_SRC) $(STATIC) $(LDLIBS) -pthread
$(BUILD)/fuzz_gguf: tests/fuzz_gguf.c $(LIB_SRC)
	@mkdir -p $(BUILD)
	$(FUZZ_CC) $(CSTD) -O1 -g -Iinclude -Isrc -fsanitize=fuzzer,address,undefined \
	    -o $@ tests/fuzz_gguf.c src/gguf.c src/common.c src/types.c -lm
# eval-merge's results.jsonl reader (and the reports written from what it accepts)
$(BUILD)/fuzz_results: tests/fuzz_results.c eval/report.c eval/json.c eval/metrics.c eval/eval.h $(STATIC)
	$(FUZZ_CC) $(CSTD) -O1 -g -Iinclude -Isrc -I. -fsanitize=fuzzer,address,undefined \
	    -o $@ tests/fuzz_results.c eval/report.c eval/json.c eval/metrics.c $(STATIC) $(LDLIBS) -pthread

# The bounded fuzz runs, each its fixed seconds on one core: side by side with -j.
FUZZ_RUNS := fuzz-run-gguf fuzz-run-results fuzz-run-model
.PHONY: fuzz-run $(FUZZ_RUNS)
fuzz-run: $(FUZZ_RUNS)
fuzz-run-gguf: $(BUILD)/fuzz_gguf
	tests/fuzz_run.sh $<
fuzz-run-results: $(BUILD)/fuzz_results
	tests/fuzz_results_run.sh $<
fuzz-run-model: $(BUILD)/fuzz_model
	tests/fuzz_model_run.sh $<

# Everything CI runs: the suite, the suite again under ASan+UBSan, bounded fuzz runs of the
# readers, and valgrind on generate. Builds, test binaries and fuzzers all use every core: on 2
# cores the whole took 11-14 minutes one test at a time (limit 15), 9 now (Zen 5).
NPROC := $(shell nproc 2>/dev/null || echo 1)
check:
	$(MAKE) -j$(NPROC) all
	$(MAKE) -j$(NPROC) test
	$(MAKE) pytest
	$(MAKE) -j$(NPROC) asan
	$(MAKE) -j$(NPROC) tsan
	$(MAKE) -j$(NPROC) clang
	$(MAKE) -j$(NPROC) fuzz
	$(MAKE) -j$(NPROC) --output-sync=target fuzz-run
	tests/valgrind_generate.sh $(CLI)

# Examples use the public header only, as an installed user would.
$(BUILD)/examples/%: examples/%.c include/sparsekv.h $(STATIC)
	@mkdir -p $(dir $@)
	$(CC) $(CSTD) $(OPT) $(WARN) $(SAN) -Iinclude -o $@ $< $(STATIC) $(LDFLAGS) $(LDLIBS)

BENCH_BIN := $(BUILD)/bench_mem_compress
$(BUILD)/bench_%: bench/%.c bench/bench_args.h $(STATIC)
	$(CC) $(CFLAGS) -o $@ $< $(STATIC) $(LDFLAGS) $(LDLIBS)

# Two builds of the shared library against each other in one process (bench/lib_ab.c): it
# dlopens them, so it links neither.
$(BUILD)/bench_lib_ab: bench/lib_ab.c bench/bench_args.h include/sparsekv.h
	$(CC) $(CFLAGS) -o $@ $< $(LDFLAGS) -ldl -lm

# make bench LLAMA_BENCH=/path/to/llama-bench adds llama.cpp side by side (bench/vs_llama.sh);
# LLAMA_BENCH_AVX2=/path/to/a/llama-bench built without AVX-512 compares the AVX2 levels too.
bench: $(CLI) $(BENCH_BIN)
	LLAMA_BENCH="$(LLAMA_BENCH)" LLAMA_BENCH_AVX2="$(LLAMA_BENCH_AVX2)" bench/run.sh $(abspath $(CLI))

# LIBDIR: where the libraries and sparsekv.pc go (lib64 or a multiarch directory: set it). The
# .pc file puts an rpath to it into Libs, so programs built with pkg-config find the shared
# library without LD_LIBRARY_PATH or ldconfig, except for the system's own library directories
# (there run ldconfig; an rpath would only be noise to packagers).
LIBDIR ?= $(PREFIX)/lib
SYSTEM_LIBDIRS := /lib /lib64 /usr/lib /usr/lib64 \
    $(addprefix /usr/lib/,$(shell $(CC) -print-multiarch 2>/dev/null))
PC_RPATH = $(if $(filter $(SYSTEM_LIBDIRS),$(patsubst %/,%,$(LIBDIR))),,-Wl,-rpath,$${libdir})
install: $(STATIC) $(SHARED) $(CLI)
	install -d $(DESTDIR)$(LIBDIR) $(DESTDIR)$(PREFIX)/include $(DESTDIR)$(PREFIX)/bin \
	    $(DESTDIR)$(LIBDIR)/pkgconfig
	install -m 644 $(STATIC) $(DESTDIR)$(LIBDIR)/
	install -m 755 $(SHARED).$(VERSION) $(DESTDIR)$(LIBDIR)/
	ln -sf libsparsekv.so.$(VERSION) $(DESTDIR)$(LIBDIR)/$(SONAME)
	ln -sf libsparsekv.so.$(VERSION) $(DESTDIR)$(LIBDIR)/libsparsekv.so
	install -m 644 include/sparsekv.h $(DESTDIR)$(PREFIX)/include/
	install -m 755 $(CLI) $(DESTDIR)$(PREFIX)/bin/
	install -d $(DESTDIR)$(PREFIX)/share/sparsekv
	install -m 644 models/stories260K.gguf $(DESTDIR)$(PREFIX)/share/sparsekv/
	sed -e 's|@PREFIX@|$(PREFIX)|g' -e 's|@LIBDIR@|$(LIBDIR)|g' -e 's| @RPATH@|$(if $(PC_RPATH), $(PC_RPATH))|' \
	    -e 's|@VERSION@|$(VERSION)|g' sparsekv.pc.in > $(DESTDIR)$(LIBDIR)/pkgconfig/sparsekv.pc

uninstall:
	rm -f $(DESTDIR)$(LIBDIR)/libsparsekv.a $(DESTDIR)$(LIBDIR)/libsparsekv.so \
	    $(DESTDIR)$(LIBDIR)/$(SONAME) $(DESTDIR)$(LIBDIR)/libsparsekv.so.$(VERSION) \
	    $(DESTDIR)$(PREFIX)/include/sparsekv.h $(DESTDIR)$(PREFIX)/bin/sparsekv \
	    $(DESTDIR)$(LIBDIR)/pkgconfig/sparsekv.pc \
	    $(DESTDIR)$(PREFIX)/share/sparsekv/stories260K.gguf
	-rmdir $(DESTDIR)$(PREFIX)/share/sparsekv 2>/dev/null

format:
	clang-format -i $(wildcard include/*.h src/*.[ch] src/*/*.[ch] eval/*.[ch] tools/*.[ch] tests/*.[ch] bench/*.[ch])

clean:
	rm -rf build build-asan build-tsan build-clang

# the header dependencies the compiler wrote (none before the first build)
-include $(shell find $(BUILD) -name '*.d' 2>/dev/null)
