/* cmd_generate.c — placeholder until the subcommand lands. */
#include "cli.h"

int cmd_generate(int argc, char **argv) {
    (void)argc;
    (void)argv;
    cli_error("generate", "not implemented yet");
    return 1;
}
