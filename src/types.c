/* types.c — names and block geometry of the tensor element types (ggml layouts). */
#include "kernels/kernels.h"

#include <string.h>
#include <strings.h>

typedef struct type_traits {
    const char *name;
    int block_size;     /* values per block */
    size_t block_bytes; /* bytes per block */
} type_traits;

static const type_traits traits[SKV_TYPE_COUNT] = {
    [SKV_TYPE_F32] = {"f32", 1, 4},
    [SKV_TYPE_F16] = {"f16", 1, 2},
    [SKV_TYPE_BF16] = {"bf16", 1, 2},
    [SKV_TYPE_Q8_0] = {"q8_0", SKV_QK8_0, 2 + SKV_QK8_0},
    [SKV_TYPE_Q4_0] = {"q4_0", SKV_QK4_0, 2 + SKV_QK4_0 / 2},
    [SKV_TYPE_Q4_1] = {"q4_1", 32, 2 + 2 + 16},
    [SKV_TYPE_Q5_0] = {"q5_0", SKV_QK5_0, 2 + 4 + SKV_QK5_0 / 2},
    [SKV_TYPE_Q5_1] = {"q5_1", 32, 2 + 2 + 4 + 16},
    [SKV_TYPE_Q4_K] = {"q4_k", SKV_QK_K, 2 + 2 + 12 + SKV_QK_K / 2},
    [SKV_TYPE_Q5_K] = {"q5_k", SKV_QK_K, 2 + 2 + 12 + SKV_QK_K / 8 + SKV_QK_K / 2},
    [SKV_TYPE_Q2_K] = {"q2_k", SKV_QK_K, SKV_QK_K / 16 + SKV_QK_K / 4 + 2 + 2},
    [SKV_TYPE_Q3_K] = {"q3_k", SKV_QK_K, SKV_QK_K / 8 + SKV_QK_K / 4 + 12 + 2},
    [SKV_TYPE_Q6_K] = {"q6_k", SKV_QK_K, SKV_QK_K / 2 + SKV_QK_K / 4 + SKV_QK_K / 16 + 2},
    [SKV_TYPE_IQ4_NL] = {"iq4_nl", 32, 2 + 16},
    [SKV_TYPE_IQ4_XS] = {"iq4_xs", SKV_QK_K, 2 + 2 + SKV_QK_K / 64 + SKV_QK_K / 2},
};

bool skv_type_supported(skv_type t) {
    return (unsigned)t < SKV_TYPE_COUNT && traits[t].name != NULL;
}

const char *skv_type_name(skv_type t) {
    return skv_type_supported(t) ? traits[t].name : NULL;
}

bool skv_type_from_name(const char *name, skv_type *out) {
    if (!name || !out) return false;
    for (int t = 0; t < SKV_TYPE_COUNT; t++) {
        if (traits[t].name && strcasecmp(traits[t].name, name) == 0) {
            *out = (skv_type)t;
            return true;
        }
    }
    return false;
}

int skv_type_block_size(skv_type t) {
    return skv_type_supported(t) ? traits[t].block_size : 0;
}

size_t skv_type_block_bytes(skv_type t) {
    return skv_type_supported(t) ? traits[t].block_bytes : 0;
}

size_t skv_row_bytes(skv_type t, int64_t n) {
    if (!skv_type_supported(t) || n < 0 || n % traits[t].block_size) return 0;
    return (size_t)(n / traits[t].block_size) * traits[t].block_bytes;
}

skv_type skv_type_held(skv_type t) {
    return t == SKV_TYPE_Q3_K ? SKV_TYPE_Q6_K : t;
}

bool skv_type_records_only(skv_type t) {
    return t == SKV_TYPE_Q3_K || t == SKV_TYPE_Q2_K || t == SKV_TYPE_IQ4_XS;
}
