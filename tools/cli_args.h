/* cli_args.h — the one option parser of every sparsekv command (getopt_long underneath).
 *
 * A command lists its options in a table; cli_args_next walks argv and returns one option at a
 * time, with GNU conventions (`--keep 0.1`, `--keep=0.1`, `-t4`, unambiguous prefixes such as
 * `--pol`, `--` ends the options). What every command gets the same way:
 *   - an unknown option is an error that names the closest known one ("did you mean --policy?");
 *   - a missing value, a value given to a flag, and an option given twice are errors;
 *   - operands (non-option arguments) come back as CLI_OPERAND, in order, for the command to
 *     take or refuse (cli_args_extra says so);
 *   - every error is printed once as "sparsekv CMD: ..." and the command exits 2.
 * A long option may have an alias (`--policies` for `--policy`): the same option under another
 * spelling, so that one word works in every command. */
#ifndef SKV_CLI_ARGS_H
#define SKV_CLI_ARGS_H

#include <getopt.h>
#include <stdbool.h>

enum {
    CLI_DONE = -1,    /* no more arguments */
    CLI_FAIL = -2,    /* a message was printed; exit 2 */
    CLI_OPERAND = -3, /* a non-option argument, in *value */
    CLI_LONG = 256,   /* first key of options that have no short letter */
};

typedef struct cli_opt {
    const char *name;  /* long name without the dashes ("keep"), or NULL (short only) */
    int key;           /* the short letter ('m'), or CLI_LONG + n; what cli_args_next returns */
    bool value;        /* takes a value */
    const char *alias; /* a second long spelling of the same option, or NULL */
    bool repeat;       /* may be given more than once (e.g. --label) */
} cli_opt;

#define CLI_MAX_OPTS 64

typedef struct cli_args {
    const char *cmd;
    int argc;
    char **argv;
    const cli_opt *opts[CLI_MAX_OPTS]; /* the table entries, flattened */
    int n_opts;
    struct option longopts[2 * CLI_MAX_OPTS + 1];
    int long_index[2 * CLI_MAX_OPTS]; /* longopts[i] -> opts index */
    char optstring[2 * CLI_MAX_OPTS + 4];
    unsigned char seen[CLI_MAX_OPTS]; /* how many times each option was given */
    const char *last_spelling;        /* the long name the option just returned was given by */
    int last_key;
    bool done; /* getopt_long has finished ("--" or the end): argv[rest..] are operands */
    int rest;
} cli_args;

/* Prepares to parse argv[1..argc-1] of command cmd against up to three tables (each ends with an
 * entry whose key is 0; pass NULL for unused ones). The tables are the program's own: a key or
 * name given twice is a programming error, reported (false) rather than asserted. */
bool cli_args_init(cli_args *a, const char *cmd, int argc, char **argv, const cli_opt *t1,
                   const cli_opt *t2, const cli_opt *t3);

/* The next option's key (value in *value for options that take one, else NULL), CLI_OPERAND
 * with the argument in *value, CLI_DONE, or CLI_FAIL after a message. */
int cli_args_next(cli_args *a, const char **value);

/* The next argument as it is, even one that starts with '-' ("-1"), for an option that takes
 * two values (--vocab-llama2c FILE N): true with it in *value, false at the end of argv. */
bool cli_args_take(cli_args *a, const char **value);
/* How many times the option with this key was given so far. */
int cli_args_given(const cli_args *a, int key);

/* "--keep" / "-m": the spelling the user wrote for the option just returned (for messages). */
const char *cli_args_spelling(const cli_args *a);

/* Prints "sparsekv CMD: OPT needs NEEDED" style errors: when `key` was given and `needed` was
 * not, prints "--X only applies with --Y" (plus the hint, if any) and returns false. */
bool cli_args_requires(const cli_args *a, int key, int needed, const char *hint);

/* Refuses `key` together with `other`: "give --X or --Y, not both". */
bool cli_args_exclusive(const cli_args *a, int key, int other);

/* The message for an operand the command does not take; returns CLI_FAIL. */
int cli_args_extra(const cli_args *a, const char *operand);

/* The name of names[0..n-1] closest to word (a prefix of it, or within a small edit distance),
 * or NULL: for "did you mean" messages. */
const char *cli_closest(const char *word, const char *const *names, int n);

/* "-c" for a key with a short letter, else "--name" (static buffer, for messages). */
const char *cli_args_name(const cli_args *a, int key);

#endif
