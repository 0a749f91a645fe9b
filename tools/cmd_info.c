/* cmd_info.c — placeholder until the subcommand lands. */
#include "cli.h"

int cmd_info(int argc, char **argv) {
    (void)argc;
    (void)argv;
    cli_error("info", "not implemented yet");
    return 1;
}
