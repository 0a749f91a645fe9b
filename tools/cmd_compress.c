/* cmd_compress.c — placeholder until the subcommand lands. */
#include "cli.h"

int cmd_compress(int argc, char **argv) {
    (void)argc;
    (void)argv;
    cli_error("compress", "not implemented yet");
    return 1;
}
