/* compress_and_decode.c — the C API end to end: load, prefill a prompt, compress the cache to
 * half with StreamingLLM's pattern, and decode greedily on the compressed cache.
 *
 *   cc compress_and_decode.c $(pkg-config --cflags --libs sparsekv)
 *   ./a.out [MODEL.gguf] [PROMPT]
 *
 * (that links libsparsekv.so; a program without it: cc -static ... $(pkg-config --cflags --libs
 * --static sparsekv), where pkg-config's --static only adds the private dependencies.)
 *
 * MODEL defaults to $SKV_DEFAULT_MODEL, else models/stories260K.gguf (the source tree's root).
 */
#include <sparsekv.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char **argv) {
    const char *env = getenv("SKV_DEFAULT_MODEL");
    const char *path = argc > 1 ? argv[1] : env && *env ? env : "models/stories260K.gguf";
    const char *text = argc > 2 ? argv[2] : "Once upon a time, there was a little girl named";
    skv_err err = {0}; /* written on failure only */
    skv_model *m = skv_model_load(path, &err);
    if (!m) {
        fprintf(stderr, "%s\n", err.msg);
        return 1;
    }
    const skv_vocab *vocab = skv_model_vocab(m);
    const int n_vocab = skv_model_hparams(m)->n_vocab;
    skv_context *ctx = skv_context_new(m, NULL, &err); /* NULL: the default parameters */
    if (!ctx) {
        fprintf(stderr, "%s\n", err.msg);
        return 1;
    }
    int32_t toks[256];
    /* the token count, or minus the room it needs (skv_tokenize has no skv_err) */
    int n = skv_tokenize(vocab, text, strlen(text), true, toks, 256);
    if (n <= 0) {
        fprintf(stderr, "the prompt is %d tokens: at most 256 here\n", -n);
        return 1;
    }
    float *logits = malloc((size_t)n_vocab * sizeof *logits);
    if (!logits || skv_forward(ctx, toks, n, SKV_LOGITS_LAST, logits, &err)) {
        fprintf(stderr, "prefill failed: %s\n", logits ? err.msg : "out of memory");
        return 1;
    }
    skv_compress_params p = skv_compress_default_params();
    p.policy = "streaming";
    p.keep_frac = 0.5;
    skv_compress_info info;
    if (skv_compress(ctx, &p, &info, &err)) {
        fprintf(stderr, "compress failed: %s\n", err.msg);
        return 1;
    }
    printf("%s", text);
    int32_t prev = toks[n - 1];
    for (int i = 0; i < 32; i++) {
        int32_t next = 0;
        for (int j = 1; j < n_vocab; j++)
            if (logits[j] > logits[next]) next = j;
        if (next == skv_vocab_eos(vocab)) break;
        char piece[64];
        int len = skv_token_to_piece(vocab, prev, next, piece, sizeof piece);
        if (len > 0) fwrite(piece, 1, (size_t)len, stdout);
        prev = next;
        if (skv_forward(ctx, &next, 1, SKV_LOGITS_LAST, logits, &err)) break;
    }
    printf("\n[%s kept %d of %d positions per head; KV %llu -> %llu bytes]\n", info.policy,
           info.keep, info.T, (unsigned long long)info.bytes_before,
           (unsigned long long)info.bytes_after);
    skv_compress_info_free(&info);
    free(logits);
    skv_context_free(ctx);
    skv_model_free(m);
    return 0;
}
