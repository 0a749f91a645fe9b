/* cmd_info.c — `sparsekv info`: what a model file holds: hparams, tensors, vocabulary. */
#include "cli.h"
#include "gguf.h" /* the tensor table comes straight from the file */
#include "kernels.h"

#include <stdio.h>
#include <string.h>

static void usage(FILE *f) {
    fprintf(f, "usage: sparsekv info [MODEL | -m MODEL] [--json]\n\n"
               "Prints the model's hyperparameters, every tensor with its type, shape and size,\n"
               "and vocabulary facts. --json prints one JSON document instead.\n");
}

static void shape_str(const skv_gguf_tensor *t, char *buf, size_t n) {
    int off = snprintf(buf, n, "[");
    for (int d = 0; d < t->n_dims && off < (int)n; d++)
        off += snprintf(buf + off, n - (size_t)off, d ? ", %lld" : "%lld", (long long)t->ne[d]);
    snprintf(buf + off, n - (size_t)off, "]");
}

int cmd_info(int argc, char **argv) {
    const char *model_arg = NULL;
    bool json = false;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            usage(stdout);
            return 0;
        } else if (!strcmp(argv[i], "--json")) {
            json = true;
        } else if (!strcmp(argv[i], "-m") && i + 1 < argc) {
            model_arg = argv[++i];
        } else if (argv[i][0] != '-' && !model_arg) {
            model_arg = argv[i];
        } else {
            cli_error("info", "unexpected argument '%s' (see --help)", argv[i]);
            return 2;
        }
    }
    const char *path = cli_model_path("info", model_arg);
    if (!path) return 2;
    skv_model *model = cli_load_model("info", path);
    if (!model) return 1;
    skv_err err = {0};
    skv_gguf *g = skv_gguf_open(path, &err);
    if (!g) {
        cli_error("info", "%s", err.msg);
        skv_model_free(model);
        return 1;
    }
    const skv_hparams *hp = skv_model_hparams(model);
    const skv_vocab *v = skv_model_vocab(model);
    int64_t nt = skv_gguf_n_tensors(g);
    char shape[128];
    if (json) {
        printf("{\"path\":");
        cli_json_string(stdout, path, strlen(path));
        printf(",\"gguf_version\":%u,\"architecture\":\"llama\",\"hparams\":{\"n_vocab\":%d,"
               "\"n_ctx_train\":%d,\"n_embd\":%d,\"n_layer\":%d,\"n_head\":%d,\"n_head_kv\":%d,"
               "\"head_dim\":%d,\"n_ff\":%d,\"n_rot\":%d,\"rope_theta\":%g,\"norm_eps\":%g,"
               "\"tied_output\":%s},",
               skv_gguf_version(g), hp->n_vocab, hp->n_ctx_train, hp->n_embd, hp->n_layer,
               hp->n_head, hp->n_head_kv, hp->head_dim, hp->n_ff, hp->n_rot, hp->rope_theta,
               hp->norm_eps, hp->tied_output ? "true" : "false");
        printf("\"weight_type\":\"%s\",\"weight_bytes_per_token\":%llu,",
               skv_type_name(skv_model_weight_type(model)),
               (unsigned long long)skv_model_weight_bytes(model));
        printf("\"vocab\":{\"model\":\"llama\",\"n_tokens\":%d,\"bos\":%d,\"eos\":%d},",
               skv_vocab_n_tokens(v), skv_vocab_bos(v), skv_vocab_eos(v));
        printf("\"tensors\":[");
        for (int64_t i = 0; i < nt; i++) {
            const skv_gguf_tensor *t = skv_gguf_tensor_at(g, i);
            shape_str(t, shape, sizeof shape);
            printf("%s{\"name\":", i ? "," : "");
            cli_json_string(stdout, t->name, strlen(t->name));
            printf(",\"type\":\"%s\",\"shape\":%s,\"bytes\":%llu}", skv_type_name(t->type), shape,
                   (unsigned long long)t->size);
        }
        printf("]}\n");
    } else {
        printf("model        %s (GGUF v%u, llama)\n", path, skv_gguf_version(g));
        printf("n_vocab      %d\nn_ctx_train  %d\nn_embd       %d\nn_layer      %d\n"
               "n_head       %d\nn_head_kv    %d (GQA %d:1)\nhead_dim     %d\nn_ff         %d\n"
               "n_rot        %d\nrope_theta   %g\nnorm_eps     %g\noutput       %s\n",
               hp->n_vocab, hp->n_ctx_train, hp->n_embd, hp->n_layer, hp->n_head, hp->n_head_kv,
               hp->n_head / hp->n_head_kv, hp->head_dim, hp->n_ff, hp->n_rot, hp->rope_theta,
               hp->norm_eps, hp->tied_output ? "tied to token_embd" : "separate");
        printf("weights      mostly %s, %.2f MiB read per token\n",
               skv_type_name(skv_model_weight_type(model)),
               skv_model_weight_bytes(model) / 1048576.0);
        printf("vocab        llama (SentencePiece BPE), %d tokens, bos %d, eos %d\n",
               skv_vocab_n_tokens(v), skv_vocab_bos(v), skv_vocab_eos(v));
        printf("\n%-32s %-6s %-18s %12s\n", "tensor", "type", "shape", "bytes");
        for (int64_t i = 0; i < nt; i++) {
            const skv_gguf_tensor *t = skv_gguf_tensor_at(g, i);
            shape_str(t, shape, sizeof shape);
            printf("%-32s %-6s %-18s %12llu\n", t->name, skv_type_name(t->type), shape,
                   (unsigned long long)t->size);
        }
    }
    skv_gguf_close(g);
    skv_model_free(model);
    return 0;
}
