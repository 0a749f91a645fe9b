/* sparsekv.c — the command-line entry: dispatches to tools/cmd_<name>.c. */
#include "cli.h"
#include "cli_args.h"

#include <stdio.h>
#include <errno.h>
#include <string.h>

typedef struct command {
    const char *name;
    int (*fn)(int argc, char **argv);
    const char *summary;
} command;

static const command commands[] = {
    {"generate", cmd_generate, "generate text (optionally on a compressed cache)"},
    {"compress", cmd_compress, "compress a prompt's KV cache and print what was kept (--json)"},
    {"eval", cmd_eval, "measure each policy's quality cost against the full cache"},
    {"policies", cmd_policies, "list the compression policies (the registry): needs, params"},
    {"eval-merge", cmd_eval_merge, "merge sharded eval outputs into one summary"},
    {"bench", cmd_bench, "prefill/decode speed, roofline, compressed-cache decode"},
    {"info", cmd_info, "print a model's hparams, tensors and vocabulary facts"},
    {"tokenize", cmd_tokenize, "print the token ids of a text"},
    {"logits", cmd_logits, "write float32 logits of every prompt position to a file"},
    {"convert-llama2c", cmd_convert_llama2c, "convert a llama2.c checkpoint + tokenizer to GGUF"},
    {"quantize", cmd_quantize, "rewrite a GGUF model with quantized weights"},
    {"synth-model", cmd_synth_model, "write a random-weight GGUF with a real model's shapes"},
};

static void usage(FILE *f) {
    fprintf(f,
            "sparsekv %s — run Llama-family GGUF models\n"
            "and compress their KV cache per head\n\n"
            "usage: sparsekv <command> [options]   (sparsekv <command> --help for details)\n\n"
            "commands:\n",
            skv_version());
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        fprintf(f, "  %-16s %s\n", commands[i].name, commands[i].summary);
    fprintf(f,
            "\nWith no -m, commands use $SKV_DEFAULT_MODEL when it is set, else\n%s"
            " (the default model of every command's help).\n"
            "sparsekv --version prints the version.\n",
            SKV_DEFAULT_MODEL);
}

/* Everything a command printed must have reached stdout: a full disk or a closed pipe is a
 * failure (exit 1 with the system's message), not a silent success. */
static int finish_stdout(int status) {
    if (fflush(stdout) != 0 || ferror(stdout)) {
        int e = errno ? errno : EIO;
        fprintf(stderr, "sparsekv: cannot write standard output: %s\n", strerror(e));
        return status ? status : 1;
    }
    return status;
}

static int run(int argc, char **argv) {
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help")) {
        /* `sparsekv help generate` is `sparsekv generate --help` */
        for (size_t i = 0; argc > 2 && i < sizeof commands / sizeof commands[0]; i++)
            if (!strcmp(argv[2], commands[i].name)) {
                char *args[] = {argv[2], (char *)"--help", NULL};
                return commands[i].fn(2, args);
            }
        usage(stdout);
        return 0;
    }
    if (!strcmp(argv[1], "--version")) {
        if (argc > 2) {
            fprintf(stderr, "sparsekv: --version takes no arguments (got '%s')\n", argv[2]);
            return 2;
        }
        printf("sparsekv %s\n", skv_version());
        return 0;
    }
    /* The library falls back silently when SKV_SIMD asks for what it cannot do; say so here. */
    const char *simd_warn = skv_simd_warning();
    if (simd_warn) fprintf(stderr, "sparsekv: warning: %s\n", simd_warn);
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        if (!strcmp(argv[1], commands[i].name)) return commands[i].fn(argc - 1, argv + 1);
    const char *names[sizeof commands / sizeof commands[0]];
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++) names[i] = commands[i].name;
    const char *near = cli_closest(argv[1], names, (int)(sizeof names / sizeof names[0]));
    char shown[256];
    cli_escape(argv[1], shown, sizeof shown, false);
    if (near) {
        fprintf(stderr, "sparsekv: unknown command '%s'; did you mean '%s'? (sparsekv --help)\n",
                shown, near);
        return 2;
    }
    fprintf(stderr, "sparsekv: unknown command '%s'\n\n", shown);
    usage(stderr);
    return 2;
}

int main(int argc, char **argv) {
    return finish_stdout(run(argc, argv));
}
