/* llama2c.h — the llama2.c converter as the CLI calls it: skv_convert_llama2c_ex, and whose
 * fault a failure was (bad input exits 2, a failed write 1). */
#ifndef SKV_LLAMA2C_H
#define SKV_LLAMA2C_H

#include "sparsekv.h"

#include <stdbool.h>

/* skv_convert_llama2c_ex; on failure *bad_input (may be NULL) says whether the checkpoint or
 * the tokenizer was at fault: missing, unreadable, malformed or unsupported. */
skv_status skv_llama2c_convert(const char *checkpoint_path, const char *tokenizer_path,
                               const char *out_path, const skv_llama2c_params *params,
                               bool *bad_input, skv_err *err);

#endif
