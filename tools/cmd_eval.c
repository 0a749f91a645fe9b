/* cmd_eval.c — placeholder until the subcommand lands. */
#include "cli.h"

int cmd_eval(int argc, char **argv) {
    (void)argc;
    (void)argv;
    cli_error("eval", "not implemented yet");
    return 1;
}
