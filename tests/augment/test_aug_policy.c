/* The policies' draws against torchvision 0.14's sampling (autoaugment.py, transforms.py): over
 * many draws from fixed streams, the frequencies of each (op, sign, magnitude) outcome match the
 * probabilities computed here from torchvision's own tables (a chi-square test at p = 1e-4, the
 * seeds fixed, so the result never changes from run to run). The tables below are written from
 * torchvision's source independently of loader/augment/aug_policy.c. */
#include "aug_internal.h"

#include <criterion/criterion.h>

#include <math.h>
#include <stdio.h>
#include <string.h>

#define MAXCAT 2048

/* One outcome: up to 2 ops, each (record op id, sign bit, |magnitude|). */
typedef struct outcome {
    int n;
    uint8_t op[2];
    int neg[2];
    double mag[2];
} outcome;

typedef struct table {
    int n;
    outcome o[MAXCAT];
    double p[MAXCAT];
    long count[MAXCAT];
    long stray; /* Draws that are none of the outcomes. */
} table;

static int same(const outcome *a, const outcome *b)
{
    if (a->n != b->n)
        return 0;
    for (int i = 0; i < a->n; i++)
        if (a->op[i] != b->op[i] || a->neg[i] != b->neg[i] ||
            fabs(a->mag[i] - b->mag[i]) > 1e-4 * (1.0 + fabs(b->mag[i])))
            return 0;
    return 1;
}

static void expect(table *t, const outcome *o, double p)
{
    for (int i = 0; i < t->n; i++)
        if (same(&t->o[i], o)) {
            t->p[i] += p;
            return;
        }
    cr_assert_lt(t->n, MAXCAT);
    t->o[t->n] = *o;
    t->p[t->n] = p;
    t->count[t->n] = 0;
    t->n++;
}

static void observe(table *t, const outcome *o)
{
    for (int i = 0; i < t->n; i++)
        if (same(&t->o[i], o)) {
            t->count[i]++;
            return;
        }
    t->stray++;
}

/* Pearson's statistic over the outcomes, those expected fewer than 5 times pooled; asserts it is
 * below the 1e-4 quantile of chi-square (Wilson-Hilferty), no stray draw, and the probabilities
 * summing to 1. Returns the statistic. */
static double chi_square(const table *t, long n, const char *what)
{
    double psum = 0.0, stat = 0.0, pool_e = 0.0, pool_o = 0.0;
    int k = 0;
    for (int i = 0; i < t->n; i++) {
        psum += t->p[i];
        const double e = t->p[i] * (double)n;
        if (e < 5.0) {
            pool_e += e;
            pool_o += (double)t->count[i];
            continue;
        }
        stat += (t->count[i] - e) * (t->count[i] - e) / e;
        k++;
    }
    if (pool_e > 0.0) {
        stat += (pool_o - pool_e) * (pool_o - pool_e) / pool_e;
        k++;
    }
    cr_assert_lt(fabs(psum - 1.0), 1e-9, "%s: expected probabilities sum to %.12f", what, psum);
    cr_assert_eq(t->stray, 0, "%s: %ld draws are no outcome of torchvision's", what, t->stray);
    const double df = k - 1, z = 3.719;
    const double crit = df * pow(1.0 - 2.0 / (9.0 * df) + z * sqrt(2.0 / (9.0 * df)), 3.0);
    cr_assert_lt(stat, crit, "%s: chi-square %.1f >= %.1f (%d categories, %ld draws)", what, stat,
                 crit, k, n);
    return stat;
}

/* torchvision's op names in _augmentation_space order and the record op each becomes. */
enum { IDN, SHX, SHY, TRX, TRY, ROT, BRI, COL, CON, SHA, POS, SOL, AUC, EQU, INV };
static const uint8_t rec_op[] = {
    DLC__AUG_IDENTITY,     DLC__AUG_SHEAR_X,   DLC__AUG_SHEAR_Y,    DLC__AUG_TRANSLATE_X,
    DLC__AUG_TRANSLATE_Y,  DLC__AUG_ROTATE,    DLC__AUG_BRIGHTNESS, DLC__AUG_SATURATION,
    DLC__AUG_CONTRAST,     DLC__AUG_SHARPNESS, DLC__AUG_POSTERIZE,  DLC__AUG_SOLARIZE,
    DLC__AUG_AUTOCONTRAST, DLC__AUG_EQUALIZE,  DLC__AUG_INVERT,
};

static int is_signed(int p)
{
    return p >= SHX && p <= SHA;
}

/* The magnitude table entry of op p, bin i of `bins`, as torchvision writes it (wide:
 * TrivialAugmentWide's space, else RandAugment's and AutoAugment's), in double. */
static double tv_magnitude(int wide, int p, int i, int bins, int w, int h)
{
    const double f = (double)i / (bins - 1);
    switch (p) {
    case SHX:
    case SHY:
        return (wide ? 0.99 : 0.3) * f;
    case TRX:
        return (wide ? 32.0 : 150.0 / 331.0 * w) * f;
    case TRY:
        return (wide ? 32.0 : 150.0 / 331.0 * h) * f;
    case ROT:
        return (wide ? 135.0 : 30.0) * f;
    case BRI:
    case COL:
    case CON:
    case SHA:
        return (wide ? 0.99 : 0.9) * f;
    case POS:
        return 8 - nearbyint(i / ((bins - 1) / (wide ? 6.0 : 4.0)));
    case SOL:
        return 255.0 * (1.0 - f);
    default:
        return 0.0;
    }
}

static outcome of_op(const dlc__aug_op *op)
{
    outcome o = {.n = 1};
    o.op[0] = op->op;
    o.neg[0] = signbit(op->magnitude) != 0;
    o.mag[0] = fabs(op->magnitude);
    return o;
}

static dlc__rng stream(uint64_t key)
{
    dlc__rng r = {.key = dlc__mix64(key), .ctr = 0};
    return r;
}

Test(aug_policy, trivial_augment_wide_matches_torchvision)
{
    const int bins = 31, n_space = 14;
    static table t;
    memset(&t, 0, sizeof t);
    for (int p = 0; p < n_space; p++) {
        if (p == IDN || p == AUC || p == EQU) {
            expect(&t, &(outcome){.n = 1, .op = {rec_op[p]}}, 1.0 / n_space);
            continue;
        }
        for (int i = 0; i < bins; i++) {
            const double m = tv_magnitude(1, p, i, bins, 224, 224);
            if (is_signed(p)) {
                expect(&t, &(outcome){.n = 1, .op = {rec_op[p]}, .neg = {0}, .mag = {m}},
                       0.5 / n_space / bins);
                expect(&t, &(outcome){.n = 1, .op = {rec_op[p]}, .neg = {1}, .mag = {m}},
                       0.5 / n_space / bins);
            } else {
                expect(&t, &(outcome){.n = 1, .op = {rec_op[p]}, .mag = {m}}, 1.0 / n_space / bins);
            }
        }
    }
    const dlc__aug_config cfg = {.policy = DLC__AUG_POLICY_TRIVIAL_WIDE,
                                 .num_magnitude_bins = (uint32_t)bins};
    cr_assert_eq(dlc__aug_config_check(&cfg, "test"), DLC_OK);
    const long n = 400000;
    dlc__aug_record rec;
    for (long s = 0; s < n; s++) {
        dlc__rng r = stream(0x7a + (uint64_t)s);
        dlc__aug_draw(&cfg, 224, 224, 3, &r, &rec);
        cr_assert_eq(rec.n, 1);
        const outcome o = of_op(&rec.ops[0]);
        observe(&t, &o);
    }
    chi_square(&t, n, "TrivialAugmentWide");
}

/* RandAugment(num_ops, magnitude, num_magnitude_bins): each op independently one of 14 at the
 * fixed bin, with a random sign; every slot counts as one draw. */
static void rand_augment_case(int num_ops, int magnitude, int bins, int w, int h, uint64_t seed)
{
    static table t;
    memset(&t, 0, sizeof t);
    for (int p = 0; p < 14; p++) {
        const double m = tv_magnitude(0, p, magnitude, bins, w, h);
        if (is_signed(p)) {
            expect(&t, &(outcome){.n = 1, .op = {rec_op[p]}, .neg = {0}, .mag = {m}}, 0.5 / 14);
            expect(&t, &(outcome){.n = 1, .op = {rec_op[p]}, .neg = {1}, .mag = {m}}, 0.5 / 14);
        } else {
            expect(&t, &(outcome){.n = 1, .op = {rec_op[p]}, .mag = {m}}, 1.0 / 14);
        }
    }
    const dlc__aug_config cfg = {.policy = DLC__AUG_POLICY_RAND,
                                 .num_ops = (uint32_t)num_ops,
                                 .magnitude = (float)magnitude,
                                 .num_magnitude_bins = (uint32_t)bins};
    cr_assert_eq(dlc__aug_config_check(&cfg, "test"), DLC_OK);
    const long n = 100000;
    dlc__aug_record rec;
    for (long s = 0; s < n; s++) {
        dlc__rng r = stream(seed + (uint64_t)s);
        dlc__aug_draw(&cfg, (uint32_t)w, (uint32_t)h, 3, &r, &rec);
        cr_assert_eq(rec.n, (uint32_t)num_ops);
        for (int k = 0; k < num_ops; k++) {
            const outcome o = of_op(&rec.ops[k]);
            observe(&t, &o);
        }
    }
    chi_square(&t, n * num_ops, "RandAugment");
}

Test(aug_policy, rand_augment_matches_torchvision)
{
    rand_augment_case(2, 9, 31, 224, 224, 0x1000000);
    /* Translations are a fraction of the image's width and height. */
    rand_augment_case(3, 30, 31, 160, 96, 0x2000000);
    rand_augment_case(1, 0, 11, 64, 64, 0x3000000);
}

/* The AutoAugment ImageNet table, written from torchvision's _get_policies (op, p, bin; -1 none).
 */
static const struct {
    int op;
    double p;
    int bin;
} aa[25][2] = {
    {{POS, 0.4, 8}, {ROT, 0.6, 9}},   {{SOL, 0.6, 5}, {AUC, 0.6, -1}},
    {{EQU, 0.8, -1}, {EQU, 0.6, -1}}, {{POS, 0.6, 7}, {POS, 0.6, 6}},
    {{EQU, 0.4, -1}, {SOL, 0.2, 4}},  {{EQU, 0.4, -1}, {ROT, 0.8, 8}},
    {{SOL, 0.6, 3}, {EQU, 0.6, -1}},  {{POS, 0.8, 5}, {EQU, 1.0, -1}},
    {{ROT, 0.2, 3}, {SOL, 0.6, 8}},   {{EQU, 0.6, -1}, {POS, 0.4, 6}},
    {{ROT, 0.8, 8}, {COL, 0.4, 0}},   {{ROT, 0.4, 9}, {EQU, 0.6, -1}},
    {{EQU, 0.0, -1}, {EQU, 0.8, -1}}, {{INV, 0.6, -1}, {EQU, 1.0, -1}},
    {{COL, 0.6, 4}, {CON, 1.0, 8}},   {{ROT, 0.8, 8}, {COL, 1.0, 2}},
    {{COL, 0.8, 8}, {SOL, 0.8, 7}},   {{SHA, 0.4, 7}, {INV, 0.6, -1}},
    {{SHX, 0.6, 5}, {EQU, 1.0, -1}},  {{COL, 0.4, 0}, {EQU, 0.6, -1}},
    {{EQU, 0.4, -1}, {SOL, 0.2, 4}},  {{SOL, 0.6, 5}, {AUC, 0.6, -1}},
    {{INV, 0.6, -1}, {EQU, 1.0, -1}}, {{COL, 0.6, 4}, {CON, 1.0, 8}},
    {{EQU, 0.8, -1}, {EQU, 0.6, -1}},
};

Test(aug_policy, auto_augment_imagenet_matches_torchvision)
{
    static table t;
    memset(&t, 0, sizeof t);
    /* Every sub-policy, every apply pattern, every sign pattern: a whole record's outcome. */
    for (int s = 0; s < 25; s++)
        for (int apply = 0; apply < 4; apply++)
            for (int signs = 0; signs < 4; signs++) {
                double p = 1.0 / 25 * 0.25; /* The two signs are drawn whatever applies. */
                outcome o = {0};
                for (int i = 0; i < 2; i++) {
                    const int on = (apply >> i) & 1;
                    p *= on ? aa[s][i].p : 1.0 - aa[s][i].p;
                    if (!on)
                        continue;
                    const int op = aa[s][i].op;
                    const double m =
                        aa[s][i].bin < 0 ? 0.0 : tv_magnitude(0, op, aa[s][i].bin, 10, 224, 224);
                    o.op[o.n] = rec_op[op];
                    /* signs[i] == 0 negates a signed op's magnitude. */
                    o.neg[o.n] = is_signed(op) && ((signs >> i) & 1) == 0;
                    o.mag[o.n] = m;
                    o.n++;
                }
                if (p > 0.0)
                    expect(&t, &o, p);
            }
    const dlc__aug_config cfg = {.policy = DLC__AUG_POLICY_AUTO_IMAGENET};
    cr_assert_eq(dlc__aug_config_check(&cfg, "test"), DLC_OK);
    const long n = 300000;
    dlc__aug_record rec;
    for (long s = 0; s < n; s++) {
        dlc__rng r = stream(0x5000000 + (uint64_t)s);
        dlc__aug_draw(&cfg, 224, 224, 3, &r, &rec);
        cr_assert_leq(rec.n, 2);
        outcome o = {.n = (int)rec.n};
        for (uint32_t k = 0; k < rec.n; k++) {
            const outcome e = of_op(&rec.ops[k]);
            o.op[k] = e.op[0];
            o.neg[k] = e.neg[0];
            o.mag[k] = e.mag[0];
        }
        observe(&t, &o);
    }
    chi_square(&t, n, "AutoAugment ImageNet");
}

/* The normal CDF. */
static double phi(double x)
{
    return 0.5 * erfc(-x / sqrt(2.0));
}

Test(aug_policy, rand_augment_mstd_draws_timm_normal_levels)
{
    /* rand-m9-mstd0.5 with 31 bins: each op's level is normal(9, 0.5) clipped to [0, 30]; with
     * Rotate's 30 degrees over 30 bins, |angle| is the level itself. Levels in bins of 0.25
     * around 9 against the normal's probabilities. */
    const double mu = 9.0, sd = 0.5;
    const dlc__aug_config cfg = {.policy = DLC__AUG_POLICY_RAND,
                                 .num_ops = 2,
                                 .magnitude = (float)mu,
                                 .num_magnitude_bins = 31,
                                 .mstd = (float)sd};
    cr_assert_eq(dlc__aug_config_check(&cfg, "test"), DLC_OK);
    enum { NB = 14 };
    long count[NB + 2] = {0};
    long n = 0;
    double sum = 0.0;
    dlc__aug_record rec;
    for (long s = 0; s < 200000; s++) {
        dlc__rng r = stream(0x6000000 + (uint64_t)s);
        dlc__aug_draw(&cfg, 224, 224, 3, &r, &rec);
        for (uint32_t k = 0; k < rec.n; k++) {
            if (rec.ops[k].op != DLC__AUG_ROTATE)
                continue;
            const double level = fabs(rec.ops[k].magnitude);
            const int b = level < 7.25     ? 0
                          : level >= 10.75 ? NB + 1
                                           : 1 + (int)((level - 7.25) / 0.25);
            count[b]++;
            sum += level;
            n++;
        }
    }
    double stat = 0.0;
    for (int b = 0; b < NB + 2; b++) {
        const double lo = b == 0 ? -INFINITY : 7.25 + 0.25 * (b - 1);
        const double hi = b == NB + 1 ? INFINITY : 7.25 + 0.25 * b;
        const double e = n * (phi((hi - mu) / sd) - phi((lo - mu) / sd));
        stat += (count[b] - e) * (count[b] - e) / e;
    }
    /* 15 degrees of freedom: the 1e-4 quantile is 44.3. */
    cr_assert_lt(stat, 44.3, "chi-square %.1f over %ld Rotate levels", stat, n);
    cr_assert_lt(fabs(sum / n - mu), 0.01, "mean level %f", sum / n);

    /* mstd = inf: uniform in [0, magnitude]; a large mstd clips at the last bin and at 0. */
    dlc__aug_config u = cfg;
    u.mstd = INFINITY;
    dlc__aug_config wide = cfg;
    wide.mstd = 100.0f;
    long at_top = 0, at_zero = 0, total = 0;
    for (long s = 0; s < 20000; s++) {
        dlc__rng r = stream(0x7000000 + (uint64_t)s);
        dlc__aug_draw(&u, 224, 224, 3, &r, &rec);
        for (uint32_t k = 0; k < rec.n; k++)
            if (rec.ops[k].op == DLC__AUG_ROTATE)
                cr_assert_leq(fabs(rec.ops[k].magnitude), 9.0f);
        r = stream(0x8000000 + (uint64_t)s);
        dlc__aug_draw(&wide, 224, 224, 3, &r, &rec);
        for (uint32_t k = 0; k < rec.n; k++)
            if (rec.ops[k].op == DLC__AUG_ROTATE) {
                const float a = fabsf(rec.ops[k].magnitude);
                cr_assert_leq(a, 30.0f);
                at_top += a == 30.0f;
                at_zero += a == 0.0f;
                total++;
            }
    }
    /* P(level >= 30) = 1 - phi(0.21) = 0.417, P(level <= 0) = phi(-0.09) = 0.464. */
    cr_assert_lt(fabs((double)at_top / total - 0.417), 0.03);
    cr_assert_lt(fabs((double)at_zero / total - 0.464), 0.03);
}

Test(aug_policy, color_jitter_grayscale_blur_solarize_draws)
{
    /* SimCLR's: RandomApply(ColorJitter(0.4, 0.4, 0.2, 0.1), p=0.8), RandomGrayscale(0.2),
     * GaussianBlur(23, (0.1, 2.0)) with p 0.5, RandomSolarize(128, p=0.2). */
    const dlc__aug_config cfg = {
        .jitter_p = 0.8f,
        .brightness = {0.6f, 1.4f},
        .contrast = {0.6f, 1.4f},
        .saturation = {0.8f, 1.2f},
        .hue = {-0.1f, 0.1f},
        .grayscale_p = 0.2f,
        .blur_p = 0.5f,
        .blur_sigma = {0.1f, 2.0f},
        .blur_kernel = {23, 23},
        .solarize_p = 0.2f,
        .solarize_threshold = 128.0f,
    };
    cr_assert_eq(dlc__aug_config_check(&cfg, "test"), DLC_OK);
    static table t; /* The jitter's order: 24 permutations, p 0.8 / 24 each, or no jitter. */
    memset(&t, 0, sizeof t);
    long seen[4][4] = {{0}};
    const long n = 200000;
    long jit = 0, gray = 0, blur = 0, sol = 0;
    double bsum = 0.0, hsum = 0.0, ssum = 0.0;
    dlc__aug_record rec;
    for (long s = 0; s < n; s++) {
        dlc__rng r = stream(0x9000000 + (uint64_t)s);
        dlc__aug_draw(&cfg, 64, 64, 3, &r, &rec);
        uint32_t k = 0;
        if (rec.n > 0 && rec.ops[0].op >= DLC__AUG_BRIGHTNESS && rec.ops[0].op <= DLC__AUG_HUE) {
            cr_assert_geq(rec.n, 4);
            jit++;
            for (int i = 0; i < 4; i++) {
                const dlc__aug_op *op = &rec.ops[i];
                seen[i][op->op - DLC__AUG_BRIGHTNESS]++;
                if (op->op == DLC__AUG_BRIGHTNESS) {
                    cr_assert(op->arg[0] >= 0.6f && op->arg[0] <= 1.4f);
                    bsum += op->arg[0];
                } else if (op->op == DLC__AUG_HUE) {
                    cr_assert(op->arg[0] >= -0.1f && op->arg[0] <= 0.1f);
                    hsum += op->arg[0];
                } else if (op->op == DLC__AUG_SATURATION) {
                    cr_assert(op->arg[0] >= 0.8f && op->arg[0] <= 1.2f);
                    ssum += op->arg[0];
                }
            }
            k = 4;
        }
        if (k < rec.n && rec.ops[k].op == DLC__AUG_GRAYSCALE)
            gray++, k++;
        if (k < rec.n && rec.ops[k].op == DLC__AUG_BLUR) {
            cr_assert_eq(rec.ops[k].arg[0], 23.0f);
            cr_assert_eq(rec.ops[k].arg[2], rec.ops[k].arg[3]);
            cr_assert(rec.ops[k].arg[2] >= 0.1f && rec.ops[k].arg[2] <= 2.0f);
            blur++, k++;
        }
        if (k < rec.n && rec.ops[k].op == DLC__AUG_SOLARIZE) {
            cr_assert_eq(rec.ops[k].arg[0], 128.0f);
            sol++, k++;
        }
        cr_assert_eq(k, rec.n, "ops out of the documented order");
    }
    /* Each position holds each of the four equally often (a uniform permutation). */
    static table pos;
    memset(&pos, 0, sizeof pos);
    for (int i = 0; i < 4; i++)
        for (int j = 0; j < 4; j++)
            expect(&pos, &(outcome){.n = 2, .op = {(uint8_t)i, (uint8_t)j}}, 1.0 / 16);
    for (int i = 0; i < 4; i++)
        for (int j = 0; j < 4; j++) {
            pos.count[i * 4 + j] = seen[i][j];
            cr_assert(same(&pos.o[i * 4 + j], &(outcome){.n = 2, .op = {(uint8_t)i, (uint8_t)j}}));
        }
    chi_square(&pos, 4 * jit, "ColorJitter order");
    /* Binomial frequencies within 4.5 standard deviations. */
    const struct {
        const char *name;
        long k;
        double p;
    } f[] = {{"jitter", jit, 0.8},
             {"grayscale", gray, 0.2},
             {"blur", blur, 0.5},
             {"solarize", sol, 0.2}};
    for (int i = 0; i < 4; i++) {
        const double sdv = sqrt(n * f[i].p * (1 - f[i].p));
        cr_assert_lt(fabs(f[i].k - n * f[i].p), 4.5 * sdv, "%s: %ld of %ld", f[i].name, f[i].k, n);
    }
    cr_assert_lt(fabs(bsum / jit - 1.0), 0.005);
    cr_assert_lt(fabs(ssum / jit - 1.0), 0.005);
    cr_assert_lt(fabs(hsum / jit), 0.002);
}

Test(aug_policy, absent_jitters_are_neither_drawn_nor_applied)
{
    /* ColorJitter(brightness=0.5) alone: only a brightness op. */
    const dlc__aug_config cfg = {.jitter_p = 1.0f,
                                 .brightness = {0.5f, 1.5f},
                                 .contrast = {1.0f, 1.0f},
                                 .saturation = {1.0f, 1.0f},
                                 .hue = {0.0f, 0.0f}};
    cr_assert_eq(dlc__aug_config_check(&cfg, "test"), DLC_OK);
    dlc__aug_record rec;
    for (int s = 0; s < 100; s++) {
        dlc__rng r = stream((uint64_t)s);
        dlc__aug_draw(&cfg, 8, 8, 3, &r, &rec);
        cr_assert_eq(rec.n, 1);
        cr_assert_eq(rec.ops[0].op, DLC__AUG_BRIGHTNESS);
    }
    /* All zero: nothing at all. */
    const dlc__aug_config none = {0};
    cr_assert_eq(dlc__aug_config_check(&none, "test"), DLC_OK);
    dlc__rng r = stream(1);
    dlc__aug_draw(&none, 8, 8, 3, &r, &rec);
    cr_assert_eq(rec.n, 0);
}

Test(aug_policy, draws_are_a_pure_function_of_the_stream)
{
    const dlc__aug_config cfg = {.policy = DLC__AUG_POLICY_RAND,
                                 .num_ops = 8,
                                 .magnitude = 9,
                                 .num_magnitude_bins = 31,
                                 .mstd = 0.5f,
                                 .jitter_p = 1.0f,
                                 .brightness = {0.6f, 1.4f},
                                 .contrast = {0.6f, 1.4f},
                                 .saturation = {0.6f, 1.4f},
                                 .hue = {-0.1f, 0.1f},
                                 .grayscale_p = 1.0f,
                                 .blur_p = 1.0f,
                                 .blur_sigma = {0.1f, 2.0f},
                                 .blur_kernel = {9, 9},
                                 .solarize_p = 1.0f,
                                 .solarize_threshold = 128.0f};
    cr_assert_eq(dlc__aug_config_check(&cfg, "test"), DLC_OK);
    dlc__aug_record a, b;
    dlc__rng r1 = stream(42), r2 = stream(42);
    dlc__aug_draw(&cfg, 32, 32, 3, &r1, &a);
    dlc__aug_draw(&cfg, 32, 32, 3, &r2, &b);
    cr_assert_eq(a.n, 8 + 4 + 3, "the most ops fit the record");
    cr_assert_eq(memcmp(&a, &b, sizeof a), 0);
}

Test(aug_policy, config_check_names_the_bad_field)
{
    const struct {
        dlc__aug_config cfg;
        const char *needle;
    } bad[] = {
        {{.policy = 9}, "policy"},
        {{.policy = DLC__AUG_POLICY_TRIVIAL_WIDE, .num_magnitude_bins = 1}, "num_magnitude_bins"},
        {{.policy = DLC__AUG_POLICY_RAND, .num_ops = 0, .num_magnitude_bins = 31}, "num_ops"},
        {{.policy = DLC__AUG_POLICY_RAND, .num_ops = 9, .num_magnitude_bins = 31}, "num_ops"},
        {{.policy = DLC__AUG_POLICY_RAND, .num_ops = 2, .magnitude = 31, .num_magnitude_bins = 31},
         "magnitude"},
        {{.policy = DLC__AUG_POLICY_RAND,
          .num_ops = 2,
          .magnitude = 8.5f,
          .num_magnitude_bins = 31},
         "magnitude"},
        {{.policy = DLC__AUG_POLICY_RAND,
          .num_ops = 2,
          .magnitude = 9,
          .num_magnitude_bins = 31,
          .mstd = -1.0f},
         "mstd"},
        {{.grayscale_p = 1.5f}, "grayscale"},
        {{.jitter_p = 1.0f, .brightness = {-1.0f, 1.0f}, .contrast = {1, 1}, .saturation = {1, 1}},
         "brightness"},
        {{.jitter_p = 1.0f,
          .brightness = {1, 1},
          .contrast = {1, 1},
          .saturation = {1, 1},
          .hue = {0.0f, 0.7f}},
         "hue"},
        {{.blur_p = 0.5f, .blur_kernel = {4, 4}, .blur_sigma = {0.1f, 2.0f}}, "kernel_size"},
        {{.blur_p = 0.5f, .blur_kernel = {5, 5}, .blur_sigma = {0.0f, 2.0f}}, "sigma"},
        {{.solarize_p = 0.5f, .solarize_threshold = 300.0f}, "threshold"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        cr_assert_eq(dlc__aug_config_check(&bad[i].cfg, "view 2"), DLC_EINVAL, "case %zu", i);
        cr_assert(strstr(dlc_errmsg(), bad[i].needle) && strstr(dlc_errmsg(), "view 2"),
                  "case %zu: %s", i, dlc_errmsg());
    }
    /* timm's RandAugment: each of its options out of range, on a good config. */
    static const char *const timm_needles[] = {"n (num_ops 0)", "m (magnitude", "mstd",
                                               "mmax",          "p (1.5)",      "inc"};
    for (int k = -1; k < 6; k++) {
        dlc__aug_config c = {.policy = DLC__AUG_POLICY_TIMM_RAND,
                             .num_ops = 2,
                             .magnitude = 9,
                             .magnitude_max = 10,
                             .op_prob = 0.5f};
        c.num_ops = k == 0 ? 0 : c.num_ops;
        c.magnitude = k == 1 ? -1.0f : c.magnitude;
        c.mstd = k == 2 ? NAN : c.mstd;
        c.magnitude_max = k == 3 ? 0.0f : c.magnitude_max;
        c.op_prob = k == 4 ? 1.5f : c.op_prob;
        c.increasing = k == 5 ? 2 : c.increasing;
        if (k < 0) {
            cr_assert_eq(dlc__aug_config_check(&c, "view 2"), DLC_OK, "%s", dlc_errmsg());
            continue;
        }
        cr_assert_eq(dlc__aug_config_check(&c, "view 2"), DLC_EINVAL, "timm case %d", k);
        cr_assert(strstr(dlc_errmsg(), timm_needles[k]) && strstr(dlc_errmsg(), "timm"),
                  "timm case %d: %s", k, dlc_errmsg());
    }
}

Test(aug_policy, config_check_image_refuses_what_cannot_apply)
{
    const dlc__aug_config blur = {
        .blur_p = 0.5f, .blur_kernel = {23, 9}, .blur_sigma = {0.1f, 2.0f}};
    cr_assert_eq(dlc__aug_config_check(&blur, "view 1"), DLC_OK);
    cr_assert_eq(dlc__aug_config_check_image(&blur, 12, 5, 4, "view 1"), DLC_OK);
    cr_assert_eq(dlc__aug_config_check_image(&blur, 11, 5, 3, "view 1"), DLC_EINVAL);
    cr_assert(strstr(dlc_errmsg(), "view 1") && strstr(dlc_errmsg(), "width"), "%s", dlc_errmsg());
    cr_assert_eq(dlc__aug_config_check_image(&blur, 12, 4, 3, "view 1"), DLC_EINVAL);
    cr_assert(strstr(dlc_errmsg(), "height"), "%s", dlc_errmsg());
    const dlc__aug_config trivial = {.policy = DLC__AUG_POLICY_TRIVIAL_WIDE,
                                     .num_magnitude_bins = 31};
    cr_assert_eq(dlc__aug_config_check_image(&trivial, 224, 224, 1, "x"), DLC_OK);
    cr_assert_eq(dlc__aug_config_check_image(&trivial, 224, 224, 4, "x"), DLC_EINVAL);
    cr_assert(strstr(dlc_errmsg(), "4 channels"), "%s", dlc_errmsg());
}
