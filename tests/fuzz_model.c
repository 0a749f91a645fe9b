/* fuzz_model.c — libFuzzer target for model and vocabulary loading: the input is written to an
 * in-memory file and loaded with skv_model_load and skv_vocab_load, so that every architecture
 * rule (src/model/arch.c, src/model/model.c), RoPE metadata (src/rope.c) and both tokenizers'
 * loaders (src/tokenizer*) meet hostile metadata: a load either succeeds, and the model then runs
 * one token and the vocabulary encodes and decodes a text, or fails with a message. Seeds: the
 * embedded stories260K; tests/corpus/model/model.dict steers mutations towards architecture and
 * tokenizer keys. Build: make fuzz; run: tests/fuzz_run.sh build/fuzz_model. */
#include "sparsekv.h"

#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

static volatile uint64_t sink;

static void use_vocab(const skv_vocab *v) {
    static const char text[] = "Once upon a time, 42 cats\n\t<|im_start|> \xe2\x96\x81 \xff";
    int32_t toks[256];
    int n = skv_tokenize_ex(v, text, sizeof text - 1, true, true, toks, 256);
    if (n == INT_MIN) return;
    if (n < 0) abort(); /* 256 tokens always suffice for 40 bytes plus BOS/EOS */
    char buf[1024];
    int m = skv_detokenize(v, toks, n, false, buf, sizeof buf);
    sink += (uint64_t)n + (uint64_t)(m > 0 ? m : 0);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    int fd = memfd_create("skv_fuzz_model", 0);
    if (fd < 0) return 0;
    if (write(fd, data, size) != (ssize_t)size) {
        close(fd);
        return 0;
    }
    char path[64];
    snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
    skv_err err = {0};
    skv_vocab *v = skv_vocab_load(path, &err);
    if (v) {
        use_vocab(v);
        skv_vocab_free(v);
    } else if (!err.msg[0]) {
        abort(); /* every failure says why */
    }
    skv_model *m = skv_model_load(path, &err);
    if (m) {
        const skv_hparams *hp = skv_model_hparams(m);
        use_vocab(skv_model_vocab(m));
        /* one token through the forward pass, when the model is small enough to be quick */
        if ((uint64_t)hp->n_embd * (uint64_t)hp->n_layer * (uint64_t)hp->n_ff < (1u << 24) &&
            hp->n_vocab <= 65536) {
            skv_context_params cp = skv_context_default_params();
            cp.n_ctx = 8;
            cp.n_threads = 1;
            skv_context *ctx = skv_context_new(m, &cp, &err);
            float *logits = malloc((size_t)hp->n_vocab * sizeof(float));
            if (ctx && logits) {
                int32_t tok = 1 % hp->n_vocab;
                if (skv_forward(ctx, &tok, 1, SKV_LOGITS_LAST, logits, &err) == SKV_OK)
                    sink += (uint64_t)(logits[0] == logits[0]);
            }
            free(logits);
            skv_context_free(ctx);
        }
        skv_model_free(m);
    } else if (!err.msg[0]) {
        abort();
    }
    close(fd);
    return 0;
}
