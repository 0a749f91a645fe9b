/* cmd_convert_llama2c.c — sparsekv convert-llama2c CHECKPOINT.bin TOKENIZER.bin OUT.gguf */
#include "cli.h"
#include "cli_args.h"

#include "model/llama2c.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#define CMD "convert-llama2c"

static void usage(FILE *f) {
    fprintf(f, "usage: sparsekv " CMD " [--rope-theta F] [--overwrite]\n"
               "                                CHECKPOINT.bin TOKENIZER.bin OUT.gguf\n\n"
               "Converts a llama2.c checkpoint (legacy v0 or v1 \"ak42\" float32 format) and its\n"
               "tokenizer.bin into a GGUF v3 model: F32 weights, llama architecture metadata and\n"
               "the tokenizer embedded (tokenizer.ggml.model = llama). OUT.gguf is written\n"
               "atomically (a temporary file renamed into place).\n\n"
               "example:\n"
               "  sparsekv " CMD " ../shared/models/stories260K/stories260K.bin \\\n"
               "      ../shared/models/stories260K/tok512.bin stories260K.gguf\n\n"
               "options:\n"
               "  --rope-theta F   the RoPE base frequency the model was trained with (a\n"
               "                   llama2.c checkpoint does not record it; default 10000,\n"
               "                   llama2.c's)\n"
               "  --overwrite      replace OUT.gguf if it exists (without it an existing\n"
               "                   OUT.gguf is refused); OUT.gguf is never one of the inputs\n"
               "  -h, --help       show this help\n\n"
               "exit status: 0 ok, 1 runtime failure (e.g. writing OUT.gguf), 2 bad usage or\n"
               "bad input (a checkpoint or tokenizer missing, unreadable or malformed; OUT.gguf\n"
               "exists, is a directory or is in no directory)\n");
}

int cmd_convert_llama2c(int argc, char **argv) {
    const char *pos[3];
    int n_pos = 0;
    static const cli_opt opts[] = {{"help", 'h', false, NULL, false},
                                   {"rope-theta", CLI_LONG + 1, true, NULL, false},
                                   {"overwrite", CLI_LONG + 2, false, NULL, false},
                                   {0}};
    bool overwrite = false;
    skv_llama2c_params params = skv_llama2c_default_params();
    cli_args args;
    if (!cli_args_init(&args, CMD, argc, argv, opts, NULL, NULL)) return 2;
    const char *v;
    for (int key; (key = cli_args_next(&args, &v)) != CLI_DONE;) {
        if (key == CLI_FAIL) return 2;
        if (key == 'h') {
            usage(stdout);
            return 0;
        }
        if (key == CLI_LONG + 2) {
            overwrite = true;
            continue;
        }
        if (key == CLI_LONG + 1) {
            double th;
            if (!cli_parse_double(v, 1e-6, 1e12, &th)) {
                cli_error(CMD, "invalid value '%s' for --rope-theta (a number > 0)", v);
                return 2;
            }
            params.rope_theta = (float)th;
            continue;
        }
        if (n_pos == 3) {
            cli_error(CMD, "too many arguments: expected CHECKPOINT.bin TOKENIZER.bin OUT.gguf");
            return 2;
        }
        pos[n_pos++] = v;
    }
    if (n_pos != 3) {
        cli_error(CMD, "expected CHECKPOINT.bin TOKENIZER.bin OUT.gguf (see --help)");
        usage(stderr);
        return 2;
    }
    for (int i = 0; i < 2; i++) /* the inputs' faults first, then the output's */
        if (access(pos[i], R_OK) != 0) {
            cli_error(CMD, "cannot open %s '%s': %s", i ? "tokenizer" : "checkpoint", pos[i],
                      strerror(errno));
            return 2;
        }
    if (!cli_output_ok(CMD, pos[2], overwrite)) return 2;
    cli_remove_temporaries_on_signal(pos[2]);
    skv_err err = {0};
    bool bad_input = false;
    if (skv_llama2c_convert(pos[0], pos[1], pos[2], &params, &bad_input, &err) != SKV_OK) {
        cli_error(CMD, "%s", err.msg);
        return bad_input || err.status == SKV_ERR_INVALID_ARG ? 2 : 1;
    }
    printf("wrote %s\n", pos[2]);
    return 0;
}
