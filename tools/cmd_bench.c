/* cmd_bench.c — placeholder until the subcommand lands. */
#include "cli.h"

int cmd_bench(int argc, char **argv) {
    (void)argc;
    (void)argv;
    cli_error("bench", "not implemented yet");
    return 1;
}
