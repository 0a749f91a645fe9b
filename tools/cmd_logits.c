/* cmd_logits.c — placeholder until the subcommand lands. */
#include "cli.h"

int cmd_logits(int argc, char **argv) {
    (void)argc;
    (void)argv;
    cli_error("logits", "not implemented yet");
    return 1;
}
