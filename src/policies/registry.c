/* registry.c — the policy registry: the single source of truth for names, aliases, papers,
 * needs and parameters. Adding a policy: its file in src/policies/ defining its skv_policy row,
 * its extern in policies.h, its line in `builtin` below, its reference rule in
 * tests/test_policies_new.c and its docs (the checklist: docs/POLICIES.md, "Adding a built-in
 * policy"). Policies written outside the library join through skv_policy_register (a scorer
 * callback). */
#include "policies.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const skv_policy *const builtin[] = {
    &skv_policy_sink_recent, &skv_policy_random, &skv_policy_attention,
    &skv_policy_pyramid,     &skv_policy_knorm,  &skv_policy_keydiff,
    &skv_policy_tova,        &skv_policy_h2o,    &skv_policy_adakv,
};
#define N_BUILTIN ((int)(sizeof builtin / sizeof builtin[0]))

/* ---- the parameters (fields of skv_compress_params) ----------------------------------------- */

static const skv_policy_param_about params[] = {
    {"sinks", "--sinks", "4", "[0, 2^30]", "first positions always kept"},
    {"seed", "--seed", "0", "[0, 2^64)", "random policy seed"},
    {"pooling", "--pool", "max", "max|avg", "pooling of the window score"},
    {"kernel", "--kernel", "7", "[1, 65536]", "pooling width (1 = no pooling)"},
    {"window_keep", "--window-keep", "32", "[0, 2^30]", "last scored positions forced in"},
};

int skv_policy_param_count(void) {
    return (int)(sizeof params / sizeof params[0]);
}

const skv_policy_param_about *skv_policy_param_at(int i) {
    return i >= 0 && i < skv_policy_param_count() ? &params[i] : NULL;
}

/* ---- registered (external) policies -------------------------------------------------------- */

#define MAX_EXT 64

typedef struct ext_row {
    skv_policy row;
    skv_policy_def def;
    char name[32];
    char paper[128];
} ext_row;

static ext_row ext[MAX_EXT];
static int n_ext;
static char list_buf[4096]; /* every name and alias: 9 built-in + 64 x 31 characters */
static bool list_built;

int skv_policy_registry_size(void) {
    return N_BUILTIN + n_ext;
}

const skv_policy *skv_policy_at(int i) {
    if (i < 0) return NULL;
    if (i < N_BUILTIN) return builtin[i];
    return i - N_BUILTIN < n_ext ? &ext[i - N_BUILTIN].row : NULL;
}

const skv_policy *skv_policy_find(const char *name) {
    if (!name) return NULL;
    for (int i = 0; i < skv_policy_registry_size(); i++) {
        const skv_policy *p = skv_policy_at(i);
        if (!strcmp(name, p->name) || (p->alias && !strcmp(name, p->alias))) return p;
    }
    return NULL;
}

static void build_list(void) {
    size_t off = 0;
    list_buf[0] = '\0';
    for (int i = 0; i < skv_policy_registry_size(); i++) {
        const skv_policy *p = skv_policy_at(i);
        int n = p->alias ? snprintf(list_buf + off, sizeof list_buf - off, "%s%s (%s)",
                                    i ? ", " : "", p->name, p->alias)
                         : snprintf(list_buf + off, sizeof list_buf - off, "%s%s", i ? ", " : "",
                                    p->name);
        if (n < 0 || (size_t)n >= sizeof list_buf - off) break;
        off += (size_t)n;
    }
    list_built = true;
}

/* Built once at load-free first use for the built-in rows; rebuilt by skv_policy_register. The
 * built-in list is also computed eagerly by a constructor so concurrent first calls never race. */
__attribute__((constructor)) static void registry_init(void) {
    build_list();
}

const char *skv_policy_list(void) {
    if (!list_built) build_list();
    return list_buf;
}

const char *skv_policy_canonical(const char *name) {
    const skv_policy *p = skv_policy_find(name);
    return p ? p->name : NULL;
}

bool skv_policy_needs_window(const char *name) {
    const skv_policy *p = skv_policy_find(name);
    return p && skv_policy_row_needs_window(p);
}

int skv_policy_count(void) {
    return skv_policy_registry_size();
}

skv_status skv_policy_describe(int i, skv_policy_about *out, skv_err *err) {
    const skv_policy *p = skv_policy_at(i);
    if (p && !out)
        return skv_err_set(err, SKV_ERR_INVALID_ARG,
                           "skv_policy_describe: no place to write row %d (out is NULL)", i);
    if (!p)
        return skv_err_set(err, SKV_ERR_INVALID_ARG, "no policy row %d (the registry has %d)", i,
                           skv_policy_registry_size());
    memset(out, 0, sizeof *out);
    out->name = p->name;
    out->alias = p->alias;
    out->paper = p->paper ? p->paper : "";
    out->rule = p->rule ? p->rule : "";
    out->cost = p->cost ? p->cost : "";
    out->params = p->params ? p->params : "";
    out->needs_window = skv_policy_row_needs_window(p);
    out->needs_prefill_attention = (p->needs & SKV_POLICY_NEEDS_PREFILL_ATTN) != 0;
    out->decode = p->decode;
    out->layer_budgets = p->allocate != skv_alloc_uniform;
    out->builtin = i < N_BUILTIN;
    out->needs_values = (p->needs & SKV_POLICY_NEEDS_VALUES) != 0;
    return SKV_OK;
}

/* The scorer of an external row: one callback per (layer, kv head) over float keys (and
 * values, read here per head: the head may hold more entries than the n scored). */
static skv_status ext_head(const skv_score_job *job, int l, int h, const float *k, double *row,
                           void *scratch, skv_err *err) {
    (void)scratch;
    const skv_policy_def *def = job->ext;
    const int g = job->n_head / job->n_head_kv, d = job->head_dim;
    skv_policy_head in = {.layer = l,
                          .kv_head = h,
                          .head_dim = d,
                          .n = job->T,
                          .keys = k,
                          .positions = skv_cache_head_positions(job->cache, l, h)};
    if (job->queries && job->W > 0) {
        in.queries = job->queries[l] + ((size_t)h * g * job->q_n + (size_t)job->q_off) * d;
        in.group = g;
        in.n_window = job->W;
        in.query_head_stride = (size_t)job->q_n * d;
    }
    float *v = NULL; /* [len, d] */
    if (def->needs_values) {
        const int len = skv_cache_head_len(job->cache, l, h);
        v = malloc(((size_t)len * (size_t)d + 1) * sizeof *v);
        if (!v)
            return skv_err_set(err, SKV_ERR_NOMEM, "out of memory for the values of %d positions",
                               len);
        const skv_status rs = skv_cache_head_read(job->cache, l, h, NULL, v, NULL, err);
        if (rs) {
            free(v);
            return rs;
        }
        in.values = v;
    }
    if (err) err->msg[0] = '\0'; /* what the scorer writes there, and only that, is its own */
    for (int i = 0; i < job->T; i++) row[i] = NAN; /* a score it leaves out is refused as NaN */
    skv_status st = def->score(def->user, &in, row, err);
    free(v);
    if ((unsigned)st > SKV_ERR_NUMERIC) /* not a status: the scorer's mistake, said as one */
        return skv_err_set(err, SKV_ERR_INVALID_ARG,
                           "policy '%s' returned %d on layer %d kv head %d, which is no skv_status",
                           def->name, (int)st, l, h);
    if (st) {
        if (err && err->status == SKV_OK) /* the scorer's own words, if it wrote any */
            skv_err_prefix(err, st, "policy '%s' failed on layer %d kv head %d", def->name, l, h);
        return st;
    }
    return SKV_OK; /* a NaN score is refused for every policy: skv_policy_score_cache */
}

static skv_status ext_score(const skv_score_job *job, double *scores, int T_stride, skv_err *err) {
    return skv_for_each_head(job, scores, T_stride, 0, ext_head, err);
}

skv_status skv_policy_register(const skv_policy_def *def, skv_err *err) {
    if (!def || !def->name || !def->score)
        return skv_err_set(err, SKV_ERR_INVALID_ARG, "a policy needs a name and a scorer");
    size_t len = strlen(def->name);
    bool ok = len >= 1 && len <= 31;
    for (size_t i = 0; ok && i < len; i++) {
        char c = def->name[i];
        ok = (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_';
    }
    if (!ok)
        return skv_err_set(err, SKV_ERR_INVALID_ARG,
                           "policy names are 1 to 31 characters of [a-z0-9_], got '%.40s'",
                           def->name);
    const skv_policy *taken = skv_policy_find(def->name);
    if (taken)
        return strcmp(taken->name, def->name)
                   ? skv_err_set(err, SKV_ERR_INVALID_ARG,
                                 "'%s' is already the alias of policy '%s'", def->name, taken->name)
               : taken->ext
                   ? skv_err_set(err, SKV_ERR_INVALID_ARG, "policy '%s' is already registered",
                                 def->name)
                   : skv_err_set(err, SKV_ERR_INVALID_ARG,
                                 "'%s' is a built-in policy: choose another name", def->name);
    if (n_ext >= MAX_EXT)
        return skv_err_set(err, SKV_ERR_INVALID_ARG, "at most %d policies can be registered",
                           MAX_EXT);
    ext_row *r = &ext[n_ext];
    memset(r, 0, sizeof *r);
    r->def = *def;
    snprintf(r->name, sizeof r->name, "%s", def->name);
    snprintf(r->paper, sizeof r->paper, "%s", def->paper ? def->paper : "(registered)");
    r->def.name = r->name;
    r->row = (skv_policy){
        .name = r->name,
        .paper = r->paper,
        .rule = "a scorer callback (skv_policy_register)",
        .cost = "the callback's",
        .params = "",
        .needs = (def->needs_window ? SKV_POLICY_NEEDS_WINDOW : 0u) |
                 (def->needs_values ? SKV_POLICY_NEEDS_VALUES : 0u),
        .decode = true,
        .score = ext_score,
        .allocate = skv_alloc_uniform,
        .ext = &r->def,
    };
    n_ext++;
    build_list();
    return SKV_OK;
}
