/* report_depth.c — the retrieval tasks' picture every paper shows: exact-match accuracy against
 * the needle's depth, one panel per keep fraction, one line per policy, the full cache as the
 * reference. Written after the main reports: depth_data.dat, and a section appended to
 * plots.gp that draws accuracy_vs_depth.png/.svg. */
#include "eval/eval.h"
#include "sparsekv.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

enum { MAX_KEEPS = 8, MAX_POLS = 64, MAX_DEPTHS = 64 };

typedef struct cell {
    double correct, ref;
    int n;
    double depth;
} cell;

static int find_str(const char *const *list, int n, const char *s) {
    for (int i = 0; i < n; i++)
        if (!strcmp(list[i], s)) return i;
    return -1;
}

skv_status skv_eval_write_depth_figure(const skv_eval_rows *rows, const char *dir,
                                       const skv_eval_labels *labels, skv_err *err) {
    if (!rows || rows->n < 1 || rows->rows[0].task == SKV_EVAL_LM || rows->rows[0].decode)
        return SKV_OK; /* only the retrieval tasks have depths */
    /* one protocol and position mode: engine if present (the window is the question, kept in
     * the cache), and original positions if present */
    const char *proto = "seed", *pos = "rerotate";
    for (int i = 0; i < rows->n; i++) {
        if (!strcmp(rows->rows[i].protocol, "engine")) proto = "engine";
        if (!strcmp(rows->rows[i].positions, "original")) pos = "original";
    }
    double keeps[MAX_KEEPS];
    const char *pols[MAX_POLS];
    int n_keeps = 0, n_pols = 0, n_depths = 0;
    for (int i = 0; i < rows->n; i++) {
        const skv_eval_row *r = &rows->rows[i];
        if (strcmp(r->protocol, proto) || strcmp(r->positions, pos)) continue;
        if (r->depth_index >= MAX_DEPTHS) continue;
        if (r->depth_index + 1 > n_depths) n_depths = r->depth_index + 1;
        if (r->keep_frac < 1.0) {
            bool seen = false;
            for (int k = 0; k < n_keeps; k++) seen |= keeps[k] == r->keep_frac;
            if (!seen && n_keeps < MAX_KEEPS) keeps[n_keeps++] = r->keep_frac;
        }
        if (find_str(pols, n_pols, r->policy) < 0 && n_pols < MAX_POLS) pols[n_pols++] = r->policy;
    }
    if (n_keeps == 0 || n_pols == 0 || n_depths == 0) return SKV_OK;
    for (int a = 1; a < n_keeps; a++) /* ascending keep */
        for (int b = a; b > 0 && keeps[b] < keeps[b - 1]; b--) {
            double t = keeps[b];
            keeps[b] = keeps[b - 1];
            keeps[b - 1] = t;
        }
    cell *cells = calloc((size_t)n_keeps * n_pols * n_depths, sizeof *cells);
    cell *dense = calloc((size_t)n_depths, sizeof *dense);
    if (!cells || !dense) {
        free(cells), free(dense);
        return skv_err_set(err, SKV_ERR_NOMEM, "out of memory");
    }
    for (int i = 0; i < rows->n; i++) {
        const skv_eval_row *r = &rows->rows[i];
        if (strcmp(r->protocol, proto) || strcmp(r->positions, pos) || r->depth_index >= n_depths)
            continue;
        int p = find_str(pols, n_pols, r->policy), k = -1;
        for (int j = 0; j < n_keeps; j++)
            if (keeps[j] == r->keep_frac) k = j;
        cell *d = &dense[r->depth_index];
        d->ref += r->ref_correct, d->n++, d->depth = r->depth;
        if (k < 0 || p < 0) continue;
        cell *c = &cells[((size_t)k * n_pols + p) * n_depths + r->depth_index];
        c->correct += r->correct, c->n++, c->depth = r->depth;
    }
    char path[4200];
    skv_status st = SKV_OK;
    FILE *f = skv_eval_open_tmp(dir, "depth_data.dat", path, sizeof path, err);
    if (!f) {
        st = err ? err->status : SKV_ERR_IO;
        goto done;
    }
    fprintf(f,
            "# sparsekv eval: depth accuracy (protocol %s, positions %s); blocks: keep x "
            "policy (keep-major), then the full cache\n# depth accuracy\n",
            proto, pos);
    for (int k = 0; k < n_keeps; k++)
        for (int p = 0; p < n_pols; p++) {
            fprintf(f, "# keep %g %s\n", keeps[k], pols[p]);
            for (int d = 0; d < n_depths; d++) {
                const cell *c = &cells[((size_t)k * n_pols + p) * n_depths + d];
                if (c->n) fprintf(f, "%.6g %.6g\n", c->depth, c->correct / c->n);
            }
            fputs("\n\n", f);
        }
    fputs("# full cache\n", f);
    for (int d = 0; d < n_depths; d++)
        if (dense[d].n) fprintf(f, "%.6g %.6g\n", dense[d].depth, dense[d].ref / dense[d].n);
    fputs("\n\n", f);
    if ((st = skv_eval_close_tmp(f, path, err))) goto done;

    /* appended to the plots.gp the main report wrote (renamed into place already) */
    snprintf(path, sizeof path, "%s/plots.gp", dir);
    f = fopen(path, "a");
    if (!f) {
        st = skv_err_set(err, SKV_ERR_IO, "cannot append to %s", path);
        goto done;
    }
    int cols = n_keeps < 3 ? n_keeps : 3, prow = (n_keeps + cols - 1) / cols;
    int width = 420 * cols + 220, height = 380 * prow + 60;
    for (int term = 0; term < 2; term++) {
        fprintf(f, "\n# ---- accuracy_vs_depth\nreset\n");
        if (term == 0)
            fprintf(f,
                    "eval('set terminal '.png_term.' size %d,%d noenhanced font \"Sans,11\"')\n"
                    "set output 'accuracy_vs_depth.png'.out_suffix\n",
                    width, height);
        else
            fprintf(f,
                    "set terminal svg size %d,%d dynamic noenhanced font 'Sans,11'\n"
                    "set output 'accuracy_vs_depth.svg'.out_suffix\n",
                    width, height);
        fprintf(f,
                "set multiplot layout %d,%d title '%s task: exact-match accuracy vs needle depth "
                "(%s protocol, %s positions)'\n"
                "set grid lc rgb '#dddddd'\nset border 3\nset xtics nomirror\nset ytics nomirror\n"
                "set xrange [-0.05:1.05]\nset yrange [-0.03:1.03]\nset xlabel 'needle depth'\n"
                "set ylabel 'accuracy'\n",
                prow, cols, skv_eval_task_name(rows->rows[0].task), proto, pos);
        int full = n_keeps * n_pols;
        for (int k = 0; k < n_keeps; k++) {
            /* the legend once, in the last panel, outside on the right */
            if (k == n_keeps - 1)
                fputs("set key outside right top vertical noenhanced\n", f);
            else
                fputs("unset key\n", f);
            fprintf(f, "set title 'keep %g'\nplot ", keeps[k]);
            for (int p = 0; p < n_pols; p++) {
                const char *l = skv_eval_label_of(labels, pols[p]);
                fprintf(f,
                        "'depth_data.dat' index %d using 1:2 with linespoints lw 2 pt 7 lc rgb "
                        "'%s' title ",
                        k * n_pols + p, skv_eval_policy_colour(pols[p]));
                skv_eval_write_gnuplot_string(f, l ? l : pols[p]);
                fputs(", \\\n     ", f);
            }
            fprintf(f,
                    "'depth_data.dat' index %d using 1:2 with lines dt 2 lw 2 lc rgb '#444444' "
                    "title 'full cache'\n",
                    full);
        }
        fputs("unset multiplot\nset output\n", f);
    }
    skv_eval_write_drawn_mark(f, "accuracy_vs_depth");
    if (fclose(f) != 0) st = skv_err_set(err, SKV_ERR_IO, "error writing %s", path);
done:
    free(cells), free(dense);
    return st;
}
