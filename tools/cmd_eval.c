/* cmd_eval.c — `sparsekv eval`: what each compression policy costs in quality against the full
 * cache, on real caches (docs/EVAL.md). The measuring is in eval/; this file parses options,
 * shows progress, runs gnuplot and prints the summary. */
#include "cli.h"
#include "cli_args.h"
#include "cli_policy.h"
#include "eval/eval.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

/* The longest default sample or passkey prompt, whatever context the model claims. */
#define EVAL_DEFAULT_MAX_TOKENS 4096

static const char *CMD = "eval";

static void usage(FILE *f) {
    fprintf(f,
            "usage: sparsekv eval [-m MODEL] [--data FILE.jsonl | --task passkey|kv|multikey]\n"
            "                     [options]\n\n"
            "Measures what each KV-cache compression policy costs in quality against the full\n"
            "cache. Each sample is cut into prefix (cached and compressed), window (the\n"
            "observation window) and continuation (teacher-forced); the continuation's\n"
            "next-token distributions under the compressed cache are compared with the full\n"
            "cache's, and G tokens are decoded greedily under both.\n\n"
            "data:\n"
            "  -m MODEL             GGUF model (default %s)\n"
            "  --data FILE          JSONL, one sample a line: {\"text\": ...},\n"
            "                       {\"tokens\": [ids]},\n"
            "                       {\"context\": ..., \"window\": ..., \"continuation\": ...} or\n"
            "                       {\"messages\": [{\"role\": ..., \"content\": ...}, ...]} (a\n"
            "                       conversation in the model's chat template)\n"
            "                       (default: samples the model generates from BOS, seed i)\n"
            "  --chat-template NAME llama3, chatml, phi3 or mistral: the format of the\n"
            "                       \"messages\" lines where the model has no\n"
            "                       tokenizer.chat_template\n"
            "                       (or to override it)\n"
            "  --samples N          samples to use (default 8 generated; with --data all\n"
            "                       lines; with --task: prompts per depth, default 8)\n"
            "  --prefix X           prefix tokens: a count (an integer), a fraction of the\n"
            "                       sample in (0, 1) like 0.6, or 'rest' (default rest)\n"
            "  --window X           window tokens, count or fraction, as --prefix\n"
            "                       (default 32)\n"
            "  --continuation X     continuation tokens, count or fraction (default 64)\n"
            "  --task lm|passkey    lm (default): the metrics above; passkey: a 5-digit key\n"
            "                       hidden in filler text, exact-match retrieval after greedy\n"
            "                       decoding\n"
            "  --task kv|multikey   the retrieval model's other tasks\n"
            "                       (docs/MODEL_retrieval.md): key-value lookup, one of 4\n"
            "                       needles; scored like passkey\n"
            "  --depths LIST        needle depths of the retrieval tasks\n"
            "                       (default 0.1,0.5,0.9)\n"
            "  --passkey-tokens N   passkey prompt length (default: context - greedy)\n\n"
            "configurations (every combination is run; keep 1.0 is always added as control;\n"
            "a list may hold one value; --policy, --protocol and --pool are the same options\n"
            "as --policies, --protocols and --pooling, as in compress and generate, and\n"
            "--max-cache is --budget, as in generate):\n"
            "  --policies LIST      default: every policy of `sparsekv policies` (names or\n"
            "                       aliases)\n"
            "  --keep LIST          keep fractions in (0, 1] (default 0.1,0.25,0.5,1.0)\n"
            "  --protocols LIST     seed,engine (default both)\n"
            "  --positions LIST     original,rerotate (default original)\n"
            "  --seeds N            seeds 0..N-1 of the random policy (default 5)\n"
            "  --sinks N --kernel N --pooling max|avg --window-keep N   policy parameters\n"
            "                       (refused when no evaluated policy reads them)\n"
            "  --greedy G           greedy tokens decoded under both caches (default 32)\n"
            "  --budget LIST        decoding-time mode: teacher-force every sample with every\n"
            "                       kv head bounded at N entries (rerotate), compressing\n"
            "                       every --compress-every K tokens; decode-capable\n"
            "                       policies only; rows in results.jsonl (\"mode\":\n"
            "                       \"decode\"), figures kl_vs_budget and entries_vs_step\n"
            "  --compress-every K   with --budget: a cut every K tokens (default 32), scored\n"
            "                       with the last min(W, K) tokens' queries as the window,\n"
            "                       always kept: each budget must be larger than min(W, K)\n\n"
            "run:\n"
            "  -t N                 threads (default: 1 for models under 32 MiB of weights,\n"
            "                       else all cores)\n"
            "  --kv-type T          f32 (default), f16 or q8_0\n"
            "  --ctx N              every context's size (default 0: the model's training\n"
            "                       length); for a LongRoPE model (Phi-3.5, Phi-4-mini) it\n"
            "                       chooses the RoPE factors for the whole run, short up to\n"
            "                       the model's original length (4096 for Phi-3.5), long\n"
            "                       past it; generated samples and task prompts are sized\n"
            "                       to it as to the training length\n"
            "  --shard i/n          run only samples with index %% n == i (0 <= i < n)\n"
            "  --out DIR            output directory (default eval-out; made with its parents\n"
            "                       when missing); refused when it is\n"
            "                       not empty, unless --overwrite\n"
            "  --overwrite          replace the results of a previous run in --out\n"
            "  --resume DIR         continue the interrupted run in DIR from the rows it\n"
            "                       wrote (alone: its recorded arguments; with arguments:\n"
            "                       they must match the run's, else exit 2)\n"
            "  --label KEY=TEXT     legend text in the plots for a policy, protocol or\n"
            "                       position mode, e.g. --label attention=SnapKV (repeatable)\n"
            "  -q, --quiet          no progress\n"
            "  -h, --help           this help\n\n"
            "Writes DIR/results.jsonl (one line per sample x configuration), summary.csv,\n"
            "summary.md, timing.csv, run.json, plot_data.dat, plots.gp and, when gnuplot is\n"
            "installed, kl_vs_keep, top1_vs_keep, ppl_vs_keep and greedy_vs_keep (when\n"
            "--greedy > 0) as PNG and SVG; prints summary.md. With --task: the figures\n"
            "passkey_vs_keep (whichever task ran) and accuracy_vs_depth (depth_data.dat).\n"
            "With --budget: no timing.csv, and the figures kl_vs_budget and entries_vs_step.\n"
            "Merge shards with `sparsekv eval-merge DIR... --out DIR`.\n",
            SKV_DEFAULT_MODEL);
}

/* ---- list parsing ------------------------------------------------------------------------- */

/* Splits s at commas into at most max items of a static copy; returns count, -1 on an empty
 * item. */
static int split_list(const char *s, char *copy, size_t copy_size, char **items, int max) {
    snprintf(copy, copy_size, "%s", s);
    int n = 0;
    char *p = copy;
    for (;;) {
        char *c = strchr(p, ',');
        if (c) *c = 0;
        if (!*p || n == max) return -1;
        items[n++] = p;
        if (!c) break;
        p = c + 1;
    }
    return n;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* A split part: count >= 1, fraction in (0, 1), or "rest" (0) when allowed. */
static bool parse_part(const char *s, bool allow_rest, double *out) {
    if (allow_rest && !strcmp(s, "rest")) {
        *out = 0;
        return true;
    }
    double v;
    if (!cli_parse_double(s, 0, 1e9, &v) || v <= 0) return false;
    /* a count is written as an integer; "1.0" or "2e1" is no fraction (below 1) and no count */
    if (v >= 1 && (v != floor(v) || strpbrk(s, ".eE"))) return false;
    *out = v;
    return true;
}

/* ---- progress ----------------------------------------------------------------------------- */

typedef struct progress {
    bool quiet, tty;
    int n_samples, n_cfgs, samples_done;
    long long done, total;
    double t0, last;
} progress;

static void progress_show(progress *p, bool sample_done, bool final) {
    if (p->quiet) return;
    double now = skv_time_ms();
    if (p->tty && !final && now - p->last < 100) return;
    if (!p->tty && !sample_done) return; /* a plain line per finished sample */
    p->last = now;
    double secs = (now - p->t0) / 1000.0;
    double rate = secs > 0 ? (double)p->done / secs : 0;
    double eta = rate > 0 ? (double)(p->total - p->done) / rate : 0;
    if (p->tty) {
        int width = 30, fill = p->total ? (int)(width * p->done / p->total) : width;
        char bar[64];
        for (int i = 0; i < width; i++) bar[i] = i < fill ? '#' : '.';
        bar[width] = 0;
        fprintf(stderr, "\r[%s] %d/%d samples  %.1f configs/s  ETA %.0fs   ", bar, p->samples_done,
                p->n_samples, rate, eta);
        if (final) fputc('\n', stderr);
    } else {
        fprintf(stderr, "sparsekv eval: %d/%d samples done, %.1f configs/s, ETA %.0fs\n",
                p->samples_done, p->n_samples, rate, eta);
    }
    fflush(stderr);
}

typedef struct sink {
    FILE *f;
    const char *path;
    const skv_eval_settings *st;
    progress *prog;
    int bad_controls; /* full cache at keep 1.0, yet results differ: engine bug */
    double worst_control_kl;
    int not_full; /* keep 1.0 rows whose policy did not keep every entry */
    char not_full_policies[128];
    /* degenerate configurations, warned once each: selections of this sample, and warnings */
    int sample;
    struct {
        const skv_eval_config *cfg;
        uint64_t hash;
    } seen[512];
    int n_seen;
    char warned[64][96];
    int n_warned;
} sink;

/* true the first time key is seen (then remembered) */
static bool first_warning(sink *s, const char *key) {
    for (int i = 0; i < s->n_warned; i++)
        if (!strcmp(s->warned[i], key)) return false;
    if (s->n_warned < 64) snprintf(s->warned[s->n_warned++], sizeof s->warned[0], "%s", key);
    return s->n_warned < 64;
}

/* Warns when nothing was chosen by score, or when two policies kept the same entries. */
static void check_degenerate(sink *s, const skv_eval_result *r) {
    const skv_eval_config *c = r->cfg;
    if (c->keep_frac >= 1.0 || !r->by_score) return;
    char key[96];
    int scored = 0;
    for (int l = 0; l < r->n_layer; l++) scored += r->by_score[l];
    const char *proto = c->protocol == SKV_PROTOCOL_ENGINE ? "engine" : "seed";
    snprintf(key, sizeof key, "none %s %g %s", c->policy, c->keep_frac, proto);
    if (scored == 0 && r->keep < r->T && first_warning(s, key)) {
        /* name only what forces entries for this policy (as compress's note does) */
        /* the window is in the cache (and forced) in the engine protocol only */
        char forced[96] = "";
        int n = c->protocol == SKV_PROTOCOL_ENGINE
                    ? snprintf(forced, sizeof forced, "window %d", r->sample->n_window)
                    : 0;
        if (cli_policy_reads(c->policy, "window_keep"))
            n += snprintf(forced + n, sizeof forced - (size_t)n, "%s--window-keep %d",
                          n ? ", " : "", s->st->window_keep);
        if (cli_policy_reads(c->policy, "sinks"))
            snprintf(forced + n, sizeof forced - (size_t)n, "%s--sinks %d", n ? ", " : "",
                     s->st->sinks);
        if (!forced[0]) snprintf(forced, sizeof forced, "by the policy's own rule");
        fprintf(stderr,
                "sparsekv eval: warning: %s at keep %g (%s protocol) chose nothing by score "
                "(first seen at sample %d, T = %d): keep = %d entries are all forced (%s); "
                "raise --keep or lower those\n",
                c->policy, c->keep_frac, proto, r->sample->index, r->T, r->keep, forced);
    }
    if (r->sample->index != s->sample) {
        s->sample = r->sample->index;
        s->n_seen = 0;
    }
    for (int i = 0; i < s->n_seen; i++) {
        const skv_eval_config *o = s->seen[i].cfg;
        if (s->seen[i].hash != r->selection_hash || !strcmp(o->policy, c->policy) ||
            o->keep_frac != c->keep_frac || o->protocol != c->protocol ||
            o->positions != c->positions)
            continue;
        snprintf(key, sizeof key, "same %s %s %g %s", o->policy, c->policy, c->keep_frac, proto);
        if (first_warning(s, key))
            fprintf(stderr,
                    "sparsekv eval: warning: %s and %s kept the same entries at keep %g (%s "
                    "protocol, sample %d): the configuration does not tell them apart; raise "
                    "--keep or lower --window/--window-keep\n",
                    o->policy, c->policy, c->keep_frac, proto, r->sample->index);
        break;
    }
    if (s->n_seen < 512) {
        s->seen[s->n_seen].cfg = c;
        s->seen[s->n_seen++].hash = r->selection_hash;
    }
}

/* Writes one results.jsonl row (prefill result r, else decode result d) as one whole line,
 * flushed: an interrupted run leaves only complete lines. */
static skv_status write_row(sink *s, const skv_eval_result *r, const skv_eval_decode_result *d,
                            skv_err *err) {
    char *line = NULL;
    size_t len = 0;
    FILE *m = open_memstream(&line, &len);
    if (!m) return skv_err_set(err, SKV_ERR_NOMEM, "out of memory");
    if (r)
        skv_eval_write_result(m, s->st, r);
    else
        skv_eval_write_decode(m, s->st, d);
    if (fclose(m) != 0) {
        free(line);
        return skv_err_set(err, SKV_ERR_NOMEM, "out of memory");
    }
    errno = 0;
    bool ok = fwrite(line, 1, len, s->f) == len && fflush(s->f) == 0;
    free(line);
    if (!ok || ferror(s->f))
        return skv_err_set(err, SKV_ERR_IO, "error writing %s: %s", s->path,
                           strerror(errno ? errno : EIO));
    return SKV_OK;
}

static skv_status on_result(void *user, const skv_eval_result *r, skv_err *err) {
    sink *s = user;
    skv_status st = write_row(s, r, NULL, err);
    if (st) return st;
    check_degenerate(s, r);
    if (r->cfg->keep_frac == 1.0) {
        /* a control only when the policy really kept everything (PyramidKV's rule does not) */
        bool full = r->kept != NULL;
        for (int i = 0; full && i < r->n_layer * r->n_head_kv; i++) full = r->kept[i] == r->T;
        if (!full) {
            s->not_full++;
            if (!strstr(s->not_full_policies, r->cfg->policy) &&
                strlen(s->not_full_policies) + strlen(r->cfg->policy) + 3 <
                    sizeof s->not_full_policies) {
                if (s->not_full_policies[0]) strcat(s->not_full_policies, ", ");
                strcat(s->not_full_policies, r->cfg->policy);
            }
        } else {
            bool bad = r->greedy_match != s->st->greedy;
            if (s->st->task == SKV_EVAL_LM) {
                bad |= r->m.kl_max != 0.0 || r->m.n_same_top != r->m.n_tokens ||
                       r->m.ln_ppl_ratio != 0.0;
                if (!(r->m.kl_max <= s->worst_control_kl)) s->worst_control_kl = r->m.kl_max;
            } else {
                bad |= r->correct != r->ref_correct;
            }
            s->bad_controls += bad;
        }
    }
    s->prog->done++;
    progress_show(s->prog, false, false);
    return SKV_OK;
}

/* ---- shared with eval-merge ---------------------------------------------------------------- */

/* The figures a run draws (docs/EVAL.md). */
static const char *const FIGURES[] = {"kl_vs_keep",      "top1_vs_keep",      "ppl_vs_keep",
                                      "greedy_vs_keep",  "passkey_vs_keep",   "kl_vs_budget",
                                      "entries_vs_step", "accuracy_vs_depth", NULL};

static bool have_gnuplot(void) {
    return system("command -v gnuplot >/dev/null 2>&1") == 0;
}

/* What a gnuplot run left: its messages (the figure marks taken out) and which figures it
 * finished. */
typedef struct gnuplot_run {
    char log[8192];
    size_t log_len;
    bool drawn[sizeof FIGURES / sizeof FIGURES[0]];
} gnuplot_run;

/* One line of gnuplot's output: a figure mark (plots.gp prints one after each whole figure
 * when skv_marks is set) or a message kept for the user. */
static void gnuplot_line(gnuplot_run *g, const char *line, size_t len) {
    static const char mark[] = "sparsekv-drawn: ";
    if (len >= sizeof mark - 1 && !memcmp(line, mark, sizeof mark - 1)) {
        const char *name = line + sizeof mark - 1;
        size_t n = len - (sizeof mark - 1);
        for (int i = 0; FIGURES[i]; i++)
            if (strlen(FIGURES[i]) == n && !memcmp(FIGURES[i], name, n)) g->drawn[i] = true;
        return;
    }
    if (len == 0 || g->log_len + len + 2 > sizeof g->log) return;
    memcpy(g->log + g->log_len, line, len);
    g->log_len += len;
    g->log[g->log_len++] = '\n';
    g->log[g->log_len] = 0;
}

/* Runs gnuplot plots.gp inside dir, its output captured in g; false when it failed. The
 * figures go to NAME.png.tmp / NAME.svg.tmp and are renamed into place when whole: all of
 * them after a clean run, the ones marked finished after a failed one. */
static bool run_gnuplot(const char *dir, gnuplot_run *g) {
    memset(g, 0, sizeof *g);
    for (int i = 0; FIGURES[i]; i++) /* gnuplot follows links: none stays where it writes */
        for (int k = 0; k < 2; k++) {
            char tmp[4300];
            snprintf(tmp, sizeof tmp, "%s/%s.%s.tmp", dir, FIGURES[i], k ? "svg" : "png");
            unlink(tmp);
        }
    fflush(stdout);
    fflush(stderr);
    int fd[2];
    if (pipe(fd) != 0) return false;
    pid_t pid = fork();
    if (pid < 0) {
        close(fd[0]);
        close(fd[1]);
        return false;
    }
    if (pid == 0) {
        close(fd[0]);
        if (chdir(dir) != 0) _exit(127);
        /* our stdout carries the summary: gnuplot's output is read through the pipe */
        if (dup2(fd[1], STDOUT_FILENO) < 0 || dup2(fd[1], STDERR_FILENO) < 0) _exit(127);
        close(fd[1]);
        execlp("gnuplot", "gnuplot", "-e", "out_suffix='.tmp'; skv_marks=1", "plots.gp",
               (char *)NULL);
        _exit(127);
    }
    close(fd[1]);
    char buf[4096], line[1024];
    size_t ll = 0;
    for (;;) {
        ssize_t n = read(fd[0], buf, sizeof buf);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) break;
        for (ssize_t i = 0; i < n; i++) {
            if (buf[i] == '\n') {
                gnuplot_line(g, line, ll);
                ll = 0;
            } else if (ll < sizeof line - 1) {
                line[ll++] = buf[i];
            }
        }
    }
    if (ll) gnuplot_line(g, line, ll);
    close(fd[0]);
    int status;
    bool ok = true;
    while (waitpid(pid, &status, 0) < 0)
        if (errno != EINTR) {
            ok = false;
            break;
        }
    ok = ok && WIFEXITED(status) && WEXITSTATUS(status) == 0;
    for (int i = 0; FIGURES[i]; i++) {
        bool keep = ok || g->drawn[i];
        g->drawn[i] = false;
        for (int k = 0; k < 2; k++) {
            char from[4300], to[4200];
            snprintf(to, sizeof to, "%s/%s.%s", dir, FIGURES[i], k ? "svg" : "png");
            snprintf(from, sizeof from, "%s.tmp", to);
            if (access(from, F_OK) != 0) {
                keep = false;
                continue;
            }
            if (!keep || rename(from, to) != 0) {
                unlink(from);
                if (keep) ok = false;
                keep = false;
            }
        }
        g->drawn[i] = keep;
    }
    return ok;
}

/* gnuplot's messages, each line labelled as gnuplot's. */
static void print_gnuplot_log(const char *cmd, const gnuplot_run *g) {
    for (const char *l = g->log; *l;) {
        const char *e = strchr(l, '\n');
        fprintf(stderr, "sparsekv %s: gnuplot: %.*s\n", cmd, (int)(e - l), l);
        l = e + 1;
    }
}

/* "kl_vs_keep, top1_vs_keep" for the figures g holds (empty when none). */
static void drawn_list(const gnuplot_run *g, char *out, size_t size) {
    size_t o = 0;
    out[0] = 0;
    for (int i = 0; FIGURES[i] && o < size; i++)
        if (g->drawn[i])
            o += (size_t)snprintf(out + o, size - o, "%s%s", o ? ", " : "", FIGURES[i]);
}

/* Reports from rows (already checked) into out, plots, summary on stdout. Shared with
 * cmd_eval_merge.c. Returns the exit status. */
int cmd_eval_finish(const char *cmd, const skv_eval_rows *rows, const char *out, bool quiet,
                    const skv_eval_labels *labels);
int cmd_eval_finish(const char *cmd, const skv_eval_rows *rows, const char *out, bool quiet,
                    const skv_eval_labels *labels) {
    skv_err err = {0};
    char *md = NULL;
    bool decoding = rows->rows[0].decode;
    if (decoding ? skv_eval_write_decode_reports(rows, out, labels, &md, &err)
                 : skv_eval_write_reports_labeled(rows, out, labels, &md, &err) ||
                       skv_eval_write_depth_figure(rows, out, labels, &err)) {
        cli_error(cmd, "%s", err.msg);
        return 1;
    }
    gnuplot_run g;
    char drawn[512];
    if (!have_gnuplot()) {
        fprintf(stderr,
                "sparsekv %s: gnuplot is not installed: no plots drawn (plot_data.dat "
                "and plots.gp are in %s; run `gnuplot plots.gp` there later)\n",
                cmd, out);
    } else if (!run_gnuplot(out, &g)) {
        /* the measurements are whole: a figure that could not be drawn is a warning, with
         * gnuplot's own words labelled as such, not a failed run */
        drawn_list(&g, drawn, sizeof drawn);
        fprintf(stderr,
                "sparsekv %s: warning: gnuplot failed on %s/plots.gp: %s%s%s (the results and "
                "summaries are complete; once fixed, run `gnuplot plots.gp` in %s)\n",
                cmd, out, drawn[0] ? "only " : "no figures drawn", drawn, drawn[0] ? " drawn" : "",
                out);
        print_gnuplot_log(cmd, &g);
    } else {
        print_gnuplot_log(cmd, &g); /* warnings of a run that drew everything */
        drawn_list(&g, drawn, sizeof drawn);
        if (!quiet && drawn[0])
            fprintf(stderr, "sparsekv %s: plots in %s (%s.png/.svg)\n", cmd, out, drawn);
    }
    /* a retrieval task the model fails with its full cache measures nothing about compression */
    bool task = false, ref_any = false;
    for (int i = 0; !decoding && i < rows->n; i++) {
        task |= rows->rows[i].task != SKV_EVAL_LM;
        ref_any |= rows->rows[i].task != SKV_EVAL_LM && rows->rows[i].ref_correct > 0;
    }
    if (task && !ref_any)
        fprintf(stderr,
                "sparsekv %s: note: the model answers no prompt correctly even with its full "
                "cache (dense accuracy 0): the compressed caches' accuracies say nothing about "
                "compression (models/retrieval.gguf is trained for these tasks)\n",
                cmd);
    fputs(md, stdout);
    fflush(stdout);
    free(md);
    return 0;
}

/* ---- decoding-time mode (--budget) ---------------------------------------------------------- */

/* One decoding-time row, written like on_result's: whole, flushed. */
static skv_status on_decode(void *user, const skv_eval_decode_result *r, skv_err *err) {
    sink *s = user;
    skv_status st = write_row(s, NULL, r, err);
    if (st) return st;
    /* a budget of at least the sample never cuts: the run must equal the full cache's */
    const skv_eval_sample *smp = r->sample;
    if (r->cfg->budget >= smp->n_prefix + smp->n_window + smp->n_cont) {
        if (r->m.kl_max != 0.0 || r->cuts != 0) s->bad_controls++;
        if (!(r->m.kl_max <= s->worst_control_kl)) s->worst_control_kl = r->m.kl_max;
    }
    s->prog->done++;
    progress_show(s->prog, false, false);
    return SKV_OK;
}

/* ---- main ---------------------------------------------------------------------------------- */

#define MAX_ITEMS 64

/* ---- output directory: clobber refusal, resume ------------------------------------------- */

/* true when dir exists and holds anything */
static bool dir_nonempty(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return errno != ENOENT && errno != ENOTDIR; /* not a directory: mkdirs says so */
    bool any = false;
    struct dirent *e;
    while (!any && (e = readdir(d)) != NULL)
        any = strcmp(e->d_name, ".") && strcmp(e->d_name, "..");
    closedir(d);
    return any;
}

/* The files a run writes into --out besides the figures. */
static const char *const OUTPUT_FILES[] = {
    "results.jsonl", "summary.csv", "summary.md",   "timing.csv",     "plot_data.dat",
    "plots.gp",      "run.json",    "decode.jsonl", "depth_data.dat", NULL};

/* --overwrite: removes what a previous run wrote (only the names eval writes), so no stale
 * summary or figure stays beside the new results. Shared with eval-merge. */
bool cmd_eval_remove_outputs(const char *dir);
bool cmd_eval_remove_outputs(const char *dir) {
    const char *const *files = OUTPUT_FILES;
    char p[4200];
    for (int t = 0; t < 2; t++) {
        const char *tmp = t ? ".tmp" : "";
        for (int i = 0; files[i]; i++) {
            snprintf(p, sizeof p, "%s/%s%s", dir, files[i], tmp);
            if (unlink(p) != 0 && errno != ENOENT) return false;
        }
        for (int i = 0; FIGURES[i]; i++)
            for (int k = 0; k < 2; k++) {
                snprintf(p, sizeof p, "%s/%s.%s%s", dir, FIGURES[i], k ? "svg" : "png", tmp);
                if (unlink(p) != 0 && errno != ENOENT) return false;
            }
    }
    return true;
}

/* The name of the output in dir that path is (the same file), or NULL: a --data file there
 * would be replaced by the run's results (the figures are no JSONL: not looked at). */
static const char *output_named(const char *dir, const char *path) {
    char p[4200];
    for (int i = 0; OUTPUT_FILES[i]; i++) {
        snprintf(p, sizeof p, "%s/%s", dir, OUTPUT_FILES[i]);
        if (cli_same_file(p, path)) return OUTPUT_FILES[i];
    }
    return NULL;
}

/* Cuts a partial last line (no newline: the run was killed while writing it) off path.
 * *dropped = bytes removed. False with errno on an I/O error; a missing file is empty. */
static bool truncate_partial(const char *path, long long *dropped) {
    *dropped = 0;
    int fd = open(path, O_RDWR);
    if (fd < 0) return errno == ENOENT;
    struct stat sb;
    if (fstat(fd, &sb) != 0) {
        close(fd);
        return false;
    }
    off_t keep = 0;
    char buf[65536];
    for (off_t end = sb.st_size; end > 0 && keep == 0;) {
        off_t start = end > (off_t)sizeof buf ? end - (off_t)sizeof buf : 0;
        ssize_t n = pread(fd, buf, (size_t)(end - start), start);
        if (n != end - start) {
            close(fd);
            if (n >= 0) errno = EIO;
            return false;
        }
        for (ssize_t j = n - 1; j >= 0; j--)
            if (buf[j] == '\n') {
                keep = start + j + 1;
                break;
            }
        end = start;
    }
    if (keep < sb.st_size && ftruncate(fd, keep) != 0) {
        close(fd);
        return false;
    }
    *dropped = (long long)(sb.st_size - keep);
    return close(fd) == 0;
}

static int eval_main(int argc, char **argv);

/* `--resume DIR` alone: the directory the recorded command was typed in (run.json "cwd"), or
 * NULL. Its relative -m / --data paths are taken from there. */
static const char *replay_cwd;

/* A relative path of the replayed command, joined to the directory the run started in when it
 * is readable there; else as it is (relative to here, as before run.json held "cwd"). */
static const char *replayed_path(const char *p, char *buf, size_t size) {
    if (!p || !replay_cwd || p[0] == '/') return p;
    int n = snprintf(buf, size, "%s/%s", replay_cwd, p);
    if (n < 0 || (size_t)n >= size || access(buf, R_OK) != 0) return p;
    return buf;
}

/* p made absolute (malloc'd, NULL when out of memory): run.json's model and data paths. */
static char *absolute_path(const char *p) {
    char *r = realpath(p, NULL);
    return r ? r : strdup(p);
}

/* `eval --resume DIR` alone (or with -q / -t N): the arguments recorded in DIR/run.json. */
int cmd_eval(int argc, char **argv) {
    const char *resume = NULL;
    bool alone = true;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--resume") && i + 1 < argc)
            resume = argv[++i];
        else if (!strncmp(a, "--resume=", 9))
            resume = a + 9;
        else if (!strcmp(a, "-t") && i + 1 < argc)
            i++;
        else if (strcmp(a, "-q") && strcmp(a, "--quiet") && strncmp(a, "--threads=", 10))
            alone = false;
    }
    if (!resume || !alone) return eval_main(argc, argv);
    char path[4200];
    snprintf(path, sizeof path, "%s/run.json", resume);
    skv_eval_runinfo rec;
    skv_err err = {0};
    if (skv_eval_runinfo_read(path, &rec, &err)) {
        cli_error(CMD, "cannot resume %s: %s", resume, err.msg);
        return 2;
    }
    if (rec.n_command < 1) {
        cli_error(CMD, "cannot resume %s: %s records no command", resume, path);
        skv_eval_runinfo_free(&rec);
        return 2;
    }
    /* an older run.json: its relative paths hold only from the directory the run started in,
     * which it does not record */
    const char *inputs[2] = {rec.model, rec.data}, *what[2] = {"model", "data file"};
    for (int i = 0; !rec.cwd && i < 2; i++) {
        const char *p = inputs[i];
        if (p && *p && *p != '/' && access(p, R_OK) != 0) {
            cli_error(CMD,
                      "cannot resume %s: its run.json names the %s by the relative path '%s', "
                      "which is not found from this directory, and does not record the "
                      "directory the run was started from (an older run.json): resume from "
                      "there, or give the run's arguments again with paths that work here",
                      resume, what[i], p);
            skv_eval_runinfo_free(&rec);
            return 2;
        }
    }
    char **av = calloc((size_t)(rec.n_command + argc + 1), sizeof *av);
    if (!av) {
        skv_eval_runinfo_free(&rec);
        cli_error(CMD, "out of memory");
        return 1;
    }
    int n = 0;
    av[n++] = argv[0];
    /* the recorded options, less the ones that name the output or the machine */
    for (int i = 1; i < rec.n_command; i++) {
        const char *a = rec.command[i];
        /* "--keep=0.1" carries its value; the output, the machine and help are dropped */
        bool joined = !strncmp(a, "--", 2) && strchr(a, '=');
        bool flag = joined || !strcmp(a, "-q") || !strcmp(a, "--quiet") ||
                    !strcmp(a, "--overwrite") || !strcmp(a, "-h") || !strcmp(a, "--help");
        bool drop = joined ? !strncmp(a, "--out=", 6) || !strncmp(a, "--resume=", 9) ||
                                 !strncmp(a, "--threads=", 10)
                    : flag ? strcmp(a, "-h") && strcmp(a, "--help")
                           : !strcmp(a, "--out") || !strcmp(a, "--resume") || !strcmp(a, "-t") ||
                                 !strcmp(a, "--threads");
        if (!flag && i + 1 < rec.n_command) {
            if (!drop) av[n++] = rec.command[i], av[n++] = rec.command[i + 1];
            i++;
        } else if (!drop) {
            av[n++] = rec.command[i];
        }
    }
    for (int i = 1; i < argc; i++) av[n++] = argv[i];
    replay_cwd = rec.cwd;
    int rc = eval_main(n, av);
    replay_cwd = NULL;
    free(av);
    skv_eval_runinfo_free(&rec);
    return rc;
}

static int eval_main(int argc, char **argv) {
    const char *model_arg = NULL, *data = NULL, *out = "eval-out";
    const char *resume = NULL;
    bool overwrite = false, out_given = false;
    /* default: every built-in row of the registry */
    char all_policies[1024] = "";
    for (int i = 0; i < skv_policy_count(); i++) {
        skv_policy_about a;
        if (skv_policy_describe(i, &a, NULL) || !a.builtin) continue;
        size_t len = strlen(all_policies);
        snprintf(all_policies + len, sizeof all_policies - len, "%s%s", len ? "," : "", a.name);
    }
    const char *policies_s = all_policies;
    const char *keep_s = "0.1,0.25,0.5,1.0", *protocols_s = "seed,engine";
    const char *positions_s = "original", *depths_s = "0.1,0.5,0.9";
    long seeds = 5, samples = -1, greedy = 32, threads = -1, passkey_tokens = 0;
    long shard_k = 0, shard_n = 1;
    bool quiet = false, passkey = false;
    int task_kind = 0; /* --task kv / multikey (eval/tasks.c): scored like passkey */
    skv_eval_label label_items[MAX_ITEMS];
    int n_labels = 0;
    skv_eval_labels labels = {label_items, 0};
    skv_eval_split split = {0, 32, 64, NULL};
    skv_eval_settings st;
    skv_eval_settings_default(&st);
    long sinks = st.sinks, kernel = st.kernel, window_keep = st.window_keep;
    const char *budgets_s = NULL; /* --budget LIST: decoding-time mode */
    long compress_every = 32;     /* --compress-every K */

    enum {
        O_DATA = CLI_LONG,
        O_OUT,
        O_RESUME,
        O_POLICIES,
        O_LABEL,
        O_KEEP,
        O_PROTOCOLS,
        O_POSITIONS,
        O_DEPTHS,
        O_SEEDS,
        O_SAMPLES,
        O_GREEDY,
        O_PASSKEY_TOKENS,
        O_SINKS,
        O_KERNEL,
        O_WINDOW_KEEP,
        O_BUDGET,
        O_COMPRESS_EVERY,
        O_PREFIX,
        O_WINDOW,
        O_CONTINUATION,
        O_POOLING,
        O_TASK,
        O_KV_TYPE,
        O_SHARD,
        O_OVERWRITE,
        O_CHAT_TEMPLATE,
        O_CTX,
    };
    /* the same spellings as compress/generate: --policy = --policies, --protocol =
     * --protocols, --pool = --pooling, --max-cache = --budget (a list option takes one value) */
    static const cli_opt opts[] = {
        {"help", 'h', false, NULL, false},
        {"quiet", 'q', false, NULL, false},
        {"model", 'm', true, NULL, false},
        {"threads", 't', true, NULL, false},
        {"overwrite", O_OVERWRITE, false, NULL, false},
        {"data", O_DATA, true, NULL, false},
        {"out", O_OUT, true, NULL, false},
        {"resume", O_RESUME, true, NULL, false},
        {"policies", O_POLICIES, true, "policy", false},
        {"label", O_LABEL, true, NULL, true},
        {"keep", O_KEEP, true, NULL, false},
        {"protocols", O_PROTOCOLS, true, "protocol", false},
        {"positions", O_POSITIONS, true, NULL, false},
        {"depths", O_DEPTHS, true, "depth", false},
        {"seeds", O_SEEDS, true, NULL, false},
        {"samples", O_SAMPLES, true, NULL, false},
        {"greedy", O_GREEDY, true, NULL, false},
        {"passkey-tokens", O_PASSKEY_TOKENS, true, NULL, false},
        {"sinks", O_SINKS, true, NULL, false},
        {"kernel", O_KERNEL, true, NULL, false},
        {"window-keep", O_WINDOW_KEEP, true, NULL, false},
        {"budget", O_BUDGET, true, "max-cache", false},
        {"compress-every", O_COMPRESS_EVERY, true, NULL, false},
        {"prefix", O_PREFIX, true, NULL, false},
        {"window", O_WINDOW, true, NULL, false},
        {"continuation", O_CONTINUATION, true, NULL, false},
        {"pooling", O_POOLING, true, "pool", false},
        {"task", O_TASK, true, NULL, false},
        {"kv-type", O_KV_TYPE, true, NULL, false},
        {"shard", O_SHARD, true, NULL, false},
        {"chat-template", O_CHAT_TEMPLATE, true, NULL, false},
        {"ctx", O_CTX, true, NULL, false},
        {0},
    };
    cli_args args;
    if (!cli_args_init(&args, CMD, argc, argv, opts, NULL, NULL)) return 2;
    const char *v;
    for (int key; (key = cli_args_next(&args, &v)) != CLI_DONE;) {
        bool ok = true;
        switch (key) {
        case CLI_FAIL:
            return 2;
        case CLI_OPERAND:
            cli_args_extra(&args, v);
            return 2;
        case 'h':
            usage(stdout);
            return 0;
        case 'q':
            quiet = true;
            break;
        case O_OVERWRITE:
            overwrite = true;
            break;
        case 'm':
            model_arg = v;
            break;
        case O_DATA:
            data = v;
            break;
        case O_CHAT_TEMPLATE: {
            skv_err cerr = {0};
            const char *name = skv_chat_template_name(NULL, v, &cerr);
            if (!name || strcmp(name, v) != 0) {
                cli_error(CMD,
                          "invalid value '%s' for --chat-template (llama3, chatml, phi3 or "
                          "mistral)",
                          v);
                return 2;
            }
            split.chat_template = v;
            break;
        }
        case O_OUT:
            out = v, out_given = true;
            break;
        case O_RESUME:
            resume = v;
            break;
        case O_POLICIES:
            policies_s = v;
            break;
        case O_LABEL: {
            char why[512];
            if (n_labels == MAX_ITEMS ||
                !skv_eval_label_parse(v, &label_items[n_labels], why, sizeof why)) {
                cli_error(CMD, "bad --label '%s': %s", v,
                          n_labels == MAX_ITEMS ? "too many labels" : why);
                return 2;
            }
            n_labels++;
            labels.n = n_labels;
            break;
        }
        case O_KEEP:
            keep_s = v;
            break;
        case O_PROTOCOLS:
            protocols_s = v;
            break;
        case O_POSITIONS:
            positions_s = v;
            break;
        case O_DEPTHS:
            depths_s = v;
            break;
        case O_SEEDS:
            ok = cli_parse_int(v, 1, 256, &seeds);
            break;
        case O_SAMPLES:
            ok = cli_parse_int(v, 1, 1000000, &samples);
            break;
        case O_GREEDY:
            ok = cli_parse_int(v, 0, 1 << 20, &greedy);
            break;
        case 't':
            if (!cli_parse_threads(CMD, v, &threads)) return 2;
            break;
        case O_PASSKEY_TOKENS:
            ok = cli_parse_int(v, 2, 1 << 24, &passkey_tokens);
            break;
        case O_SINKS:
            ok = cli_parse_int(v, 0, 1 << 24, &sinks);
            break;
        case O_KERNEL:
            ok = cli_parse_int(v, 1, 1 << 16, &kernel);
            break;
        case O_WINDOW_KEEP:
            ok = cli_parse_int(v, 0, 1 << 24, &window_keep);
            break;
        case O_BUDGET:
            budgets_s = v;
            break;
        case O_COMPRESS_EVERY:
            ok = cli_parse_int(v, 1, 1 << 24, &compress_every);
            break;
        case O_PREFIX:
            ok = parse_part(v, true, &split.prefix);
            break;
        case O_WINDOW:
            ok = parse_part(v, false, &split.window);
            break;
        case O_CONTINUATION:
            ok = parse_part(v, false, &split.cont);
            break;
        case O_POOLING:
            if (!strcmp(v, "max"))
                st.pooling = SKV_POOL_MAX;
            else if (!strcmp(v, "avg"))
                st.pooling = SKV_POOL_AVG;
            else
                ok = false;
            break;
        case O_TASK:
            task_kind = 0;
            if (!strcmp(v, "passkey"))
                passkey = true;
            else if (!strcmp(v, "kv") || !strcmp(v, "multikey"))
                passkey = true, task_kind = !strcmp(v, "kv") ? SKV_TASK_KV : SKV_TASK_MULTIKEY;
            else if (strcmp(v, "lm"))
                ok = false;
            break;
        case O_CTX:
            if (!cli_parse_ctx(CMD, v, &st.n_ctx)) return 2;
            break;
        case O_KV_TYPE:
            ok = skv_type_from_name(v, &st.kv_type) &&
                 (st.kv_type == SKV_TYPE_F32 || st.kv_type == SKV_TYPE_F16 ||
                  st.kv_type == SKV_TYPE_Q8_0);
            break;
        case O_SHARD: {
            char *slash = strchr(v, '/');
            char buf[64];
            ok = slash && (size_t)(slash - v) < sizeof buf;
            if (ok) {
                memcpy(buf, v, (size_t)(slash - v));
                buf[slash - v] = 0;
                ok = cli_parse_int(buf, 0, 1000000, &shard_k) &&
                     cli_parse_int(slash + 1, 1, 1000000, &shard_n) && shard_k < shard_n;
            }
            if (!ok) {
                cli_error(CMD, "bad --shard '%s': expected i/n with 0 <= i < n", v);
                return 2;
            }
            break;
        }
        }
        if (!ok) {
            cli_error(CMD, "bad value for %s: '%s' (see --help)", cli_args_spelling(&args), v);
            return 2;
        }
    }
    char model_buf[4200], data_buf[4200];
    const char *model_typed = model_arg; /* the rows' "model": the same in a resumed run's */
    model_arg = replayed_path(model_arg, model_buf, sizeof model_buf);
    data = replayed_path(data, data_buf, sizeof data_buf);
    const char *clash = data && out ? output_named(out, data) : NULL;
    if (clash) {
        cli_error(CMD, "--data %s is %s/%s, which this run writes: copy it elsewhere first", data,
                  out, clash);
        return 2;
    }
    /* options that would be ignored are refused */
    if (!cli_args_requires(&args, O_COMPRESS_EVERY, O_BUDGET, NULL) ||
        !cli_args_requires(&args, O_CHAT_TEMPLATE, O_DATA, "it formats the data's \"messages\""))
        return 2;
    if (!passkey) {
        if (!cli_args_requires(&args, O_DEPTHS, O_TASK, "needles exist in the retrieval tasks") ||
            !cli_args_requires(&args, O_PASSKEY_TOKENS, O_TASK,
                               "it sets the length of a retrieval prompt"))
            return 2;
        if (cli_args_given(&args, O_DEPTHS) || cli_args_given(&args, O_PASSKEY_TOKENS)) {
            cli_error(CMD, "--depths and --passkey-tokens apply to --task passkey, kv or multikey");
            return 2;
        }
    }
    if (passkey && data) {
        cli_error(CMD, "--task passkey makes its own prompts: drop --data");
        return 2;
    }
    if (passkey && (cli_args_given(&args, O_PREFIX) || cli_args_given(&args, O_CONTINUATION))) {
        cli_error(CMD, "--prefix and --continuation split the lm task's samples: a retrieval "
                       "task's prompt is all prefix (--passkey-tokens sets its length, --greedy "
                       "the answer's)");
        return 2;
    }
    st.task = !passkey                         ? SKV_EVAL_LM
              : task_kind == SKV_TASK_KV       ? SKV_EVAL_KV
              : task_kind == SKV_TASK_MULTIKEY ? SKV_EVAL_MULTIKEY
                                               : SKV_EVAL_PASSKEY;
    st.greedy = (int)greedy;
    st.sinks = (int)sinks;
    st.kernel = (int)kernel;
    st.window_keep = (int)window_keep;
    if (passkey && greedy < 1) {
        cli_error(CMD, "--task passkey needs --greedy >= 1 (the answer is decoded greedily)");
        return 2;
    }

    /* lists */
    char copy[4096], *items[MAX_ITEMS];
    const char *policies[MAX_ITEMS];
    int n_policies = 0;
    int n = split_list(policies_s, copy, sizeof copy, items, MAX_ITEMS);
    if (n < 1) {
        cli_error(CMD, "bad --policies '%s': expected a comma-separated list", policies_s);
        return 2;
    }
    for (int i = 0; i < n; i++) {
        const char *c = skv_policy_canonical(items[i]);
        if (!c) {
            cli_error(CMD, "unknown policy '%s' in --policies (known: %s)", items[i],
                      cli_policy_names());
            return 2;
        }
        bool dup = false;
        for (int k = 0; k < n_policies; k++) dup |= !strcmp(policies[k], c);
        if (!dup) policies[n_policies++] = c;
    }
    /* --budget LIST: decoding-time mode, over the decode-capable policies */
    int budgets[MAX_ITEMS], n_budgets = 0;
    const bool decoding = budgets_s != NULL;
    if (decoding) {
        static const int prefill_only[] = {O_KEEP, O_PROTOCOLS, O_POSITIONS, O_GREEDY, O_TASK};
        for (size_t k = 0; k < sizeof prefill_only / sizeof prefill_only[0]; k++) {
            if (cli_args_given(&args, prefill_only[k])) {
                cli_error(CMD,
                          "%s does not apply to --budget (decoding-time runs teacher-force the "
                          "lm task with rerotated positions under a fixed budget)",
                          cli_args_name(&args, prefill_only[k]));
                return 2;
            }
        }
        n = split_list(budgets_s, copy, sizeof copy, items, MAX_ITEMS);
        for (int i = 0; i < n; i++) {
            long b;
            if (!cli_parse_int(items[i], 1, 1 << 24, &b)) {
                cli_error(CMD, "bad budget '%s' in --budget: entries per kv head, >= 1", items[i]);
                return 2;
            }
            bool dup = false;
            for (int k = 0; k < n_budgets; k++) dup |= budgets[k] == (int)b;
            if (!dup) budgets[n_budgets++] = (int)b;
        }
        if (n < 1) {
            cli_error(CMD, "bad --budget '%s': expected a comma-separated list", budgets_s);
            return 2;
        }
        int kept = 0;
        for (int i = 0; i < n_policies; i++) {
            skv_policy_about a = {0};
            for (int k = 0; k < skv_policy_count(); k++)
                if (!skv_policy_describe(k, &a, NULL) && !strcmp(a.name, policies[i])) break;
            if (a.decode) {
                policies[kept++] = policies[i];
            } else if (cli_args_given(&args, O_POLICIES)) {
                cli_error(CMD,
                          "%s does not run under a budget (`sparsekv policies` lists the decode "
                          "ones)",
                          policies[i]);
                return 2;
            }
        }
        n_policies = kept;
        if (n_policies == 0) {
            cli_error(CMD, "no decode-capable policy to run under --budget");
            return 2;
        }
        /* the budget keeps the last min(W, K) tokens' queries as its window (the library's
         * rule, skv_context_set_budget) */
        const double kept_window =
            split.window < (double)compress_every ? split.window : (double)compress_every;
        for (int i = 0; i < n_budgets; i++) {
            if (split.window >= 1 && budgets[i] <= kept_window) {
                cli_error(CMD,
                          "budget %d is not larger than the window it keeps (%g tokens, the "
                          "smaller of --window and --compress-every, always kept): every policy "
                          "would keep the same entries; raise --budget, or lower the smaller "
                          "of the two",
                          budgets[i], kept_window);
                return 2;
            }
        }
    }

    /* a policy parameter that no evaluated policy reads would be ignored */
    static const struct {
        int key;
        const char *field;
    } reads[] = {{O_SEEDS, "seed"},
                 {O_SINKS, "sinks"},
                 {O_POOLING, "pooling"},
                 {O_KERNEL, "kernel"},
                 {O_WINDOW_KEEP, "window_keep"}};
    for (size_t r = 0; r < sizeof reads / sizeof reads[0]; r++) {
        if (!cli_args_given(&args, reads[r].key)) continue;
        bool used = false;
        for (int k = 0; k < n_policies; k++) used |= cli_policy_reads(policies[k], reads[r].field);
        if (!used) {
            cli_error(CMD, "%s applies to none of the policies evaluated (%s)",
                      cli_args_name(&args, reads[r].key), policies_s);
            return 2;
        }
    }
    double keeps[MAX_ITEMS + 1];
    int n_keeps = 0;
    n = split_list(keep_s, copy, sizeof copy, items, MAX_ITEMS);
    if (n < 1) {
        cli_error(CMD, "bad --keep '%s': expected a comma-separated list", keep_s);
        return 2;
    }
    for (int i = 0; i < n; i++) {
        double k;
        if (!cli_parse_double(items[i], 0, 1, &k) || k <= 0) {
            cli_error(CMD, "bad keep fraction '%s' in --keep: must be in (0, 1]", items[i]);
            return 2;
        }
        keeps[n_keeps++] = k;
    }
    keeps[n_keeps++] = 1.0; /* the control row, always */
    qsort(keeps, (size_t)n_keeps, sizeof keeps[0], cmp_double);
    int nk = 0;
    for (int i = 0; i < n_keeps; i++)
        if (nk == 0 || keeps[i] != keeps[nk - 1]) keeps[nk++] = keeps[i];
    n_keeps = nk;
    skv_protocol protocols[2];
    int n_protocols = 0;
    n = split_list(protocols_s, copy, sizeof copy, items, MAX_ITEMS);
    for (int i = 0; i < n; i++) {
        skv_protocol p;
        if (!strcmp(items[i], "seed"))
            p = SKV_PROTOCOL_SEED;
        else if (!strcmp(items[i], "engine"))
            p = SKV_PROTOCOL_ENGINE;
        else {
            cli_error(CMD, "unknown protocol '%s' in --protocols (known: seed, engine)", items[i]);
            return 2;
        }
        bool dup = false;
        for (int k = 0; k < n_protocols; k++) dup |= protocols[k] == p;
        if (!dup) protocols[n_protocols++] = p;
    }
    if (n < 1) {
        cli_error(CMD, "bad --protocols '%s': expected seed, engine or seed,engine", protocols_s);
        return 2;
    }
    skv_position_mode positions[2];
    int n_positions = 0;
    n = split_list(positions_s, copy, sizeof copy, items, MAX_ITEMS);
    for (int i = 0; i < n; i++) {
        skv_position_mode m;
        if (!strcmp(items[i], "original"))
            m = SKV_POSITIONS_ORIGINAL;
        else if (!strcmp(items[i], "rerotate"))
            m = SKV_POSITIONS_REROTATE;
        else {
            cli_error(CMD,
                      "unknown position mode '%s' in --positions (known: original, "
                      "rerotate)",
                      items[i]);
            return 2;
        }
        bool dup = false;
        for (int k = 0; k < n_positions; k++) dup |= positions[k] == m;
        if (!dup) positions[n_positions++] = m;
    }
    if (n < 1) {
        cli_error(CMD, "bad --positions '%s': expected original, rerotate or both", positions_s);
        return 2;
    }
    /* A label for something this run does not evaluate changes nothing: say so. */
    for (int l = 0; l < n_labels; l++) {
        const char *key = label_items[l].key;
        bool used = false;
        for (int k = 0; k < n_policies; k++) {
            const char *canon = skv_policy_canonical(policies[k]);
            used |= !strcmp(key, canon ? canon : policies[k]);
        }
        for (int k = 0; k < n_protocols; k++) used |= !strcmp(key, cli_protocol_name(protocols[k]));
        for (int k = 0; k < n_positions; k++)
            used |= !strcmp(key, cli_positions_name(positions[k]));
        if (!used)
            fprintf(stderr, "sparsekv %s: note: --label %s: this run does not evaluate '%s'\n", CMD,
                    key, key);
    }
    double depths[MAX_ITEMS];
    int n_depths = 0;
    if (passkey) {
        n = split_list(depths_s, copy, sizeof copy, items, MAX_ITEMS);
        if (n < 1) {
            cli_error(CMD, "bad --depths '%s': expected a comma-separated list", depths_s);
            return 2;
        }
        for (int i = 0; i < n; i++)
            if (!cli_parse_double(items[i], 0, 1, &depths[n_depths++])) {
                cli_error(CMD, "bad depth '%s' in --depths: must be in [0, 1]", items[i]);
                return 2;
            }
    }

    /* the output directory: never over a previous run without being told */
    struct stat out_sb;
    if (resume) {
        if (overwrite) {
            cli_error(CMD, "--resume continues a run and --overwrite replaces one: give one");
            return 2;
        }
        if (out_given && strcmp(out, resume)) {
            cli_error(CMD, "--resume %s writes into %s: drop --out %s", resume, resume, out);
            return 2;
        }
        out = resume;
    } else if (stat(out, &out_sb) == 0 && !S_ISDIR(out_sb.st_mode)) {
        cli_error(CMD, "--out %s exists and is not a directory", out);
        return 2;
    } else if (!overwrite && dir_nonempty(out)) {
        cli_error(CMD,
                  "output directory %s is not empty (a previous run?): pass --overwrite to "
                  "replace its results, --resume %s to continue an interrupted run, or choose "
                  "another --out",
                  out, out);
        return 2;
    }
    skv_eval_runinfo prev = {0}, cur = {0};
    if (resume) {
        char rp[4200];
        snprintf(rp, sizeof rp, "%s/run.json", resume);
        skv_err rerr = {0};
        if (skv_eval_runinfo_read(rp, &prev, &rerr)) {
            cli_error(CMD, "cannot resume %s: %s", resume, rerr.msg);
            return 2;
        }
    }

    const char *model_path = cli_model_path(CMD, model_arg);
    if (!model_path) {
        skv_eval_runinfo_free(&prev);
        return 2;
    }
    if (data && access(data, R_OK) != 0) {
        cli_error(CMD, "cannot read data file %s: %s", data, strerror(errno));
        return 2;
    }
    skv_model *model = cli_load_model(CMD, model_path);
    if (!model) {
        skv_eval_runinfo_free(&prev);
        return cli_model_rc;
    }
    st.model_path = model_typed ? model_typed : model_path;
    /* a tiny model loses more to thread hand-offs than it gains (stories260K: 10x slower with
     * 2 threads on a busy machine), so the default is 1 thread below 32 MiB of weights */
    if (threads < 0) threads = skv_model_weight_bytes(model) < ((uint64_t)32 << 20) ? 1 : 0;
    st.n_threads = (int)threads;
    const skv_hparams *hp = skv_model_hparams(model);
    int n_ctx = st.n_ctx > 0 ? st.n_ctx : hp->n_ctx_train;
    cli_warn_ctx(CMD, st.n_ctx, model);
    for (int i = 0; i < n_budgets; i++) {
        if ((long)budgets[i] + compress_every > n_ctx) {
            cli_error(CMD,
                      "--budget %d + --compress-every %ld exceeds %s (%d): the cache holds up "
                      "to budget + every entries per head",
                      budgets[i], compress_every, st.n_ctx > 0 ? "--ctx" : "the model's context",
                      n_ctx);
            skv_model_free(model);
            skv_eval_runinfo_free(&prev);
            return 2;
        }
    }
    /* Sizes taken from metadata are bounded by what the command needs: a file may claim a
     * context of 2^28 tokens, and the default samples and passkey prompts must not follow it. */
    int n_default = n_ctx < EVAL_DEFAULT_MAX_TOKENS ? n_ctx : EVAL_DEFAULT_MAX_TOKENS;
    if (n_default < n_ctx && !quiet && !data && passkey_tokens <= 0) {
        if (passkey) /* the task's prompts fill n_default less the answer's --greedy tokens */
            fprintf(stderr,
                    "sparsekv eval: the model's context is %d tokens; the default prompts are "
                    "%d (--passkey-tokens for longer)\n",
                    n_ctx, n_default - st.greedy);
        else /* generated samples: 7/8 of n_default (below) */
            fprintf(stderr,
                    "sparsekv eval: the model's context is %d tokens; generated samples are %d "
                    "(--data for longer ones of your own)\n",
                    n_ctx, n_default * 7 / 8);
    }
    int rc = 1;
    skv_err err = {0};
    skv_eval_dataset ds = {0};
    skv_eval_config *cfgs = NULL;
    int n_cfgs = 0;
    FILE *rf = NULL;
    skv_eval_rows rows = {0};
    double t_start = skv_time_ms();
    char path[4096];

    /* run.json's record of this run: everything that changes the results, model and data by
     * size and hash (what --resume and eval-merge check) */
    {
        uint64_t msize = 0, mhash = 0, dsize = 0, dhash = 0;
        if (skv_eval_file_hash(model_path, SKV_EVAL_MODEL_HASH_BYTES, &msize, &mhash, &err) ||
            (data && skv_eval_file_hash(data, 0, &dsize, &dhash, &err))) {
            cli_error(CMD, "%s", err.msg);
            rc = 2;
            goto done;
        }
        char keeps_s[2048] = "", depths_l[2048] = "", budgets_l[2048] = "";
        for (int i = 0; i < n_budgets; i++) {
            size_t l = strlen(budgets_l);
            snprintf(budgets_l + l, sizeof budgets_l - l, "%s%d", i ? "," : "", budgets[i]);
        }
        for (int i = 0; i < n_keeps; i++) {
            size_t l = strlen(keeps_s);
            snprintf(keeps_s + l, sizeof keeps_s - l, "%s%.17g", i ? "," : "", keeps[i]);
        }
        for (int i = 0; i < n_depths; i++) {
            size_t l = strlen(depths_l);
            snprintf(depths_l + l, sizeof depths_l - l, "%s%.17g", i ? "," : "", depths[i]);
        }
        char pols[2048] = "", protos[64] = "", poss[64] = "";
        for (int i = 0; i < n_policies; i++) {
            size_t l = strlen(pols);
            snprintf(pols + l, sizeof pols - l, "%s%s", i ? "," : "", policies[i]);
        }
        for (int i = 0; i < n_protocols; i++) {
            size_t l = strlen(protos);
            snprintf(protos + l, sizeof protos - l, "%s%s", i ? "," : "",
                     protocols[i] == SKV_PROTOCOL_ENGINE ? "engine" : "seed");
        }
        for (int i = 0; i < n_positions; i++) {
            size_t l = strlen(poss);
            snprintf(poss + l, sizeof poss - l, "%s%s", i ? "," : "",
                     positions[i] == SKV_POSITIONS_REROTATE ? "rerotate" : "original");
        }
        const char *task_s = skv_eval_task_name(st.task);
        char prefix_s[64];
        if (split.prefix == 0)
            snprintf(prefix_s, sizeof prefix_s, "rest");
        else
            snprintf(prefix_s, sizeof prefix_s, "%.17g", split.prefix);
        skv_err e2 = {0};
        if (skv_eval_runinfo_set(&cur, "version", &e2, "%s", SKV_VERSION) ||
            skv_eval_runinfo_set(&cur, "model_bytes", &e2, "%llu", (unsigned long long)msize) ||
            skv_eval_runinfo_set(&cur, "model_hash", &e2, "%016llx", (unsigned long long)mhash) ||
            skv_eval_runinfo_set(&cur, "data_bytes", &e2, "%llu", (unsigned long long)dsize) ||
            skv_eval_runinfo_set(&cur, "data_hash", &e2, "%016llx",
                                 data ? (unsigned long long)dhash : 0ull) ||
            skv_eval_runinfo_set(&cur, "task", &e2, "%s", task_s) ||
            skv_eval_runinfo_set(&cur, "policies", &e2, "%s", pols) ||
            skv_eval_runinfo_set(&cur, "keep", &e2, "%s", keeps_s) ||
            skv_eval_runinfo_set(&cur, "protocols", &e2, "%s", protos) ||
            skv_eval_runinfo_set(&cur, "positions", &e2, "%s", poss) ||
            skv_eval_runinfo_set(&cur, "seeds", &e2, "%ld", seeds) ||
            skv_eval_runinfo_set(&cur, "samples", &e2, "%ld", samples) ||
            skv_eval_runinfo_set(&cur, "greedy", &e2, "%d", st.greedy) ||
            skv_eval_runinfo_set(&cur, "sinks", &e2, "%d", st.sinks) ||
            skv_eval_runinfo_set(&cur, "kernel", &e2, "%d", st.kernel) ||
            skv_eval_runinfo_set(&cur, "pooling", &e2, "%s",
                                 st.pooling == SKV_POOL_AVG ? "avg" : "max") ||
            skv_eval_runinfo_set(&cur, "window_keep", &e2, "%d", st.window_keep) ||
            skv_eval_runinfo_set(&cur, "kv_type", &e2, "%s", skv_type_name(st.kv_type)) ||
            skv_eval_runinfo_set(&cur, "prefix", &e2, "%s", prefix_s) ||
            skv_eval_runinfo_set(&cur, "window", &e2, "%.17g", split.window) ||
            skv_eval_runinfo_set(&cur, "continuation", &e2, "%.17g", split.cont) ||
            skv_eval_runinfo_set(&cur, "depths", &e2, "%s", depths_l) ||
            skv_eval_runinfo_set(&cur, "passkey_tokens", &e2, "%ld", passkey_tokens) ||
            skv_eval_runinfo_set(&cur, "budget", &e2, "%s", budgets_l) ||
            skv_eval_runinfo_set(&cur, "compress_every", &e2, "%ld", compress_every) ||
            /* results differ in their last bits between kernel levels: a resume or a merge of
             * runs made at different ones is refused (a run from before this field resumes
             * without it) */
            (!(resume && !skv_eval_runinfo_get(&prev, "simd")) &&
             skv_eval_runinfo_set(&cur, "simd", &e2, "%s", cli_simd_kernels())) ||
            (split.chat_template && /* only when given: older runs' run.json lack it */
             skv_eval_runinfo_set(&cur, "chat_template", &e2, "%s", split.chat_template)) ||
            /* the size, when given or when it chooses a LongRoPE model's factors (an older run
             * of such a model, sized per sample, is then refused rather than mixed in) */
            ((st.n_ctx > 0 || hp->rope_scaling == SKV_ROPE_SCALING_LONGROPE) &&
             skv_eval_runinfo_set(&cur, "n_ctx", &e2, "%d", n_ctx))) {
            cli_error(CMD, "%s", e2.msg);
            goto done;
        }
        cur.shard_k = (int)shard_k;
        cur.shard_n = (int)shard_n;
        /* absolute, and the directory the command was typed in: its relative paths then
         * resolve from anywhere (--resume DIR alone); a resumed run keeps its start's */
        char cwd_buf[4096];
        const char *cwd =
            resume && prev.n_command && prev.cwd ? prev.cwd : getcwd(cwd_buf, sizeof cwd_buf);
        cur.model = absolute_path(model_path);
        cur.data = data ? absolute_path(data) : NULL;
        cur.cwd = cwd ? strdup(cwd) : NULL;
        if (!cur.model || (data && !cur.data) || (cwd && !cur.cwd)) {
            cli_error(CMD, "out of memory");
            goto done;
        }
        /* the command: a resumed run keeps the one it started with */
        char *const *cmdv = resume && prev.n_command ? prev.command : argv;
        int cmdn = resume && prev.n_command ? prev.n_command : argc;
        cur.command = calloc((size_t)cmdn + 1, sizeof *cur.command);
        if (!cur.command) {
            cli_error(CMD, "out of memory");
            goto done;
        }
        for (int i = 0; i < cmdn; i++) {
            if (!(cur.command[i] = strdup(cmdv[i]))) {
                cli_error(CMD, "out of memory");
                goto done;
            }
            cur.n_command = i + 1;
        }
    }
    if (resume) {
        const char *field = skv_eval_runinfo_diff(&prev, &cur);
        if (!field && (prev.shard_k != cur.shard_k || prev.shard_n != cur.shard_n)) field = "shard";
        if (field) {
            char a[64], b[64];
            snprintf(a, sizeof a, "%d/%d", prev.shard_k, prev.shard_n);
            snprintf(b, sizeof b, "%d/%d", cur.shard_k, cur.shard_n);
            const char *pv = strcmp(field, "shard") ? skv_eval_runinfo_get(&prev, field) : a;
            const char *cv = strcmp(field, "shard") ? skv_eval_runinfo_get(&cur, field) : b;
            char sa[1024], sb[1024]; /* pv, cv as shown */
            /* every other field that differs, by name: the first is rarely the one changed */
            char others[512] = "";
            size_t ol = 0;
            for (int pass = 0; pass < 2; pass++) {
                const skv_eval_runinfo *x = pass ? &cur : &prev, *y = pass ? &prev : &cur;
                for (int i = 0; i < x->n_config && ol < sizeof others - 64; i++) {
                    const char *k = x->config[i].key, *vy = skv_eval_runinfo_get(y, k);
                    if (!strcmp(k, field) || (vy && !strcmp(vy, x->config[i].value)) ||
                        (pass && vy))
                        continue;
                    ol += (size_t)snprintf(others + ol, sizeof others - ol, "%s'%s'",
                                           ol ? ", " : "; these differ too: ", k);
                }
            }
            if (!strcmp(field, "simd"))
                cli_error(CMD,
                          "cannot resume %s: it ran with the %s kernels, this process has %s "
                          "(results differ in their last bits between them; SKV_SIMD=avx2 or "
                          "scalar, or SKV_NO_AMX=1, selects a narrower level, as `sparsekv info "
                          "--system` shows)%s",
                          resume, pv ? pv : "(none)", cv ? cv : "(none)", others);
            else
                cli_error(CMD,
                          "cannot resume %s: field '%s' differs: the run has '%s', these "
                          "arguments give '%s'%s (resume with the run's arguments, or `--resume "
                          "%s` alone to take them from its run.json)",
                          resume, field, pv ? cli_config_shown(pv, sa, sizeof sa) : "(none)",
                          cv ? cli_config_shown(cv, sb, sizeof sb) : "(none)", others, resume);
            rc = 2;
            goto done;
        }
        cur.resumed = prev.resumed + 1;
    }

    if (passkey) {
        int budget = passkey_tokens > 0 ? (int)passkey_tokens : n_default - st.greedy;
        if (budget + st.greedy > n_ctx) {
            cli_error(CMD, "--passkey-tokens %d + --greedy %d exceed the model's context of %d",
                      budget, st.greedy, n_ctx);
            rc = 2;
            goto done;
        }
        int window =
            split.window >= 1 ? (int)split.window : (int)skv_round_half_even(split.window * budget);
        const skv_vocab *vocab = skv_model_vocab(model);
        int n_s = samples > 0 ? (int)samples : 8;
        skv_status ds_st;
        if (task_kind)
            ds_st =
                skv_eval_task_dataset(vocab, (skv_eval_task_kind)task_kind, n_s, depths, n_depths,
                                      budget, window, (int)shard_k, (int)shard_n, &ds, &err);
        else
            ds_st = skv_eval_passkey_dataset(vocab, n_s, depths, n_depths, budget, window,
                                             (int)shard_k, (int)shard_n, &ds, &err);
        if (ds_st) {
            cli_error(CMD, "%s", err.msg);
            rc = err.status == SKV_ERR_INVALID_ARG ? 2 : 1;
            goto done;
        }
    } else if (data) {
        skv_status s = skv_eval_load_jsonl(data, skv_model_vocab(model), &split, n_ctx, st.greedy,
                                           samples > 0 ? (int)samples : 0, (int)shard_k,
                                           (int)shard_n, &ds, &err);
        if (s) {
            cli_error(CMD, "%s", err.msg);
            /* bad data, or data the model cannot take (no chat template): bad input */
            rc = s == SKV_ERR_FORMAT || s == SKV_ERR_IO || s == SKV_ERR_INVALID_ARG ||
                         s == SKV_ERR_UNSUPPORTED
                     ? 2
                     : 1;
            goto done;
        }
        if (samples > 0 && ds.n_total < samples)
            fprintf(stderr, "sparsekv eval: note: --samples %ld, but %s holds %d sample%s\n",
                    (long)samples, data, ds.n_total, ds.n_total == 1 ? "" : "s");
    } else {
        skv_eval_gen_params gp = {.n_samples = samples > 0 ? (int)samples : 8,
                                  .n_total = n_default * 7 / 8,
                                  .n_threads = st.n_threads,
                                  .kv_type = st.kv_type,
                                  .n_ctx = st.n_ctx};
        if (!quiet)
            fprintf(stderr,
                    "sparsekv eval: generating %d samples of %d tokens (seed i, "
                    "temperature 1)%s\n",
                    gp.n_samples, gp.n_total, shard_n > 1 ? " for this shard" : "");
        if (skv_eval_generate(model, &gp, &split, st.greedy, (int)shard_k, (int)shard_n, &ds,
                              &err)) {
            cli_error(CMD, "%s", err.msg);
            rc = err.status == SKV_ERR_INVALID_ARG ? 2 : 1;
            goto done;
        }
    }
    for (int i = 0; i < ds.n_warnings; i++) fprintf(stderr, "sparsekv eval: %s\n", ds.warnings[i]);
    if (ds.n_skipped)
        fprintf(stderr, "sparsekv eval: %d sample%s skipped (too short or too long)\n",
                ds.n_skipped, ds.n_skipped == 1 ? "" : "s");

    /* nothing to evaluate is a failure, not an empty success (a shard may be empty by
     * construction when there are more shards than samples: that one is fine) */
    if (ds.n == 0 && (ds.n_skipped > 0 || shard_n == 1)) {
        cli_error(CMD, "nothing was evaluated: %s",
                  ds.n_skipped ? "every sample was skipped" : "no samples");
        rc = 2;
        goto done;
    }
    if (decoding ? skv_eval_decode_configs(policies, n_policies, budgets, n_budgets,
                                           (int)compress_every, &cfgs, &n_cfgs, &err)
                 : skv_eval_configs(policies, n_policies, keeps, n_keeps, protocols, n_protocols,
                                    positions, n_positions, (int)seeds, &cfgs, &n_cfgs, &err)) {
        cli_error(CMD, "%s", err.msg);
        rc = 2;
        goto done;
    }
    if (skv_eval_mkdirs(out, &err)) {
        cli_error(CMD, "%s", err.msg);
        goto done;
    }
    if (overwrite && !cmd_eval_remove_outputs(out)) {
        cli_error(CMD, "cannot remove the previous results in %s: %s", out, strerror(errno));
        goto done;
    }
    snprintf(path, sizeof path, "%s/results.jsonl", out);
    /* --resume: the rows already written must be the first rows of this run, in order */
    long long done_rows = 0;
    if (resume) {
        long long dropped = 0;
        if (!truncate_partial(path, &dropped)) {
            cli_error(CMD, "cannot resume %s: %s: %s", resume, path, strerror(errno));
            goto done;
        }
        if (dropped && !quiet)
            fprintf(stderr, "sparsekv eval: dropped a partial last line (%lld bytes) of %s\n",
                    dropped, path);
        if (access(path, F_OK) == 0 && skv_eval_read_results(path, &rows, &err)) {
            cli_error(CMD, "cannot resume %s: %s", resume, err.msg);
            rc = err.status == SKV_ERR_NOMEM ? 1 : 2;
            goto done;
        }
        done_rows = rows.n;
        if (done_rows > (long long)ds.n * n_cfgs) {
            cli_error(CMD, "cannot resume %s: %s holds %lld rows, more than this run's %lld",
                      resume, path, done_rows, (long long)ds.n * n_cfgs);
            rc = 2;
            goto done;
        }
        for (int k = 0; k < rows.n; k++) {
            const skv_eval_row *r = &rows.rows[k];
            const skv_eval_sample *smp = &ds.samples[k / n_cfgs];
            const skv_eval_config *c = &cfgs[k % n_cfgs];
            skv_protocol pr;
            skv_position_mode pm;
            bool same = r->sample == smp->index && r->depth_index == smp->depth_index &&
                        r->config == c->index && !strcmp(r->policy, c->policy) &&
                        r->decode == decoding;
            if (same && decoding)
                same = r->budget == c->budget && r->compress_every == c->compress_every;
            else if (same)
                same = r->keep_frac == c->keep_frac && r->seed == c->seed &&
                       skv_eval_protocol_from_name(r->protocol, &pr) && pr == c->protocol &&
                       skv_eval_positions_from_name(r->positions, &pm) && pm == c->positions &&
                       r->greedy == st.greedy;
            if (!same) {
                cli_error(CMD,
                          "cannot resume %s: row %d of %s (sample %d, config %d) is not the "
                          "row this run writes there (sample %d, config %d)",
                          resume, k + 1, path, r->sample, r->config, smp->index, c->index);
                rc = 2;
                goto done;
            }
        }
        skv_eval_rows_free(&rows);
        memset(&rows, 0, sizeof rows);
        if (!quiet)
            fprintf(stderr, "sparsekv eval: resuming %s: %lld of %lld rows already done\n", out,
                    done_rows, (long long)ds.n * n_cfgs);
    }
    cur.complete = false;
    cur.n_samples_total = ds.n_total;
    cur.n_samples = ds.n;
    cur.n_skipped = ds.n_skipped;
    cur.n_configs = n_cfgs;
    cur.rows = done_rows;
    if (skv_eval_runinfo_write(out, &cur, &err)) {
        cli_error(CMD, "%s", err.msg);
        goto done;
    }
    rf = fopen(path, resume ? "a" : "w");
    if (!rf) {
        cli_error(CMD, "cannot write %s: %s", path, strerror(errno));
        goto done;
    }

    progress prog = {.quiet = quiet,
                     .tty = isatty(STDERR_FILENO) != 0,
                     .n_samples = ds.n,
                     .n_cfgs = n_cfgs,
                     .total = (long long)ds.n * n_cfgs - done_rows,
                     .samples_done = (int)(done_rows / n_cfgs),
                     .t0 = skv_time_ms()};
    sink sk = {.f = rf, .path = path, .st = &st, .prog = &prog, .sample = -1};
    if (!quiet)
        fprintf(stderr, "sparsekv eval: %d sample%s x %d configurations%s\n", ds.n,
                ds.n == 1 ? "" : "s", n_cfgs, shard_n > 1 ? " (this shard)" : "");
    for (int i = (int)(done_rows / n_cfgs); i < ds.n; i++) {
        int first = i == (int)(done_rows / n_cfgs) ? (int)(done_rows % n_cfgs) : 0;
        if (decoding ? skv_eval_decode_sample(model, &ds.samples[i], cfgs, n_cfgs, first, &st,
                                              on_decode, &sk, &err)
                     : skv_eval_run_sample_from(model, &ds.samples[i], cfgs, n_cfgs, first, &st,
                                                on_result, &sk, &err)) {
            if (prog.tty && !quiet) fputc('\n', stderr);
            cli_error(CMD, "sample %d: %s", ds.samples[i].index, err.msg);
            goto done;
        }
        prog.samples_done++;
        progress_show(&prog, true, i + 1 == ds.n);
    }
    bool werr = ferror(rf) != 0;
    if (fclose(rf) != 0) werr = true;
    rf = NULL;
    if (werr) {
        cli_error(CMD, "error writing %s: %s", path, strerror(errno ? errno : EIO));
        goto done;
    }

    cur.rows = (long long)ds.n * n_cfgs;
    cur.wall_ms = skv_time_ms() - t_start;

    if (ds.n == 0) {
        fprintf(stderr,
                "sparsekv eval: no samples in this run%s: results.jsonl is empty, no "
                "summary\n",
                shard_n > 1 ? " (shard)" : "");
        cur.complete = true;
        if (skv_eval_runinfo_write(out, &cur, &err)) {
            cli_error(CMD, "%s", err.msg);
            goto done;
        }
        rc = 0;
        goto done;
    }
    snprintf(path, sizeof path, "%s/results.jsonl", out);
    if (skv_eval_read_results(path, &rows, &err) || skv_eval_rows_check(&rows, &err)) {
        cli_error(CMD, "%s", err.msg);
        goto done;
    }
    rc = cmd_eval_finish(CMD, &rows, out, quiet, &labels);
    if (rc == 0) {
        /* every row and every summary written: the run is complete */
        cur.complete = true;
        cur.wall_ms = skv_time_ms() - t_start;
        if (skv_eval_runinfo_write(out, &cur, &err)) {
            cli_error(CMD, "%s", err.msg);
            rc = 1;
        }
    }
    if (!quiet)
        fprintf(stderr, "sparsekv eval: %d samples x %d configurations in %.1f s; results in %s\n",
                ds.n, n_cfgs, (skv_time_ms() - t_start) / 1000.0, out);
    if (sk.not_full && !quiet)
        fprintf(stderr,
                "sparsekv eval: note: at keep 1.0, %s kept less than the whole cache "
                "(%d rows): those rows are measurements, not controls\n",
                sk.not_full_policies, sk.not_full);
    if (sk.bad_controls && decoding) {
        cli_error(CMD,
                  "%d control row%s (a budget of at least the sample) differ from the full "
                  "cache (worst KL %g): a budget that never cuts must leave the logits "
                  "bit-identical, so this is an engine bug",
                  sk.bad_controls, sk.bad_controls == 1 ? "" : "s", sk.worst_control_kl);
        rc = 1;
    } else if (sk.bad_controls) {
        cli_error(CMD,
                  "%d keep=1.0 control row%s differ from the full cache (worst KL %g): "
                  "compression at keep 1.0 must leave the logits bit-identical, so this is "
                  "an engine bug",
                  sk.bad_controls, sk.bad_controls == 1 ? "" : "s", sk.worst_control_kl);
        rc = 1;
    }
done:
    if (rf) fclose(rf);
    skv_eval_runinfo_free(&prev);
    skv_eval_runinfo_free(&cur);
    skv_eval_rows_free(&rows);
    free(cfgs);
    skv_eval_dataset_free(&ds);
    skv_model_free(model);
    return rc;
}
