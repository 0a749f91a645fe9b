/* cli_args.c — see cli_args.h. */
#include "cli_args.h"

#include "cli.h"

#include <stdio.h>
#include <string.h>
#include <unistd.h>

static bool add_long(cli_args *a, int *nl, const char *name, const cli_opt *o, int idx) {
    for (int i = 0; i < *nl; i++) {
        if (!strcmp(a->longopts[i].name, name)) {
            cli_error(a->cmd, "internal error: option --%s listed twice", name);
            return false;
        }
    }
    a->longopts[*nl] =
        (struct option){name, o->value ? required_argument : no_argument, NULL, o->key};
    a->long_index[*nl] = idx;
    (*nl)++;
    return true;
}

bool cli_args_init(cli_args *a, const char *cmd, int argc, char **argv, const cli_opt *t1,
                   const cli_opt *t2, const cli_opt *t3) {
    memset(a, 0, sizeof *a);
    a->cmd = cmd;
    a->argc = argc;
    a->argv = argv;
    /* "-": operands come back in order (return 1); ":": a missing value returns ':' */
    size_t ns = 0;
    a->optstring[ns++] = '-';
    a->optstring[ns++] = ':';
    int nl = 0;
    const cli_opt *tables[3] = {t1, t2, t3};
    for (int t = 0; t < 3; t++) {
        for (const cli_opt *o = tables[t]; o && o->key; o++) {
            if (a->n_opts == CLI_MAX_OPTS) {
                cli_error(cmd, "internal error: too many options");
                return false;
            }
            for (int i = 0; i < a->n_opts; i++) {
                if (a->opts[i]->key == o->key) {
                    cli_error(cmd, "internal error: option key %d listed twice", o->key);
                    return false;
                }
            }
            int idx = a->n_opts;
            a->opts[a->n_opts++] = o;
            if (o->name && !add_long(a, &nl, o->name, o, idx)) return false;
            if (o->alias && !add_long(a, &nl, o->alias, o, idx)) return false;
            if (o->key < CLI_LONG) {
                a->optstring[ns++] = (char)o->key;
                if (o->value) a->optstring[ns++] = ':';
            }
        }
    }
    a->optstring[ns] = '\0';
    a->longopts[nl] = (struct option){0, 0, 0, 0};
    optind = 0; /* glibc: full re-initialisation, so that a process may parse twice */
    opterr = 0;
    return true;
}

static int opt_index(const cli_args *a, int key) {
    for (int i = 0; i < a->n_opts; i++)
        if (a->opts[i]->key == key) return i;
    return -1;
}

const char *cli_args_name(const cli_args *a, int key) {
    static char buf[2][96];
    static int turn;
    char *b = buf[turn ^= 1];
    int i = opt_index(a, key);
    if (key < CLI_LONG) /* the help texts show the short form */
        snprintf(b, sizeof buf[0], "-%c", key);
    else
        snprintf(b, sizeof buf[0], "--%s", i >= 0 && a->opts[i]->name ? a->opts[i]->name : "?");
    return b;
}

/* Edit distance (insertions, deletions, substitutions, adjacent swaps) of two short words. */
static int distance(const char *s, const char *t) {
    enum { M = 48 };
    size_t n = strlen(s), m = strlen(t);
    if (n >= M || m >= M) return 99;
    int d[M][M];
    for (size_t i = 0; i <= n; i++) d[i][0] = (int)i;
    for (size_t j = 0; j <= m; j++) d[0][j] = (int)j;
    for (size_t i = 1; i <= n; i++) {
        for (size_t j = 1; j <= m; j++) {
            int c = d[i - 1][j - 1] + (s[i - 1] != t[j - 1]);
            if (d[i - 1][j] + 1 < c) c = d[i - 1][j] + 1;
            if (d[i][j - 1] + 1 < c) c = d[i][j - 1] + 1;
            if (i > 1 && j > 1 && s[i - 1] == t[j - 2] && s[i - 2] == t[j - 1] &&
                d[i - 2][j - 2] + 1 < c)
                c = d[i - 2][j - 2] + 1;
            d[i][j] = c;
        }
    }
    return d[n][m];
}

const char *cli_closest(const char *word, const char *const *names, int n) {
    const char *best = NULL;
    int best_d = 99;
    size_t len = strlen(word);
    for (int i = 0; i < n; i++) {
        /* a unique prefix counts as a match ("gen" for "generate") */
        int d = len >= 2 && !strncmp(names[i], word, len) ? 0 : distance(word, names[i]);
        if (d < best_d) best_d = d, best = names[i];
    }
    int limit = len <= 4 ? 1 : len <= 8 ? 2 : 3;
    return best_d <= limit ? best : NULL;
}

static void unknown_long(const cli_args *a, const char *text) {
    char name[64];
    const char *s = text + 2;
    size_t len = strcspn(s, "=");
    if (len >= sizeof name) len = sizeof name - 1;
    memcpy(name, s, len);
    name[len] = '\0';
    /* a prefix of several options: getopt_long calls that ambiguous */
    char list[512] = "";
    size_t off = 0;
    int n_prefix = 0;
    const char *exact = NULL;
    for (const struct option *o = a->longopts; o->name; o++) {
        if (!strcmp(o->name, name)) exact = o->name;
        if (len && !strncmp(o->name, name, len)) {
            int w =
                snprintf(list + off, sizeof list - off, "%s--%s", n_prefix ? ", " : "", o->name);
            if (w > 0 && (size_t)w < sizeof list - off) off += (size_t)w;
            n_prefix++;
        }
    }
    if (exact && s[len] == '=') {
        cli_error(a->cmd, "--%s takes no value", exact);
        return;
    }
    if (n_prefix > 1) {
        cli_error(a->cmd, "option '--%s' is ambiguous: %s", name, list);
        return;
    }
    const char *best = NULL;
    int best_d = 99;
    for (const struct option *o = a->longopts; o->name; o++) {
        int d = distance(name, o->name);
        if (d < best_d) best_d = d, best = o->name;
    }
    int limit = len <= 4 ? 1 : len <= 8 ? 2 : 3;
    if (best && best_d <= limit)
        cli_error(a->cmd, "unknown option '--%s'; did you mean --%s? (see sparsekv %s --help)",
                  name, best, a->cmd);
    else
        cli_error(a->cmd, "unknown option '--%s' (see sparsekv %s --help)", name, a->cmd);
}

int cli_args_next(cli_args *a, const char **value) {
    *value = NULL;
    if (a->done) { /* after "--": the rest are operands, never parsed again */
        if (a->rest < a->argc) {
            *value = a->argv[a->rest++];
            return CLI_OPERAND;
        }
        return CLI_DONE;
    }
    int li = -1;
    int c = getopt_long(a->argc, a->argv, a->optstring, a->longopts, &li);
    if (c == -1) {
        a->done = true;
        a->rest = optind;
        return cli_args_next(a, value);
    }
    if (c == 1) {
        *value = optarg;
        return CLI_OPERAND;
    }
    const char *text = optind >= 1 && optind - 1 < a->argc ? a->argv[optind - 1] : "";
    if (c == ':') {
        int i = opt_index(a, optopt);
        bool long_form = !strncmp(text, "--", 2);
        if (long_form)
            cli_error(a->cmd, "%.*s needs a value", (int)strcspn(text, "="), text);
        else
            cli_error(a->cmd, "%s needs a value", i >= 0 ? cli_args_name(a, optopt) : text);
        return CLI_FAIL;
    }
    if (c == '?') {
        if (!strncmp(text, "--", 2) && text[2]) {
            unknown_long(a, text);
        } else if (optopt) {
            cli_error(a->cmd, "unknown option '-%c' (see sparsekv %s --help)", optopt, a->cmd);
        } else {
            cli_error(a->cmd, "unknown option '%s' (see sparsekv %s --help)", text, a->cmd);
        }
        return CLI_FAIL;
    }
    int i = opt_index(a, c);
    if (i < 0) { /* cannot happen: getopt returns only listed keys */
        cli_error(a->cmd, "internal error: option %d", c);
        return CLI_FAIL;
    }
    a->last_spelling = li >= 0 ? a->longopts[li].name : NULL;
    a->last_key = c;
    if (a->seen[i] < 255) a->seen[i]++;
    if (a->seen[i] > 1 && !a->opts[i]->repeat) {
        cli_error(a->cmd, "%s given twice", cli_args_spelling(a));
        return CLI_FAIL;
    }
    *value = a->opts[i]->value ? optarg : NULL;
    return c;
}

bool cli_args_take(cli_args *a, const char **value) {
    *value = NULL;
    if (a->done) {
        if (a->rest >= a->argc) return false;
        *value = a->argv[a->rest++];
        return true;
    }
    /* getopt_long has just returned a whole argument (an option's value is never clustered
     * with what follows), so optind names the next one; '-' in optstring means it permutes
     * nothing, and moving optind past an argument is how glibc's own callers skip one */
    if (optind < 1 || optind >= a->argc) return false;
    *value = a->argv[optind++];
    return true;
}

const char *cli_args_spelling(const cli_args *a) {
    static char buf[96];
    if (a->last_spelling) {
        snprintf(buf, sizeof buf, "--%s", a->last_spelling);
        return buf;
    }
    snprintf(buf, sizeof buf, "-%c", a->last_key < CLI_LONG ? a->last_key : '?');
    return buf;
}

int cli_args_given(const cli_args *a, int key) {
    int i = opt_index(a, key);
    return i < 0 ? 0 : a->seen[i];
}

bool cli_args_requires(const cli_args *a, int key, int needed, const char *hint) {
    if (!cli_args_given(a, key) || cli_args_given(a, needed)) return true;
    cli_error(a->cmd, "%s only applies with %s%s%s", cli_args_name(a, key),
              cli_args_name(a, needed), hint ? ": " : "", hint ? hint : "");
    return false;
}

bool cli_args_exclusive(const cli_args *a, int key, int other) {
    if (!cli_args_given(a, key) || !cli_args_given(a, other)) return true;
    cli_error(a->cmd, "give %s or %s, not both", cli_args_name(a, key), cli_args_name(a, other));
    return false;
}

/* Whether the command has the long option name. */
static bool has_opt(const cli_args *a, const char *name) {
    for (int i = 0; i < a->n_opts; i++)
        if (a->opts[i]->name && !strcmp(a->opts[i]->name, name)) return true;
    return false;
}

int cli_args_extra(const cli_args *a, const char *operand) {
    /* a newcomer's likely meaning: a model file or a prompt given without its option */
    const size_t n = strlen(operand);
    const bool file = access(operand, F_OK) == 0 || (n > 5 && !strcmp(operand + n - 5, ".gguf"));
    const char *hint = file && has_opt(a, "model")     ? "; a model goes after -m"
                       : !file && has_opt(a, "prompt") ? "; a prompt goes after -p"
                                                       : "";
    cli_error(a->cmd, "unexpected argument '%s'%s (see sparsekv %s --help)", operand, hint, a->cmd);
    return CLI_FAIL;
}
