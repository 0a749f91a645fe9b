/* cmd_synth_model.c — placeholder until the subcommand lands. */
#include "cli.h"

int cmd_synth_model(int argc, char **argv) {
    (void)argc;
    (void)argv;
    cli_error("synth_model", "not implemented yet");
    return 1;
}
