/* cmd_tokenize.c — placeholder until the subcommand lands. */
#include "cli.h"

int cmd_tokenize(int argc, char **argv) {
    (void)argc;
    (void)argv;
    cli_error("tokenize", "not implemented yet");
    return 1;
}
