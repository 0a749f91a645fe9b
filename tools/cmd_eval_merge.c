/* cmd_eval_merge.c — placeholder until the subcommand lands. */
#include "cli.h"

int cmd_eval_merge(int argc, char **argv) {
    (void)argc;
    (void)argv;
    cli_error("eval_merge", "not implemented yet");
    return 1;
}
