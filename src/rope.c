/* rope.c — see rope.h. */
#include "rope.h"
#include "kernels/kernels.h"

#include <math.h>

skv_rope_spec skv_rope_plain(skv_rope_mode mode, int head_dim, int n_rot, double theta) {
    skv_rope_spec r = {mode, head_dim, n_rot, theta, 1.0, NULL, NULL, 1.0};
    return r;
}

static double rope_angle(const skv_rope_spec *r, int i, double pos) {
    double a = pos * (r->mix ? r->mix[i] : r->freq_scale) * pow(r->theta, -2.0 * i / r->n_rot);
    return r->factors ? a / (double)r->factors[i] : a;
}

static void table(const skv_rope_spec *r, float *cs, double pos, double scale) {
    const int h = r->n_rot / 2;
    for (int i = 0; i < h; i++) {
        double a = rope_angle(r, i, pos);
        float c = (float)(scale * cos(a)), s = (float)(scale * sin(a));
        if (r->mode == SKV_ROPE_NEOX) {
            cs[i] = c;
            cs[h + i] = s;
        } else {
            cs[2 * i] = c;
            cs[2 * i + 1] = s;
        }
    }
}

void skv_rope_table(const skv_rope_spec *r, float *cs, double pos) {
    table(r, cs, pos, r->attn_factor);
}

void skv_rope_turn_table(const skv_rope_spec *r, float *cs, double delta) {
    table(r, cs, delta, 1.0);
}

void skv_rope_apply_table_ref(const skv_rope_spec *r, float *x, const float *cs) {
    const int h = r->n_rot / 2;
    for (int i = 0; i < h; i++) {
        int i0 = r->mode == SKV_ROPE_NEOX ? i : 2 * i,
            i1 = r->mode == SKV_ROPE_NEOX ? i + h : i0 + 1;
        float c = r->mode == SKV_ROPE_NEOX ? cs[i] : cs[2 * i];
        float s = r->mode == SKV_ROPE_NEOX ? cs[h + i] : cs[2 * i + 1];
        float x0 = x[i0], x1 = x[i1];
        x[i0] = x0 * c - x1 * s;
        x[i1] = x0 * s + x1 * c;
    }
}

void skv_rope_apply_table(const skv_rope_spec *r, float *x, const float *cs) {
#if defined(__x86_64__) || defined(__i386__)
    if (skv_kernels_use_avx512()) {
        skv_rope_apply_avx512(x, r->n_rot, r->mode == SKV_ROPE_NEOX, cs);
        return;
    }
    if (skv_kernels_use_simd()) {
        skv_rope_apply_avx2(x, r->n_rot, r->mode == SKV_ROPE_NEOX, cs);
        return;
    }
#endif
    skv_rope_apply_table_ref(r, x, cs);
}

void skv_rope_rotate_ref(const skv_rope_spec *r, float *x, double pos) {
    const int h = r->n_rot / 2;
    for (int i = 0; i < h; i++) {
        int i0 = r->mode == SKV_ROPE_NEOX ? i : 2 * i,
            i1 = r->mode == SKV_ROPE_NEOX ? i + h : i0 + 1;
        double a = rope_angle(r, i, pos), c = r->attn_factor * cos(a), s = r->attn_factor * sin(a);
        double x0 = x[i0], x1 = x[i1];
        x[i0] = (float)(x0 * c - x1 * s);
        x[i1] = (float)(x0 * s + x1 * c);
    }
}
