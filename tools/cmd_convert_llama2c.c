/* cmd_convert_llama2c.c — placeholder until the subcommand lands. */
#include "cli.h"

int cmd_convert_llama2c(int argc, char **argv) {
    (void)argc;
    (void)argv;
    cli_error("convert_llama2c", "not implemented yet");
    return 1;
}
