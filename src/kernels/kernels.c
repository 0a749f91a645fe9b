/* kernels.c — scalar element conversions, the plain C references of the vector kernels and
 * attention, and the run-time dispatch to the AVX2/FMA/F16C paths in vec_avx2.c. */
#include "kernels.h"

#include <float.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* ---- element conversions ------------------------------------------------------------------ */

static inline uint32_t f32_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static inline float bits_f32(uint32_t u) {
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

float skv_f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t em = (uint32_t)(h & 0x7fffu) << 13; /* exponent+mantissa in float position */
    if (em >= 0x0f800000u) return bits_f32(sign | 0x7f800000u | em); /* inf / nan */
    /* Rebias by multiplying with 2^112: exact for normals, and a subnormal half (read as a
     * subnormal float) becomes the right normal float. */
    return bits_f32(sign | f32_bits(bits_f32(em) * 0x1p112f));
}

uint16_t skv_f32_to_f16(float f) {
    uint32_t x = f32_bits(f);
    uint16_t sign = (uint16_t)((x >> 16) & 0x8000u);
    uint32_t ax = x & 0x7fffffffu;
    if (ax > 0x7f800000u) /* nan: keep the top payload bits, force quiet */
        return (uint16_t)(sign | 0x7e00u | ((ax >> 13) & 0x3ffu));
    /* 65520 (halfway between 65504 and 2^16) and above round to inf (65504 is odd). */
    if (ax >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u);
    if (ax < 0x38800000u) {                 /* below 2^-14: half subnormal (or zero) */
        if (ax <= 0x33000000u) return sign; /* <= 2^-25 rounds to zero (tie goes to even 0) */
        uint32_t e = ax >> 23;
        uint32_t m = (ax & 0x7fffffu) | 0x800000u;
        uint32_t shift = 126 - e; /* value = m * 2^(e-150); in units of 2^-24: m >> (126-e) */
        uint32_t r = m >> shift, rem = m & ((1u << shift) - 1), half = 1u << (shift - 1);
        if (rem > half || (rem == half && (r & 1))) r++; /* may carry into the min normal */
        return (uint16_t)(sign | r);
    }
    uint32_t r = (ax - 0x38000000u) >> 13; /* rebias exponent 127 -> 15 */
    uint32_t rem = ax & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (r & 1))) r++; /* carry into exponent is right */
    return (uint16_t)(sign | r);
}

float skv_bf16_to_f32(uint16_t h) {
    return bits_f32((uint32_t)h << 16);
}

uint16_t skv_f32_to_bf16(float f) {
    uint32_t x = f32_bits(f);
    if ((x & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((x >> 16) | 0x0040u); /* quiet nan */
    x += 0x7fffu + ((x >> 16) & 1u); /* round to nearest even; overflow carries to inf */
    return (uint16_t)(x >> 16);
}

/* ---- run-time dispatch ------------------------------------------------------------------- */

#if defined(__x86_64__) || defined(__i386__)
#define SKV_HAVE_X86 1
#include <cpuid.h>
#endif
#if defined(SKV_HAVE_X86) && defined(__linux__)
#include <sys/syscall.h>
#include <unistd.h>
#endif

/* The widest level this build has kernels for. */
#define SIMD_BUILT SKV_SIMD_AVX512

static pthread_once_t simd_once = PTHREAD_ONCE_INIT;
static skv_simd_id simd_cpu = SKV_SIMD_SCALAR;    /* widest level the CPU (and OS) support */
static skv_simd_id simd_active = SKV_SIMD_SCALAR; /* what the dispatchers use */
static char simd_features[160];                   /* "sse4.2 avx avx2 fma f16c ..." */
static char simd_warning[200];                    /* why SKV_SIMD was not honoured, or "" */
static bool simd_vnni = false;                    /* AVX-512 VNNI (at the AVX-512 level) */
static bool simd_bf16 = false;                    /* AVX512_BF16 (at the AVX-512 level) */
static bool simd_amx_cpu = false; /* AMX-TILE + AMX-BF16 with AVX512_BF16, the OS saving tiles */
static bool simd_amx = false;     /* ... in use: the avx512 level, granted by the OS */
static atomic_bool bf16_dot_off = false;
static atomic_bool amx_off = false;
static atomic_bool forced_ref = false;
static bool cpu_amd = false; /* CPUID vendor AMD (or Hygon, a Zen 1) */
/* How the Q4_K, Q5_K, Q8_0, Q4_0, Q5_0, Q4_1 and Q5_1 records' decode reads by default (kernels.h):
 * 4 prefetched streams per thread, each line asked for k16_ahead_for() bytes ahead
 * (SKV_K16_PREFETCH=0: one stream on the hardware prefetcher alone). Measured, llama-3.2-1b Q4_K
 * tg, one binary, the settings taking turns token by token in one process (bench/decode_ab.c,
 * medians of 40-80 tokens):
 * - AMX Xeon (VNNI level, 2 threads): 1 KB 49.3 t/s, 2 KB 45, 4 KB 40 (one stream 38.4).
 * - Zen 1, family 0x17 (AVX2 level), 2 threads: one stream 10.7, 1 KB 12.5, 2 KB 15.0, 3 KB 14.8,
 *   4 KB 14.7; 1 thread 10.2, 10.7, 13.9, 14.3, 14.5.
 * - Zen 5, family 0x1a (EPYC, VNNI level), 2 threads: one stream 48.4, 1 KB 41.6, 1.5 KB 52.9,
 *   2 KB 58.4, 2.5 KB 56.5, 3 KB 52.2; 1 thread 21.7, 17.7, 23.7, 24.8, 24.2, 23.0 (Q4_K_M
 *   2 threads: 50.4, 48.0, 2 KB 55.3, 3 KB 52.0). 1 KB, right on Intel, is slower than none here.
 *   The VNNI Q8_0 records' decode (gemv_hex_rec) with the same streams, llama-3.2-1b Q8_0 tg at 2
 *   threads: one stream 30.6-33.3, 1 KB 38.2-41.4, 2 KB 38.6-42.5, 3 KB 38.5-42.1 (+24-28%); 1
 *   thread 19.2 -> 24.0; qwen2.5-0.5b 82.8 -> 97.4, smollm2-135m 259 -> 296. Not measured on
 *   Intel or Zen 1. The AVX2 level's Q8_0 decode (gemv_q8_rec) has the streams too: Zen 5 at
 *   SKV_SIMD=avx2, llama-3.2-1b Q8_0 tg at 2 threads, one stream 36.3, 1 KB 46.0, 2 KB 50.8,
 *   3 KB 47.0.
 * - Zen 5 again after the four streams shared their x broadcasts (k16_steps: before, the compiler
 *   spilled them, and the streams' kernel computed at ~60% of one stream's speed), 2 threads: VNNI
 *   one stream 61.2, 1.5 KB 82.1, 2 KB 83.3, 3 KB 80.7; AVX2 level one stream 43.3, 1.5 KB 68.1,
 *   2 KB 76.9, 3 KB 78.1.
 * - Zen 5, the Q4_0 records (f92f6fd), llama-3.2-1b Q4_0 tg, 2 threads: VNNI one stream 59.1,
 *   1 KB 76.9, 2 KB 78.6, 3 KB 76.6; AVX2 level 56.4, 69.1, 70.8, 68.0.
 * Zen 3 and 4 (family 0x19) are not measured with it: 2 KB, as Zen 5. (A Zen 4 once had one stream
 * at 39-53 t/s against 32-40 for 4 streams without the prefetch, when the streams' kernel still
 * spilled; every CPU measured since runs the streams 1.2-1.8x faster than one stream.) */
#define K16_AHEAD_OTHER 1024 /* Intel and other vendors */
#define K16_AHEAD_ZEN1  3072 /* AMD family 0x17 and older, Hygon's 0x18 (a Zen 1) */
#define K16_AHEAD_ZEN5  2048 /* AMD family 0x19 and newer */
static int k16_ahead_for(bool amd, unsigned family) {
    if (!amd) return K16_AHEAD_OTHER;
    return family <= 0x18 ? K16_AHEAD_ZEN1 : K16_AHEAD_ZEN5;
}
int skv_k16_ahead_cpu = K16_AHEAD_OTHER;
static int k16_prefetch_env = -1;        /* SKV_K16_PREFETCH: 0, 1, or -1 when unset */
static atomic_int k16_prefetch_set = -1; /* skv_kernels_k16_prefetch: 0, 1, or -1 (default) */

static const char *const simd_names[] = {"scalar", "avx2", "avx512"};

const char *skv_simd_name(skv_simd_id id) {
    return id >= SKV_SIMD_SCALAR && id <= SKV_SIMD_AVX512 ? simd_names[id] : "?";
}

#ifdef SKV_HAVE_X86
/* XCR0: which register states the OS saves (only valid when CPUID reports OSXSAVE). */
static uint64_t read_xcr0(void) {
    uint32_t lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    return (uint64_t)hi << 32 | lo;
}

static void feature(bool has, const char *name) {
    size_t len = strlen(simd_features);
    if (has && len + strlen(name) + 2 < sizeof simd_features)
        snprintf(simd_features + len, sizeof simd_features - len, "%s%s", len ? " " : "", name);
}

/* Linux hands the AMX tile data state (XCR0 bit 18) only to a process that asks for it
 * (arch_prctl ARCH_REQ_XCOMP_PERM, kernel 5.16 and later); the grant covers every thread. It is
 * refused where a thread's signal stack is too small for the larger signal frame (sanitizer
 * runtimes): then no AMX. */
static bool amx_granted(void) {
#if defined(__linux__) && defined(SYS_arch_prctl)
    return syscall(SYS_arch_prctl, 0x1023 /* ARCH_REQ_XCOMP_PERM */, 18 /* XTILEDATA */) == 0;
#else
    return false;
#endif
}
#endif

/* CPUID straight from the leaves (so that the names do not depend on the compiler's
 * __builtin_cpu_supports list): leaf 0 EBX/EDX/ECX (the vendor), leaf 1 ECX, leaf 7.0 EBX/ECX,
 * leaf 7.1 EAX, and XCR0 for the register state the OS saves (YMM: bits 1-2; opmask and ZMM:
 * bits 5-7). */
static void simd_detect(void) {
#ifdef SKV_HAVE_X86
    unsigned a = 0, b = 0, c = 0, d = 0, max_leaf = __get_cpuid_max(0, NULL);
    bool sse42 = false, fma = false, avx = false, f16c = false, osx = false;
    bool avx2 = false, f = false, dq = false, bw = false, vl = false, vnni = false;
    bool vbmi = false, bf16 = false, amx = false;
    if (__get_cpuid(0, &a, &b, &c, &d)) {
        char vendor[12]; /* EBX, EDX, ECX */
        memcpy(vendor, &b, 4);
        memcpy(vendor + 4, &d, 4);
        memcpy(vendor + 8, &c, 4);
        cpu_amd = !memcmp(vendor, "AuthenticAMD", 12) || !memcmp(vendor, "HygonGenuine", 12);
    }
    if (max_leaf >= 1 && __get_cpuid(1, &a, &b, &c, &d)) {
        /* the family, base + extended: Zen 1 and 2 are 0x17 (Hygon 0x18), Zen 3 and 4 0x19, Zen 5
         * 0x1a */
        const unsigned family = (a >> 8 & 0xf) + ((a >> 8 & 0xf) == 0xf ? (a >> 20 & 0xff) : 0);
        skv_k16_ahead_cpu = k16_ahead_for(cpu_amd, family);
        sse42 = c >> 20 & 1;
        fma = c >> 12 & 1;
        osx = c >> 27 & 1;
        avx = c >> 28 & 1;
        f16c = c >> 29 & 1;
    }
    uint64_t xcr0 = osx ? read_xcr0() : 0;
    bool os_ymm = (xcr0 & 0x6) == 0x6, os_zmm = os_ymm && (xcr0 & 0xe0) == 0xe0;
    if (max_leaf >= 7) {
        __cpuid_count(7, 0, a, b, c, d);
        unsigned sub_max = a;
        avx2 = b >> 5 & 1;
        f = b >> 16 & 1;
        dq = b >> 17 & 1;
        bw = b >> 30 & 1;
        vl = b >> 31 & 1;
        vbmi = c >> 1 & 1;
        vnni = c >> 11 & 1;
        amx = (d >> 22 & 1) && (d >> 24 & 1); /* AMX-BF16, AMX-TILE */
        if (sub_max >= 1) {
            __cpuid_count(7, 1, a, b, c, d);
            bf16 = a >> 5 & 1;
        }
    }
    avx &= os_ymm;
    avx2 &= avx;
    fma &= avx;
    f16c &= avx;
    f &= os_zmm;
    dq &= f;
    bw &= f;
    vl &= f;
    vbmi &= f;
    vnni &= f;
    bf16 &= f;
    feature(sse42, "sse4.2");
    feature(avx, "avx");
    feature(avx2, "avx2");
    feature(fma, "fma");
    feature(f16c, "f16c");
    feature(f, "avx512f");
    feature(dq, "avx512dq");
    feature(bw, "avx512bw");
    feature(vl, "avx512vl");
    feature(vnni, "avx512vnni");
    feature(bf16, "avx512bf16");
    feature(vbmi, "avx512vbmi");
    amx = amx && bf16 && bw && vl && dq && (xcr0 & 0x60000) == 0x60000; /* XTILECFG, XTILEDATA */
    feature(amx, "amx-bf16");
    if (avx2 && fma && f16c) simd_cpu = SKV_SIMD_AVX2;
    if (simd_cpu == SKV_SIMD_AVX2 && f && bw && vl && dq) simd_cpu = SKV_SIMD_AVX512;
    simd_vnni = simd_cpu == SKV_SIMD_AVX512 && vnni;
    simd_bf16 = simd_cpu == SKV_SIMD_AVX512 && bf16;
    simd_amx_cpu = simd_bf16 && amx;
#endif
    if (!simd_features[0]) snprintf(simd_features, sizeof simd_features, "(none)");
}

/* Once per process: the CPU's level, lowered by SKV_SIMD (or SKV_FORCE_SCALAR=1, its older
 * spelling). An unknown SKV_SIMD value is ignored; a level above what the CPU or this build has
 * runs the widest one below it. Both leave a note in skv_simd_warning(). */
static void simd_init(void) {
    simd_detect();
    skv_simd_id best = simd_cpu < SIMD_BUILT ? simd_cpu : SIMD_BUILT, want = best;
    const char *fs = getenv("SKV_FORCE_SCALAR");
    const char *env = getenv("SKV_SIMD");
    if (fs && fs[0] && strcmp(fs, "0") != 0) want = SKV_SIMD_SCALAR;
    if (env && env[0] && strcmp(env, "auto") != 0) {
        int id = -1;
        for (int i = 0; i <= SKV_SIMD_AVX512; i++)
            if (!strcasecmp(env, simd_names[i])) id = i;
        if (id < 0) {
            snprintf(simd_warning, sizeof simd_warning,
                     "SKV_SIMD='%.40s' is not a level (scalar, avx2, avx512, auto); ignored, "
                     "using %s",
                     env, skv_simd_name(want));
        } else if (id > (int)best) {
            snprintf(simd_warning, sizeof simd_warning, "SKV_SIMD=%s: %s; using %s", simd_names[id],
                     id > (int)simd_cpu ? "this CPU does not have it"
                                        : "this build has no kernels for it",
                     skv_simd_name(want < best ? want : best));
        } else if (id < (int)want) {
            want = (skv_simd_id)id;
        }
    }
    simd_active = want;
    const char *k16 = getenv("SKV_K16_PREFETCH");
    if (k16 && (!strcmp(k16, "0") || !strcmp(k16, "1"))) {
        k16_prefetch_env = k16[0] - '0';
    } else if (k16 && k16[0]) {
        const size_t len = strlen(simd_warning);
        snprintf(simd_warning + len, sizeof simd_warning - len,
                 "%sSKV_K16_PREFETCH='%.20s' is not 0 or 1; ignored", len ? "; " : "", k16);
    }
#ifdef SKV_HAVE_X86
    /* The tile state is asked of the OS only where it would be used (the grant enlarges every
     * signal frame of the process); SKV_NO_AMX=1 keeps the vector code. */
    const char *no_amx = getenv("SKV_NO_AMX");
    simd_amx = simd_amx_cpu && want == SKV_SIMD_AVX512 &&
               !(no_amx && no_amx[0] && strcmp(no_amx, "0") != 0) && amx_granted();
#endif
}

skv_simd_id skv_simd_cpu_id(void) {
    pthread_once(&simd_once, simd_init);
    return simd_cpu;
}

skv_simd_id skv_simd_active_id(void) {
    pthread_once(&simd_once, simd_init);
    return simd_active;
}

const char *skv_simd_level(void) {
    return skv_simd_name(skv_simd_active_id());
}

const char *skv_simd_cpu_level(void) {
    return skv_simd_name(skv_simd_cpu_id());
}

const char *skv_simd_cpu_features(void) {
    pthread_once(&simd_once, simd_init);
    return simd_features;
}

const char *skv_simd_warning(void) {
    pthread_once(&simd_once, simd_init);
    return simd_warning[0] ? simd_warning : NULL;
}

bool skv_simd_has_vnni(void) {
    pthread_once(&simd_once, simd_init);
    return simd_vnni;
}

bool skv_simd_has_bf16(void) {
    pthread_once(&simd_once, simd_init);
    return simd_bf16;
}

bool skv_simd_has_amx(void) {
    pthread_once(&simd_once, simd_init);
    return simd_amx;
}

bool skv_kernels_use_amx(void) {
    return skv_kernels_use_avx512() && skv_simd_has_amx() &&
           !atomic_load_explicit(&amx_off, memory_order_relaxed);
}

bool skv_simd_amx(void) {
    return skv_kernels_use_amx();
}

void skv_kernels_amx(bool on) {
    atomic_store_explicit(&amx_off, !on, memory_order_relaxed);
}

bool skv_kernels_use_bf16(void) {
    return skv_kernels_use_avx512() && skv_simd_has_bf16() &&
           !atomic_load_explicit(&bf16_dot_off, memory_order_relaxed);
}

void skv_kernels_bf16_dot(bool on) {
    atomic_store_explicit(&bf16_dot_off, !on, memory_order_relaxed);
}

bool skv_kernels_use_simd(void) {
    return skv_simd_active_id() >= SKV_SIMD_AVX2 &&
           !atomic_load_explicit(&forced_ref, memory_order_relaxed);
}

bool skv_kernels_use_avx512(void) {
    return skv_simd_active_id() >= SKV_SIMD_AVX512 &&
           !atomic_load_explicit(&forced_ref, memory_order_relaxed);
}

const char *skv_kernels_impl(void) {
    if (!skv_kernels_use_simd()) return "scalar";
    if (skv_simd_active_id() < SKV_SIMD_AVX512) return "avx2+fma+f16c";
    if (skv_kernels_use_amx())
        return skv_simd_has_vnni() ? "avx512+vnni+bf16+amx" : "avx512+bf16+amx";
    if (skv_simd_has_vnni()) return skv_simd_has_bf16() ? "avx512+vnni+bf16" : "avx512+vnni";
    return skv_simd_has_bf16() ? "avx512+bf16" : "avx512";
}

bool skv_kernels_use_k16_prefetch(void) {
    pthread_once(&simd_once, simd_init);
    const int set = atomic_load_explicit(&k16_prefetch_set, memory_order_relaxed);
    if (set >= 0) return set;
    return k16_prefetch_env != 0; /* unset (-1): the streams, on every CPU */
}

int skv_kernels_k16_ahead(void) {
    return skv_kernels_use_k16_prefetch() ? skv_k16_ahead_cpu : 0;
}

void skv_kernels_k16_prefetch(int mode) {
    atomic_store_explicit(&k16_prefetch_set, mode < 0 ? -1 : mode > 0, memory_order_relaxed);
}

bool skv_simd_k16_prefetch(void) {
    return skv_kernels_use_simd() && skv_kernels_use_k16_prefetch();
}

int skv_simd_k16_ahead(void) {
    return skv_kernels_use_simd() ? skv_kernels_k16_ahead() : 0;
}

void skv_kernels_force_ref(bool on) {
    atomic_store_explicit(&forced_ref, on, memory_order_relaxed);
}

#ifdef SKV_HAVE_X86
#define SIMD_ON()   skv_kernels_use_simd()
#define AVX512_ON() skv_kernels_use_avx512()
#else
#define SIMD_ON()   false
#define AVX512_ON() false
#endif

const uint8_t skv_zero_row[8192] __attribute__((aligned(64)));

/* ---- references -------------------------------------------------------------------------- */

void skv_rmsnorm_ref(float *out, const float *x, const float *w, int n, float eps) {
    if (n <= 0) return;
    double ss = 0.0;
    for (int i = 0; i < n; i++) ss += (double)x[i] * x[i];
    double s = 1.0 / sqrt(ss / n + (double)eps);
    for (int i = 0; i < n; i++) out[i] = (float)(x[i] * s * w[i]);
}

/* Turns pairs (x[2i], x[2i+1]) with 2i < n_rot and 2i+1 < head_dim; n_rot above head_dim
 * counts as head_dim. */
void skv_rope_ref(float *x, int head_dim, int n_rot, double pos, float theta) {
    if (n_rot > head_dim) n_rot = head_dim;
    if (n_rot <= 0) return;
    int np = SKV_MIN((n_rot + 1) / 2, head_dim / 2);
    for (int i = 0; i < np; i++) {
        double a = pos * pow((double)theta, -2.0 * i / n_rot);
        double c = cos(a), s = sin(a);
        double x0 = x[2 * i], x1 = x[2 * i + 1];
        x[2 * i] = (float)(x0 * c - x1 * s);
        x[2 * i + 1] = (float)(x0 * s + x1 * c);
    }
}

void skv_rope_angles(float *cs, int n_rot, double pos, float theta) {
    for (int i = 0; i < n_rot / 2; i++) {
        double a = pos * pow((double)theta, -2.0 * i / n_rot);
        cs[2 * i] = (float)cos(a);
        cs[2 * i + 1] = (float)sin(a);
    }
}

void skv_rope_apply(float *x, int n_rot, const float *cs) {
    for (int i = 0; i < n_rot / 2; i++) {
        float c = cs[2 * i], sn = cs[2 * i + 1];
        float x0 = x[2 * i], x1 = x[2 * i + 1];
        x[2 * i] = x0 * c - x1 * sn;
        x[2 * i + 1] = x0 * sn + x1 * c;
    }
}

void skv_softmax_ref(float *x, int n) {
    if (n <= 0) return;
    float mx = x[0];
    for (int i = 1; i < n; i++) mx = x[i] > mx ? x[i] : mx;
    if (mx == -INFINITY) { /* everything masked: no preference, uniform */
        for (int i = 0; i < n; i++) x[i] = 1.0f / n;
        return;
    }
    double sum = 0.0;
    for (int i = 0; i < n; i++) sum += exp((double)x[i] - mx);
    for (int i = 0; i < n; i++) x[i] = (float)(exp((double)x[i] - mx) / sum);
}

void skv_softmax_sum_ref(double *acc, float *x, int n, float scale) {
    for (int i = 0; i < n; i++) x[i] *= scale;
    skv_softmax_ref(x, n);
    for (int i = 0; i < n; i++) acc[i] += (double)x[i];
}

void skv_swiglu_ref(float *out, const float *gate, const float *up, int n) {
    for (int i = 0; i < n; i++) {
        double g = gate[i];
        out[i] = (float)(g / (1.0 + exp(-g)) * up[i]);
    }
}

float skv_dot_f32_ref(const float *a, const float *b, int n) {
    double s = 0.0;
    for (int i = 0; i < n; i++) s += (double)a[i] * b[i];
    return (float)s;
}

/* Element c of a K/V row of type t (F32, F16 or Q8_0). */
static inline float kv_elem(skv_type t, const uint8_t *row, int c) {
    switch (t) {
    case SKV_TYPE_F32: {
        float f;
        memcpy(&f, row + (size_t)c * 4, 4);
        return f;
    }
    case SKV_TYPE_F16: {
        uint16_t h;
        memcpy(&h, row + (size_t)c * 2, 2);
        return skv_f16_to_f32(h);
    }
    default: { /* Q8_0 */
        const uint8_t *b = row + (size_t)(c / SKV_QK8_0) * (2 + SKV_QK8_0);
        uint16_t d;
        memcpy(&d, b, 2);
        return skv_f16_to_f32(d) * (float)(int8_t)b[2 + c % SKV_QK8_0];
    }
    }
}

/* Row size of a K/V row, 0 when (type, d) cannot be attended. */
static size_t attn_row_bytes(skv_type t, int d) {
    if (t != SKV_TYPE_F32 && t != SKV_TYPE_F16 && t != SKV_TYPE_Q8_0) return 0;
    return skv_row_bytes(t, d);
}

/* Two passes per query head in float64: the maximum, then sum and weighted values (the value
 * dimensions in chunks so the accumulator stays on the stack). */
void skv_attn_group_ref(float *out, const float *q, int g, int d, const void *k, const void *v,
                        skv_type kv_type, int n, float scale) {
    if (g <= 0 || d <= 0) return;
    size_t rb = attn_row_bytes(kv_type, d);
    if (n <= 0 || rb == 0) {
        memset(out, 0, sizeof(float) * (size_t)g * d);
        return;
    }
    const uint8_t *kb = k, *vb = v;
    enum { CH = 64 };
    for (int i = 0; i < g; i++) {
        const float *qi = q + (size_t)i * d;
        double mx = -INFINITY;
        for (int j = 0; j < n; j++) {
            double s = 0.0;
            for (int c = 0; c < d; c++) s += (double)qi[c] * kv_elem(kv_type, kb + j * rb, c);
            s *= scale;
            mx = s > mx ? s : mx;
        }
        for (int c0 = 0; c0 < d; c0 += CH) {
            int cn = SKV_MIN(CH, d - c0);
            double acc[CH] = {0}, sum = 0.0;
            for (int j = 0; j < n; j++) {
                double s = 0.0;
                for (int c = 0; c < d; c++) s += (double)qi[c] * kv_elem(kv_type, kb + j * rb, c);
                double p = exp(s * scale - mx);
                sum += p;
                for (int c = 0; c < cn; c++) acc[c] += p * kv_elem(kv_type, vb + j * rb, c0 + c);
            }
            for (int c = 0; c < cn; c++) out[(size_t)i * d + c0 + c] = (float)(acc[c] / sum);
        }
    }
}

/* ---- portable single-pass attention (scalar path, and the SIMD path's fallback for head
 * sizes it does not tile) ---------------------------------------------------------------- */

static void attn_group_scalar(float *out, float *lse, const float *q, int g, int d,
                              const uint8_t *kb, const uint8_t *vb, skv_type t, size_t rb, int n,
                              float scale) {
    enum { GCH = 64 }; /* heads per pass: bounds the running max/sum arrays */
    memset(out, 0, sizeof(float) * (size_t)g * d);
    for (int i0 = 0; i0 < g; i0 += GCH) {
        int gn = SKV_MIN(GCH, g - i0);
        float mx[GCH], sum[GCH];
        for (int i = 0; i < gn; i++) mx[i] = -INFINITY, sum[i] = 0.0f;
        for (int j = 0; j < n; j++) {
            const uint8_t *kr = kb + (size_t)j * rb, *vr = vb + (size_t)j * rb;
            for (int i = 0; i < gn; i++) {
                const float *qi = q + (size_t)(i0 + i) * d;
                float *acc = out + (size_t)(i0 + i) * d;
                float s = 0.0f;
                for (int c = 0; c < d; c++) s += qi[c] * kv_elem(t, kr, c);
                s *= scale;
                if (s > mx[i]) { /* new maximum: rescale what was accumulated so far */
                    float r = expf(mx[i] - s);
                    for (int c = 0; c < d; c++) acc[c] *= r;
                    sum[i] *= r;
                    mx[i] = s;
                }
                float p = expf(s - mx[i]);
                sum[i] += p;
                for (int c = 0; c < d; c++) acc[c] += p * kv_elem(t, vr, c);
            }
        }
        for (int i = 0; i < gn; i++) {
            if (lse) lse[i0 + i] = sum[i] > 0.0f ? mx[i] + logf(sum[i]) : -INFINITY;
            float inv = sum[i] > 0.0f ? 1.0f / sum[i] : 0.0f;
            float *acc = out + (size_t)(i0 + i) * d;
            for (int c = 0; c < d; c++) acc[c] *= inv;
        }
    }
}

/* ---- dispatchers ------------------------------------------------------------------------- */

void skv_rmsnorm(float *out, const float *x, const float *w, int n, float eps) {
#ifdef SKV_HAVE_X86
    if (AVX512_ON()) {
        skv_rmsnorm_avx512(out, x, w, n, eps);
        return;
    }
    if (SIMD_ON()) {
        skv_rmsnorm_avx2(out, x, w, n, eps);
        return;
    }
#endif
    skv_rmsnorm_ref(out, x, w, n, eps);
}

void skv_rope(float *x, int head_dim, int n_rot, double pos, float theta) {
#ifdef SKV_HAVE_X86
    if (SIMD_ON()) {
        skv_rope_avx2(x, head_dim, n_rot, pos, theta);
        return;
    }
#endif
    skv_rope_ref(x, head_dim, n_rot, pos, theta);
}

void skv_softmax(float *x, int n) {
#ifdef SKV_HAVE_X86
    if (AVX512_ON()) {
        skv_softmax_avx512(x, n);
        return;
    }
    if (SIMD_ON()) {
        skv_softmax_avx2(x, n);
        return;
    }
#endif
    skv_softmax_ref(x, n);
}

void skv_softmax_sum(double *acc, float *x, int n, float scale) {
#ifdef SKV_HAVE_X86
    if (AVX512_ON()) {
        skv_softmax_sum_avx512(acc, x, n, scale);
        return;
    }
    if (SIMD_ON()) {
        skv_softmax_sum_avx2(acc, x, n, scale);
        return;
    }
#endif
    skv_softmax_sum_ref(acc, x, n, scale);
}

void skv_swiglu(float *out, const float *gate, const float *up, int n) {
#ifdef SKV_HAVE_X86
    if (AVX512_ON()) {
        skv_swiglu_avx512(out, gate, up, n);
        return;
    }
    if (SIMD_ON()) {
        skv_swiglu_avx2(out, gate, up, n);
        return;
    }
#endif
    skv_swiglu_ref(out, gate, up, n);
}

void skv_f16_row_from_f32(void *dst, const float *src, int64_t n) {
#ifdef SKV_HAVE_X86
    if (SIMD_ON()) {
        skv_f16_row_from_f32_avx2(dst, src, n);
        return;
    }
#endif
    uint8_t *d = dst;
    for (int64_t i = 0; i < n; i++) {
        uint16_t h = skv_f32_to_f16(src[i]);
        memcpy(d + 2 * i, &h, 2);
    }
}

void skv_f16_row_to_f32(float *dst, const void *src, int64_t n) {
#ifdef SKV_HAVE_X86
    if (SIMD_ON()) {
        skv_f16_row_to_f32_avx2(dst, src, n);
        return;
    }
#endif
    const uint8_t *s = src;
    for (int64_t i = 0; i < n; i++) {
        uint16_t h;
        memcpy(&h, s + 2 * i, 2);
        if ((h & 0x7c00u) == 0x7c00u && (h & 0x3ffu)) h |= 0x200u; /* NaN: quiet, as F16C */
        dst[i] = skv_f16_to_f32(h);
    }
}

float skv_dot_f32(const float *a, const float *b, int n) {
#ifdef SKV_HAVE_X86
    if (SIMD_ON()) return skv_dot_f32_avx2(a, b, n);
#endif
    float s = 0.0f;
    for (int i = 0; i < n; i++) s += a[i] * b[i];
    return s;
}

void skv_attn_group_lse(float *out, float *lse, const float *q, int g, int d, const void *k,
                        const void *v, skv_type kv_type, int n, float scale) {
    if (g <= 0 || d <= 0) return;
    size_t rb = attn_row_bytes(kv_type, d);
    if (n <= 0 || rb == 0) {
        memset(out, 0, sizeof(float) * (size_t)g * d);
        if (lse)
            for (int i = 0; i < g; i++) lse[i] = -INFINITY;
        return;
    }
#ifdef SKV_HAVE_X86
    if (AVX512_ON() && d % 16 == 0) {
        skv_attn_group_avx512(out, lse, q, g, d, k, v, kv_type, n, scale);
        return;
    }
    if (SIMD_ON() && d % 8 == 0) {
        skv_attn_group_avx2(out, lse, q, g, d, k, v, kv_type, n, scale);
        return;
    }
#endif
    attn_group_scalar(out, lse, q, g, d, k, v, kv_type, rb, n, scale);
}

void skv_attn_group(float *out, const float *q, int g, int d, const void *k, const void *v,
                    skv_type kv_type, int n, float scale) {
    skv_attn_group_lse(out, NULL, q, g, d, k, v, kv_type, n, scale);
}
