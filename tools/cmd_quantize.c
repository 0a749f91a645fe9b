/* cmd_quantize.c — placeholder until the subcommand lands. */
#include "cli.h"

int cmd_quantize(int argc, char **argv) {
    (void)argc;
    (void)argv;
    cli_error("quantize", "not implemented yet");
    return 1;
}
