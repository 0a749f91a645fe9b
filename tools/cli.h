/* cli.h — shared pieces of the sparsekv command-line tool. Each subcommand lives in its own
 * tools/cmd_<name>.c and returns the process exit status:
 *   0 ok, 1 runtime failure (I/O, malformed model...), 2 bad usage or bad input. */
#ifndef SKV_CLI_H
#define SKV_CLI_H

#include "sparsekv.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

/* How help texts name the default model: the stories260K.gguf the project carries (found by
 * cli_model_path). */
#define SKV_DEFAULT_MODEL "the embedded stories260K.gguf"

int cmd_generate(int argc, char **argv);
int cmd_info(int argc, char **argv);
int cmd_tokenize(int argc, char **argv);
int cmd_logits(int argc, char **argv);
int cmd_convert_llama2c(int argc, char **argv);
int cmd_compress(int argc, char **argv);
int cmd_eval(int argc, char **argv);
int cmd_eval_merge(int argc, char **argv);
int cmd_quantize(int argc, char **argv);
int cmd_synth_model(int argc, char **argv);
int cmd_bench(int argc, char **argv);
int cmd_policies(int argc, char **argv);

/* Text made safe for a terminal: control bytes (C0, DEL, the C1 controls U+0080..U+009F),
 * invalid UTF-8 and the backslash shown as \xNN / \\; with keep_newlines (messages) newlines,
 * tabs and backslashes are kept. Writes into buf (size bytes, truncated) and returns it. */
const char *cli_escape(const char *s, char *buf, size_t size, bool keep_newlines);

/* Prints "sparsekv <cmd>: <message>" on stderr, escaped as by cli_escape. */
void cli_error(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Whether paths a and b name one existing file (the same device and inode). */
bool cli_same_file(const char *a, const char *b);
/* false (after a message) when path cannot be the output file: a directory, in a directory
 * that does not exist, or (without overwrite: the message names --overwrite) something already
 * there: a command that writes a file does not replace one unless asked (the embedded default
 * model included). */
bool cli_output_ok(const char *cmd, const char *path, bool overwrite);

/* Strict number parsing: the whole string must be a number in [lo, hi]. */
bool cli_parse_int(const char *s, long lo, long hi, long *out);
bool cli_parse_u64(const char *s, uint64_t *out);
bool cli_parse_double(const char *s, double lo, double hi, double *out);
/* Removes the temporaries a GGUF writer makes beside path when SIGINT, SIGTERM or SIGHUP ends
 * the process (quantize, synth-model, convert-llama2c: an interrupted write left hundreds of MB
 * behind). */
void cli_remove_temporaries_on_signal(const char *path);

/* A warning on stderr when n threads are more than the cores this process may run on (allowed,
 * never silent). */
void cli_warn_threads(const char *cmd, long n);
/* -t's value: a thread count in [1, SKV_MAX_THREADS]; false after the one message every command
 * gives for a bad one. */
bool cli_parse_threads(const char *cmd, const char *s, long *out);
/* --ctx N: a context size in [0, 2^28] (0: the model's training length), else a message. */
bool cli_parse_ctx(const char *cmd, const char *s, int *out);
/* A warning on stderr when --ctx is past the model's training context (allowed, never
 * silent: positions past it are ones the model never saw). */
void cli_warn_ctx(const char *cmd, int n_ctx, const skv_model *model);

/* The model path to use: explicit, else the embedded default stories260K.gguf, looked up in
 * order: $SKV_DEFAULT_MODEL; EXE_DIR/../models/ (the source tree, for build/sparsekv);
 * EXE_DIR/../share/sparsekv/ (an installed sparsekv); ./models/; and
 * ../shared/models/stories260K/. NULL (and a message naming the places tried) when none exists. */
const char *cli_model_path(const char *cmd, const char *explicit_path);

/* Loads the model, printing the library's message on failure; cli_model_rc is then the exit
 * status to return: 2 for a missing, malformed or unsupported file (bad input), 1 otherwise. */
skv_model *cli_load_model(const char *cmd, const char *path);
/* meta: the matrices stay in the file mapping, not to be run (skv_model_load_meta) */
skv_model *cli_load_model_as(const char *cmd, const char *path, bool meta);
extern int cli_model_rc;

/* Writes s as a JSON string literal (quotes and escapes; invalid UTF-8 bytes as \u00XX). */
void cli_json_string(FILE *f, const char *s, size_t len);

/* The kernels this process runs, as far as they change a result's last bits: the SIMD level,
 * and at the avx512 level the VNNI, BF16 and AMX code where used ("avx512+vnni+bf16"). Runs
 * that are to be compared bit for bit (eval's --resume and eval-merge) record it. */
const char *cli_simd_kernels(void);

/* A run.json config value for a message: each comma-separated decimal fraction that %.17g
 * wrote ("0.10000000000000001") in the shortest form without an exponent that reads back the
 * same ("0.1"); integers, hashes and other text as they are. Returns buf. */
const char *cli_config_shown(const char *value, char *buf, size_t size);

#endif
