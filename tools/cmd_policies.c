/* cmd_policies.c — `sparsekv policies`: the policy registry as a table (or JSON): name,
 * aliases, paper, what it needs, its parameters with defaults and ranges. */
#include "cli.h"
#include "cli_args.h"

#include <stdio.h>
#include <string.h>

static void usage(FILE *f) {
    fprintf(f, "usage: sparsekv policies [--json]\n\n"
               "Lists every compression policy of the registry: its name and alias, the paper,\n"
               "the score rule, what it needs (keys only, a window of queries, the prefill's\n"
               "accumulated attention), whether it runs under a decoding budget (--max-cache),\n"
               "what it costs, and the parameters it reads with their defaults and ranges.\n");
}

static const skv_policy_param_about *param(const char *name, size_t len) {
    for (int i = 0; i < skv_policy_param_count(); i++) {
        const skv_policy_param_about *p = skv_policy_param_at(i);
        if (strlen(p->name) == len && !strncmp(p->name, name, len)) return p;
    }
    return NULL;
}

static const char *needs(const skv_policy_about *a) {
    if (a->needs_values) return a->needs_window ? "window, values" : "keys, values";
    return a->needs_window ? "window" : a->needs_prefill_attention ? "prefill attention" : "keys";
}

/* Calls fn for every parameter named in the comma list. */
static void each_param(const char *list, void (*fn)(const skv_policy_param_about *, int, void *),
                       void *u) {
    int k = 0;
    for (const char *s = list; *s;) {
        const char *e = strchr(s, ',');
        size_t len = e ? (size_t)(e - s) : strlen(s);
        const skv_policy_param_about *p = param(s, len);
        if (p) fn(p, k++, u);
        s += len + (e ? 1 : 0);
    }
}

static void print_param_text(const skv_policy_param_about *p, int k, void *u) {
    (void)k;
    fprintf(u, "      %-14s %-13s default %-6s %-12s %s\n", p->name, p->flag, p->def, p->range,
            p->help);
}

/* n JSON members "key": "value" separated by ", " (a NULL value is null). */
static void json_members(FILE *f, const char *const *keys, const char *const *vals, int n) {
    for (int k = 0; k < n; k++) {
        fprintf(f, "%s\"%s\": ", k ? ", " : "", keys[k]);
        if (vals[k])
            cli_json_string(f, vals[k], strlen(vals[k]));
        else
            fprintf(f, "null");
    }
}

static void print_param_json(const skv_policy_param_about *p, int k, void *u) {
    FILE *f = u;
    const char *keys[] = {"name", "flag", "default", "range"};
    const char *vals[] = {p->name, p->flag, p->def, p->range};
    fprintf(f, "%s{", k ? ", " : "");
    json_members(f, keys, vals, 4);
    fprintf(f, "}");
}

int cmd_policies(int argc, char **argv) {
    bool json = false;
    static const cli_opt opts[] = {
        {"help", 'h', false, NULL, false},
        {"json", CLI_LONG, false, NULL, false},
        {0},
    };
    cli_args args;
    if (!cli_args_init(&args, "policies", argc, argv, opts, NULL, NULL)) return 2;
    const char *v;
    for (int key; (key = cli_args_next(&args, &v)) != CLI_DONE;) {
        if (key == CLI_FAIL) return 2;
        if (key == CLI_OPERAND) return cli_args_extra(&args, v), 2;
        if (key == 'h') {
            usage(stdout);
            return 0;
        }
        json = true;
    }
    FILE *f = stdout;
    const int n = skv_policy_count();
    if (json) fprintf(f, "[");
    for (int i = 0; i < n; i++) {
        skv_policy_about a;
        skv_err err = {0};
        if (skv_policy_describe(i, &a, &err)) {
            cli_error("policies", "%s", err.msg);
            return 1;
        }
        if (json) {
            const char *keys[] = {"name", "alias", "paper", "rule", "cost", "needs"};
            const char *vals[] = {a.name, a.alias, a.paper, a.rule, a.cost, needs(&a)};
            fprintf(f, "%s\n {", i ? "," : "");
            json_members(f, keys, vals, 6);
            fprintf(f, ", \"decode\": %s, \"builtin\": %s, \"params\": [",
                    a.decode ? "true" : "false", a.builtin ? "true" : "false");
            each_param(a.params, print_param_json, f);
            fprintf(f, "]}");
        } else {
            fprintf(f, "%-12s %-10s needs %-18s decode %-3s\n", a.name, a.alias ? a.alias : "",
                    needs(&a), a.decode ? "yes" : "no");
            fprintf(f, "    paper: %s\n    score: %s\n    cost:  %s\n", a.paper, a.rule, a.cost);
            if (a.params[0]) {
                fprintf(f, "    params:\n");
                each_param(a.params, print_param_text, f);
            }
        }
    }
    fprintf(f, json ? "\n]\n" : "");
    return 0;
}
