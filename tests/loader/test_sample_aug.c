/* The per-sample ops of a view group in the loader (loader/sample_aug.c): defaults that keep the
 * old bytes, RandomErasing's box and values, the drawn parameters (return_params), bytes that do
 * not depend on threads or prefetch, an exact resume, the refusals, the device path, and fused
 * equal to sequential (each drawn op applied alone with dlc__aug_apply_op()). */
/* dlc-test-label: threads */
#include "devsim.h"
#include "internal.h"
#include "loader_fixture.h"

#include <math.h>

#define N_REC 40u
#define SIDE 32u

/* Are the ops of loader/augment/ there (its bodies may be stubs that answer DLC_ENOSYS)? */
static int ops_available(void)
{
    dlc__aug_config c;
    memset(&c, 0, sizeof c);
    c.num_ops = 2;
    c.magnitude = 9;
    c.num_magnitude_bins = 31;
    c.jitter_p = 1;
    c.brightness[0] = 0.6f, c.brightness[1] = 1.4f;
    c.contrast[0] = c.contrast[1] = 1;
    c.saturation[0] = c.saturation[1] = 1;
    c.blur_kernel[0] = c.blur_kernel[1] = 3;
    c.blur_sigma[0] = 0.1f, c.blur_sigma[1] = 2;
    c.solarize_threshold = 128;
    return dlc__aug_config_check(&c, "probe") != DLC_ENOSYS;
}

static dlc_loader *open_ok(const char *path, const dlc_loader_config *c)
{
    dlc_loader *l = NULL;
    cr_assert_eq(dlc_loader_open(path, c, &l), DLC_OK, "%s", dlc_errmsg());
    return l;
}

static const dlc_batch_field *field(const dlc_batch *b, const char *name)
{
    for (uint32_t i = 0; i < b->num_fields; i++)
        if (strcmp(b->fields[i].name, name) == 0)
            return &b->fields[i];
    cr_assert_fail("no output \"%s\" in the batch", name);
    return NULL;
}

/* Hash every output of every batch of an epoch, with the labels and record numbers. */
static uint64_t all_outputs_hash(dlc_loader *l, uint64_t max_batches)
{
    XXH3_state_t *st = XXH3_createState();
    XXH3_64bits_reset(st);
    dlc_batch b;
    dlc_status rc;
    uint64_t n = 0;
    while (n < max_batches && (rc = dlc_loader_next(l, &b)) == DLC_OK) {
        for (uint32_t i = 0; i < b.num_fields; i++)
            XXH3_64bits_update(st, b.fields[i].data, b.fields[i].bytes);
        XXH3_64bits_update(st, b.labels, b.count * sizeof *b.labels);
        XXH3_64bits_update(st, b.indices, b.count * sizeof *b.indices);
        n++;
    }
    const uint64_t h = XXH3_64bits_digest(st);
    XXH3_freeState(st);
    return h;
}

/* Every option on that this build has: the ops when augment/ has them, erasing with noise. */
static void full_spec(dlc_augment_spec *a, int ops)
{
    dlc_augment_spec_init(a);
    a->erase_prob = 0.7f;
    a->erase_value = DLC_ERASE_NOISE;
    if (!ops)
        return;
    a->auto_augment = DLC_AUTO_AUGMENT_TRIVIAL_WIDE;
    a->jitter_prob = 0.8f;
    a->brightness[0] = 0.6f, a->brightness[1] = 1.4f;
    a->contrast[0] = 0.6f, a->contrast[1] = 1.4f;
    a->saturation[0] = 0.8f, a->saturation[1] = 1.2f;
    a->hue[0] = -0.1f, a->hue[1] = 0.1f;
    a->grayscale_prob = 0.2f;
    a->blur_prob = 0.5f;
    a->blur_kernel[0] = a->blur_kernel[1] = 5;
    a->solarize_prob = 0.2f;
}

static dlc_loader_config rrc_config(uint32_t dtype)
{
    dlc_loader_config c = fx_config();
    c.augment = DLC_AUGMENT_RANDOM_RESIZED_CROP;
    c.crop_h = 24;
    c.crop_w = 20;
    c.dtype = dtype;
    return c;
}

Test(sample_aug, defaults_give_the_bytes_they_always_gave)
{
    fx_dir d;
    fx_make_store(&d, N_REC, SIDE, SIDE, 4, 0);
    for (uint32_t dtype = DLC_DTYPE_UINT8; dtype <= DLC_DTYPE_FLOAT16; dtype++) {
        for (int rrc = 0; rrc < 2; rrc++) {
            dlc_loader_config c = rrc ? rrc_config(dtype) : fx_config();
            c.dtype = dtype;
            dlc_loader *l = open_ok(d.path, &c);
            const uint64_t plain = fx_epoch_hash(l, NULL, NULL, 0);
            dlc_loader_close(l);
            /* A spec with nothing on, and return_params: the images are the same bytes. */
            dlc_augment_spec a;
            dlc_augment_spec_init(&a);
            c.augment_specs = &a;
            c.num_augment_specs = 1;
            for (uint32_t rp = 0; rp < 2; rp++) {
                c.return_params = rp;
                l = open_ok(d.path, &c);
                cr_assert_eq(fx_epoch_hash(l, NULL, NULL, 0), plain,
                             "dtype %u rrc %d return_params %u", dtype, rrc, rp);
                dlc_loader_close(l);
            }
        }
    }
    fx_rmdir(&d);
}

Test(sample_aug, params_describe_the_crop_and_flip)
{
    fx_dir d;
    fx_make_store(&d, N_REC, SIDE, SIDE, 4, 0);
    dlc_loader_config c = fx_config();
    c.return_params = 1;
    dlc_loader *l = open_ok(d.path, &c);
    dlc_batch b;
    uint32_t flips = 0, seen = 0;
    while (dlc_loader_next(l, &b) == DLC_OK) {
        const dlc_batch_field *box = field(&b, "params_box"), *flip = field(&b, "params_flip");
        const dlc_batch_field *ops = field(&b, "params_ops"), *er = field(&b, "params_erase");
        cr_assert_eq(box->dtype, DLC_DTYPE_INT32);
        cr_assert_eq(box->ndim, 2);
        cr_assert_eq(box->shape[1], 4);
        cr_assert_eq(flip->ndim, 1);
        cr_assert_eq(box->field, DLC_NO_FIELD);
        cr_assert_eq(ops->shape[1], DLC_AUGMENT_MAX_OPS);
        cr_assert_eq(ops->shape[2], 2);
        for (uint32_t j = 0; j < b.count; j++, seen++) {
            const int32_t *bx = (const int32_t *)box->data + 4 * j;
            const int f = ((const uint8_t *)flip->data)[j];
            flips += (uint32_t)f;
            cr_assert_eq(bx[2], (int32_t)c.crop_h);
            cr_assert_eq(bx[3], (int32_t)c.crop_w);
            const uint8_t *img = (const uint8_t *)b.data + (size_t)j * c.crop_h * c.crop_w * 3;
            for (uint32_t y = 0; y < c.crop_h; y++)
                for (uint32_t x = 0; x < c.crop_w; x++)
                    for (uint32_t ch = 0; ch < 3; ch++) {
                        const uint32_t sx = (uint32_t)bx[1] + (f ? c.crop_w - 1 - x : x);
                        cr_assert_eq(img[(y * c.crop_w + x) * 3 + ch],
                                     tu_pixel(b.indices[j], (uint32_t)bx[0] + y, sx, ch),
                                     "record %llu pixel %u,%u", (unsigned long long)b.indices[j], y,
                                     x);
                    }
            /* No op, no erasing: -1 rows and a zero box. */
            cr_assert_eq(((const int32_t *)ops->data)[j * DLC_AUGMENT_MAX_OPS * 2], -1);
            for (int k = 0; k < 4; k++)
                cr_assert_eq(((const int32_t *)er->data)[4 * j + k], 0);
        }
    }
    cr_assert_eq(seen, N_REC);
    cr_assert(flips > 5 && flips < N_REC - 5, "%u flips of %u", flips, N_REC);
    dlc_loader_close(l);
    fx_rmdir(&d);
}

/* One epoch of a float32 loader with RandomErasing of @p value beside the same loader without:
 * each erased box holds what @p value says, everything else is untouched. */
static void erase_case(const char *path, uint32_t value, uint32_t dtype)
{
    dlc_loader_config c = rrc_config(dtype);
    dlc_loader *plain = open_ok(path, &c);
    dlc_augment_spec a;
    dlc_augment_spec_init(&a);
    a.erase_prob = 0.75f;
    a.erase_value = value;
    const float k[4] = {1.5f, -2.0f, 0.25f, 0};
    memcpy(a.erase_constant, k, sizeof k);
    c.augment_specs = &a;
    c.num_augment_specs = 1;
    c.return_params = 1;
    dlc_loader *er = open_ok(path, &c);
    const uint32_t H = c.crop_h, W = c.crop_w, C = 3;
    const size_t es = dlc_dtype_size(dtype), plane = (size_t)H * W;
    uint32_t erased = 0, total = 0;
    double sum = 0, sum2 = 0;
    uint64_t nv = 0;
    dlc_batch pb, eb;
    while (dlc_loader_next(plain, &pb) == DLC_OK) {
        cr_assert_eq(dlc_loader_next(er, &eb), DLC_OK, "%s", dlc_errmsg());
        const dlc_batch_field *box = field(&eb, "params_erase");
        for (uint32_t j = 0; j < pb.count; j++, total++) {
            const int32_t *e = (const int32_t *)box->data + 4 * j;
            const uint32_t t = (uint32_t)e[0], lft = (uint32_t)e[1], h = (uint32_t)e[2],
                           w = (uint32_t)e[3];
            if (h && w) {
                erased++;
                cr_assert(h < H && w < W && t + h <= H && lft + w <= W, "box %u %u %u %u", t, lft,
                          h, w);
            }
            const uint8_t *p = (const uint8_t *)pb.data + j * C * plane * es;
            const uint8_t *q = (const uint8_t *)eb.data + j * C * plane * es;
            for (uint32_t ch = 0; ch < C; ch++)
                for (uint32_t y = 0; y < H; y++)
                    for (uint32_t x = 0; x < W; x++) {
                        const size_t at = (ch * plane + (size_t)y * W + x) * es;
                        const int in = y >= t && y < t + h && x >= lft && x < lft + w;
                        if (!in) {
                            cr_assert_eq(memcmp(p + at, q + at, es), 0,
                                         "outside the box: sample %u ch %u (%u, %u)", total, ch, y,
                                         x);
                            continue;
                        }
                        float v;
                        const uint32_t hd =
                            dtype == DLC_DTYPE_BFLOAT16 ? DLC__HD_BFLOAT16 : DLC__HD_FLOAT16;
                        if (dtype == DLC_DTYPE_FLOAT32) {
                            memcpy(&v, q + at, 4);
                        } else {
                            uint16_t hb;
                            memcpy(&hb, q + at, 2);
                            v = dlc__hd_16_to_f32(hb, hd);
                        }
                        if (value == DLC_ERASE_ZERO)
                            cr_assert_eq(v, 0.0f);
                        else if (value == DLC_ERASE_CONSTANT)
                            cr_assert_eq(v,
                                         dtype == DLC_DTYPE_FLOAT32
                                             ? k[ch]
                                             : dlc__hd_16_to_f32(dlc__hd_f32_to_16(k[ch], hd), hd));
                        else {
                            cr_assert(isfinite(v));
                            sum += v, sum2 += (double)v * v, nv++;
                        }
                    }
        }
    }
    cr_assert_eq(dlc_loader_next(er, &eb), DLC_END);
    cr_assert_eq(total, N_REC);
    /* p = 0.75 over 40 samples, and most draws find a box. */
    cr_assert(erased > 15 && erased < N_REC, "%u of %u erased", erased, total);
    if (value == DLC_ERASE_NOISE) {
        const double mean = sum / (double)nv, var = sum2 / (double)nv - mean * mean;
        cr_assert(nv > 1000 && fabs(mean) < 0.1 && var > 0.85 && var < 1.15,
                  "noise: %llu values, mean %g, variance %g", (unsigned long long)nv, mean, var);
    }
    dlc_loader_close(plain);
    dlc_loader_close(er);
}

Test(sample_aug, erasing_writes_its_box_only)
{
    fx_dir d;
    fx_make_store(&d, N_REC, SIDE, SIDE, 4, 0);
    erase_case(d.path, DLC_ERASE_ZERO, DLC_DTYPE_FLOAT32);
    erase_case(d.path, DLC_ERASE_CONSTANT, DLC_DTYPE_FLOAT32);
    erase_case(d.path, DLC_ERASE_NOISE, DLC_DTYPE_FLOAT32);
    erase_case(d.path, DLC_ERASE_NOISE, DLC_DTYPE_FLOAT16);
    erase_case(d.path, DLC_ERASE_NOISE, DLC_DTYPE_BFLOAT16);
    erase_case(d.path, DLC_ERASE_CONSTANT, DLC_DTYPE_BFLOAT16);
    fx_rmdir(&d);
}

Test(sample_aug, bytes_independent_of_threads_and_prefetch)
{
    fx_dir d;
    fx_make_store(&d, N_REC, SIDE, SIDE, 4, 1);
    dlc_augment_spec a;
    full_spec(&a, ops_available());
    dlc_loader_config c = rrc_config(DLC_DTYPE_FLOAT16);
    c.augment_specs = &a;
    c.num_augment_specs = 1;
    c.return_params = 1;
    uint64_t first = 0;
    const uint32_t threads[] = {1, 2, 3}, prefetch[] = {1, 4, 7};
    for (int i = 0; i < 3; i++) {
        c.threads = threads[i];
        c.prefetch = prefetch[i];
        dlc_loader *l = open_ok(d.path, &c);
        const uint64_t h = all_outputs_hash(l, UINT64_MAX);
        dlc_loader_close(l);
        if (i == 0)
            first = h;
        cr_assert_eq(h, first, "threads %u prefetch %u", threads[i], prefetch[i]);
    }
    fx_rmdir(&d);
}

Test(sample_aug, resume_mid_epoch_is_exact_with_every_option)
{
    fx_dir d;
    fx_make_store(&d, N_REC, SIDE, SIDE, 4, 0);
    dlc_augment_spec a[2];
    full_spec(&a[0], ops_available());
    full_spec(&a[1], ops_available());
    a[1].erase_value = DLC_ERASE_ZERO;
    a[1].erase_prob = 1.0f;
    const dlc_view_spec views[2] = {
        {"g", 2, DLC_AUGMENT_RANDOM_RESIZED_CROP, 24, 24, {0.3f, 1}, {0.75f, 1.333f}, 0.5f},
        {"l", 3, DLC_AUGMENT_RANDOM_RESIZED_CROP, 12, 12, {0.05f, 0.3f}, {0.75f, 1.333f}, 0.5f},
    };
    dlc_loader_config c = rrc_config(DLC_DTYPE_FLOAT32);
    c.views = views;
    c.num_views = 2;
    c.augment_specs = a;
    c.num_augment_specs = 2;
    c.return_params = 1;
    c.batch_size = 4;
    /* The whole epoch, batch by batch. */
    dlc_loader *l = open_ok(d.path, &c);
    uint64_t want[16];
    for (int i = 0; i < 10; i++)
        want[i] = all_outputs_hash(l, 1);
    dlc_loader_close(l);
    /* Three batches, a save, and a fresh loader with other threads resumes. */
    l = open_ok(d.path, &c);
    for (int i = 0; i < 3; i++)
        cr_assert_eq(all_outputs_hash(l, 1), want[i]);
    uint8_t state[DLC_LOADER_STATE_SIZE];
    cr_assert_eq(dlc_loader_state_save(l, state), DLC_OK);
    dlc_loader_close(l);
    c.threads = 3;
    c.prefetch = 5;
    l = open_ok(d.path, &c);
    cr_assert_eq(dlc_loader_state_restore(l, state, sizeof state), DLC_OK, "%s", dlc_errmsg());
    for (int i = 3; i < 10; i++)
        cr_assert_eq(all_outputs_hash(l, 1), want[i], "batch %d after the resume", i);
    dlc_batch b;
    cr_assert_eq(dlc_loader_next(l, &b), DLC_END);
    dlc_loader_close(l);
    fx_rmdir(&d);
}

Test(sample_aug, view_groups_draw_their_own_ops_and_params)
{
    fx_dir d;
    fx_make_store(&d, N_REC, SIDE, SIDE, 4, 0);
    dlc_augment_spec a[2];
    dlc_augment_spec_init(&a[0]);
    dlc_augment_spec_init(&a[1]);
    a[0].erase_prob = 1.0f; /* Only the global views are erased. */
    const dlc_view_spec views[2] = {
        {"g", 2, DLC_AUGMENT_RANDOM_RESIZED_CROP, 24, 24, {0.3f, 1}, {0.75f, 1.333f}, 0.5f},
        {"l", 3, DLC_AUGMENT_RANDOM_RESIZED_CROP, 12, 12, {0.05f, 0.3f}, {0.75f, 1.333f}, 0.5f},
    };
    dlc_loader_config c = rrc_config(DLC_DTYPE_FLOAT32);
    c.views = views;
    c.num_views = 2;
    c.augment_specs = a;
    c.num_augment_specs = 2;
    c.return_params = 1;
    dlc_loader *l = open_ok(d.path, &c);
    dlc_batch b;
    cr_assert_eq(dlc_loader_next(l, &b), DLC_OK, "%s", dlc_errmsg());
    const dlc_batch_field *eg = field(&b, "params_erase_g"), *el = field(&b, "params_erase_l");
    const dlc_batch_field *bl = field(&b, "params_box_l");
    cr_assert_eq(eg->ndim, 3);
    cr_assert_eq(eg->shape[1], 2);
    cr_assert_eq(bl->shape[1], 3);
    cr_assert_eq(bl->shape[2], 4);
    uint32_t erased = 0;
    for (uint32_t j = 0; j < b.count * 2; j++)
        erased += ((const int32_t *)eg->data)[4 * j + 2] != 0;
    for (uint32_t j = 0; j < b.count * 3 * 4; j++)
        cr_assert_eq(((const int32_t *)el->data)[j], 0);
    cr_assert(erased > b.count, "%u of %u global views erased", erased, b.count * 2);
    dlc_loader_close(l);
    fx_rmdir(&d);
}

/* Open with @p c must fail with DLC_EINVAL and a message holding @p want. */
static void refused(const char *path, const dlc_loader_config *c, const char *want)
{
    dlc_loader *l = NULL;
    cr_assert_eq(dlc_loader_open(path, c, &l), DLC_EINVAL, "%s: opened", want);
    cr_assert_null(l);
    cr_assert(strstr(dlc_errmsg(), want), "want \"%s\" in: %s", want, dlc_errmsg());
}

Test(sample_aug, bad_specs_are_refused_by_name)
{
    fx_dir d;
    fx_make_store(&d, 8, SIDE, SIDE, 4, 0);
    dlc_loader_config c = fx_config();
    dlc_augment_spec a[2];
    dlc_augment_spec_init(&a[0]);
    dlc_augment_spec_init(&a[1]);
    c.augment_specs = a;
    c.num_augment_specs = 1;
    a[0].erase_prob = 1.5f;
    refused(d.path, &c, "erase_prob");
    a[0].erase_prob = 0.5f;
    a[0].erase_scale[0] = 0.5f, a[0].erase_scale[1] = 0.2f;
    refused(d.path, &c, "erase_scale");
    dlc_augment_spec_init(&a[0]);
    a[0].erase_prob = 0.5f;
    a[0].erase_ratio[0] = 0;
    refused(d.path, &c, "erase_ratio");
    dlc_augment_spec_init(&a[0]);
    a[0].auto_augment = 7;
    refused(d.path, &c, "auto_augment");
    dlc_augment_spec_init(&a[0]);
    a[0].fill[1] = 256;
    refused(d.path, &c, "fill[1]");
    dlc_augment_spec_init(&a[0]);
    a[0].erase_prob = 0.5f;
    a[0].erase_value = DLC_ERASE_NOISE; /* uint8 output */
    refused(d.path, &c, "DLC_ERASE_NOISE");
    a[0].erase_value = DLC_ERASE_CONSTANT;
    a[0].erase_constant[0] = 0.5f;
    refused(d.path, &c, "erase_constant[0]");
    dlc_augment_spec_init(&a[0]);
    c.num_augment_specs = 2;
    refused(d.path, &c, "num_augment_specs");
    c.num_augment_specs = 1;
    a[0].struct_size = 0;
    refused(d.path, &c, "struct_size");
    a[0].struct_size = sizeof a[0] + 8;
    refused(d.path, &c, "struct_size");
    /* Two groups: the second entry must have the first's size. */
    dlc_augment_spec_init(&a[0]);
    const dlc_view_spec views[2] = {
        {"g", 1, DLC_AUGMENT_RANDOM_CROP, 12, 12, {0.08f, 1}, {0.75f, 1.333f}, 0.5f},
        {"l", 1, DLC_AUGMENT_RANDOM_CROP, 8, 8, {0.08f, 1}, {0.75f, 1.333f}, 0.5f},
    };
    c.views = views;
    c.num_views = 2;
    c.num_augment_specs = 2;
    a[1].struct_size = 8;
    refused(d.path, &c, "augment_specs[1].struct_size");
    dlc_augment_spec_init(&a[1]);
    a[1].grayscale_prob = -0.5f;
    refused(d.path, &c, "view group \"l\"");
    c.views = NULL;
    c.num_views = 0;
    c.num_augment_specs = 1;
    if (ops_available()) {
        /* A blur kernel whose half is not below the 12x10 view's sides. */
        dlc_augment_spec_init(&a[0]);
        a[0].blur_prob = 0.5f;
        a[0].blur_kernel[0] = a[0].blur_kernel[1] = 21;
        refused(d.path, &c, "field \"image\"");
    }
    c.augment_specs = NULL;
    c.num_augment_specs = 3;
    refused(d.path, &c, "num_augment_specs");
    c.num_augment_specs = 0;
    c.return_params = 2;
    refused(d.path, &c, "return_params");
    fx_rmdir(&d);
}

Test(sample_aug, a_policy_is_refused_beside_masks_and_boxes)
{
    if (!ops_available())
        cr_skip_test("the ops of loader/augment/ are not in this build yet");
    char *dir = tu_mkdtemp();
    char *path = tu_path(dir, "fields.dlc");
    cr_assert_eq(tu_make_fields_store(path, 8, SIDE, SIDE), DLC_OK, "%s", dlc_errmsg());
    dlc_loader_config c = fx_config();
    dlc_augment_spec a;
    dlc_augment_spec_init(&a);
    a.auto_augment = DLC_AUTO_AUGMENT_RAND;
    c.augment_specs = &a;
    c.num_augment_specs = 1;
    refused(path, &c, "masks and boxes follow the crop and flip only");
    /* Photometric ops alone are fine with them. */
    a.auto_augment = DLC_AUTO_AUGMENT_NONE;
    a.grayscale_prob = 0.5f;
    dlc_loader *l = open_ok(path, &c);
    dlc_loader_close(l);
    tu_rmtree(dir);
    free(dir);
    free(path);
}

/* ---- The device path (on the CPU stand-in, tests/lib/devsim.c) ---------------------------- */

static dlc_loader *open_device(const char *path, const dlc_loader_config *c, devsim *sim)
{
    dlc_loader *l = NULL;
    cr_assert_eq(dlc__loader_open_with(path, c, devsim_ops(sim), &l), DLC_OK, "%s", dlc_errmsg());
    cr_assert_eq(dlc_loader_device(l, NULL), 0);
    return l;
}

Test(sample_aug, device_path_gets_the_ops_and_erasing)
{
    fx_dir d;
    fx_make_store(&d, N_REC, SIDE, SIDE, 4, 0);
    devsim_opts opts;
    devsim_opts_init(&opts);
    devsim *sim = devsim_create(&opts);
    cr_assert_not_null(sim);
    const dlc__devops *o = devsim_ops(sim);
    dlc_augment_spec a;
    full_spec(&a, ops_available());
    dlc_loader_config c = rrc_config(DLC_DTYPE_FLOAT32);
    c.augment_specs = &a;
    c.num_augment_specs = 1;
    c.return_params = 1;
    c.device = 0;
    /* Every option on, erasing with noise included: the device's float32 batches (erased on the
     * device after the conversion) are the host's, params included. */
    dlc_loader *dl = open_device(d.path, &c, sim);
    c.device = -1;
    dlc_loader *hl = open_ok(d.path, &c);
    void *saved, *stream;
    cr_assert_eq(o->device_enter(o->ctx, 0, &saved), 0);
    cr_assert_eq(o->stream_create(o->ctx, &stream), 0);
    dlc_batch hb;
    dlc_device_batch db;
    uint32_t batches = 0;
    while (dlc_loader_next(hl, &hb) == DLC_OK) {
        cr_assert_eq(dlc_loader_next_device(dl, &db), DLC_OK, "%s", dlc_errmsg());
        cr_assert_eq(db.num_fields, hb.num_fields);
        dlc_device_dst dst[16];
        memset(dst, 0, sizeof dst);
        for (uint32_t i = 0; i < db.num_fields; i++)
            cr_assert_eq(
                o->dev_alloc(o->ctx, db.fields[i].bytes ? db.fields[i].bytes : 1, &dst[i].data), 0);
        cr_assert_eq(dlc_loader_device_emit(dl, &db, stream, dst, NULL), DLC_OK, "%s",
                     dlc_errmsg());
        cr_assert_eq(o->stream_sync(o->ctx, stream), 0);
        for (uint32_t i = 0; i < db.num_fields; i++) {
            cr_assert_eq(db.fields[i].bytes, hb.fields[i].bytes, "%s", hb.fields[i].name);
            cr_assert_eq(memcmp(dst[i].data, hb.fields[i].data, hb.fields[i].bytes), 0,
                         "output %s of batch %u", hb.fields[i].name, batches);
            o->dev_free(o->ctx, dst[i].data);
        }
        batches++;
    }
    cr_assert_eq(batches, N_REC / c.batch_size);
    o->stream_destroy(o->ctx, stream);
    o->device_leave(o->ctx, saved);
    dlc_loader_close(dl);
    dlc_loader_close(hl);
    devsim_destroy(sim, NULL);
    fx_rmdir(&d);
}

/* ---- Fused equals sequential -------------------------------------------------------------- */

Test(sample_aug, fused_equals_sequential)
{
    if (!ops_available())
        cr_skip_test("the ops of loader/augment/ are not in this build yet");
    fx_dir d;
    fx_make_store(&d, N_REC, SIDE, SIDE, 4, 1);
    dlc_augment_spec a;
    full_spec(&a, 1);
    a.erase_prob = 0;
    for (uint32_t policy = DLC_AUTO_AUGMENT_TRIVIAL_WIDE; policy <= DLC_AUTO_AUGMENT_IMAGENET;
         policy++) {
        a.auto_augment = policy;
        a.magnitude_std = policy == DLC_AUTO_AUGMENT_RAND ? 0.5f : 0.0f;
        /* The ops' loader, in uint8 and float32, and the crop and flip alone. */
        dlc_loader_config c = rrc_config(DLC_DTYPE_UINT8);
        dlc_loader *base = open_ok(d.path, &c);
        c.augment_specs = &a;
        c.num_augment_specs = 1;
        c.return_params = 1;
        dlc_loader *fused = open_ok(d.path, &c);
        c.dtype = DLC_DTYPE_FLOAT32;
        dlc_loader *fused_f = open_ok(d.path, &c);
        dlc__convert cv;
        dlc__convert_init(&cv, DLC_DTYPE_FLOAT32, 3, c.mean, c.std);
        const uint32_t H = c.crop_h, W = c.crop_w;
        const size_t view = (size_t)H * W * 3;
        uint8_t *img = malloc(view);
        float *conv = malloc(view * sizeof(float));
        const size_t scr_size = dlc__aug_scratch_bound(W, H, 3);
        void *scr = malloc(scr_size);
        uint32_t ops_seen = 0;
        dlc_batch bb, fb, ff;
        while (dlc_loader_next(base, &bb) == DLC_OK) {
            cr_assert_eq(dlc_loader_next(fused, &fb), DLC_OK, "%s", dlc_errmsg());
            cr_assert_eq(dlc_loader_next(fused_f, &ff), DLC_OK, "%s", dlc_errmsg());
            const dlc_batch_field *ops = field(&fb, "params_ops"),
                                  *args = field(&fb, "params_args");
            for (uint32_t j = 0; j < bb.count; j++) {
                memcpy(img, (const uint8_t *)bb.data + j * view, view);
                const int32_t *row =
                    (const int32_t *)ops->data + (size_t)j * DLC_AUGMENT_MAX_OPS * 2;
                const float *arg = (const float *)args->data + (size_t)j * DLC_AUGMENT_MAX_OPS * 8;
                for (uint32_t i = 0; i < DLC_AUGMENT_MAX_OPS && row[2 * i] >= 0; i++) {
                    dlc__aug_op op;
                    memset(&op, 0, sizeof op);
                    op.op = (uint8_t)row[2 * i];
                    op.flags = (uint8_t)row[2 * i + 1];
                    for (int k = 0; k < 3; k++)
                        op.fill[k] = (uint8_t)a.fill[k];
                    memcpy(op.arg, arg + 8 * i, sizeof op.arg);
                    cr_assert_eq(dlc__aug_apply_op(&op, img, W * 3, W, H, 3, scr, scr_size), DLC_OK,
                                 "%s", dlc_errmsg());
                    ops_seen++;
                }
                cr_assert_eq(memcmp(img, (const uint8_t *)fb.data + j * view, view), 0,
                             "policy %u: record %llu, uint8", policy,
                             (unsigned long long)bb.indices[j]);
                const dlc__box all = {0, 0, H, W};
                dlc__crop_convert(img, W * 3, all, 0, &cv, conv);
                cr_assert_eq(memcmp(conv, (const uint8_t *)ff.data + j * view * 4, view * 4), 0,
                             "policy %u: record %llu, float32", policy,
                             (unsigned long long)bb.indices[j]);
            }
        }
        cr_assert(ops_seen > N_REC, "policy %u: %u ops over %u samples", policy, ops_seen, N_REC);
        free(img);
        free(conv);
        free(scr);
        dlc_loader_close(base);
        dlc_loader_close(fused);
        dlc_loader_close(fused_f);
    }
    fx_rmdir(&d);
}

Test(sample_aug, a_mixture_of_one_store_draws_what_the_store_draws)
{
    fx_dir d;
    fx_make_store(&d, N_REC, SIDE, SIDE, 4, 0);
    dlc_augment_spec a;
    full_spec(&a, ops_available());
    dlc_loader_config c = rrc_config(DLC_DTYPE_FLOAT32);
    c.augment_specs = &a;
    c.num_augment_specs = 1;
    c.return_params = 1;
    dlc_loader *l = open_ok(d.path, &c);
    const uint64_t plain = all_outputs_hash(l, UINT64_MAX);
    dlc_loader_close(l);
    dlc_mix_source src;
    dlc_mix_source_init(&src);
    src.path = d.path;
    cr_assert_eq(dlc_loader_open_mix(&src, 1, NULL, &c, &l), DLC_OK, "%s", dlc_errmsg());
    cr_assert_eq(all_outputs_hash(l, UINT64_MAX), plain);
    dlc_loader_close(l);
    fx_rmdir(&d);
}

Test(sample_aug, uint8_erasing_writes_pixel_values)
{
    fx_dir d;
    fx_make_store(&d, N_REC, SIDE, SIDE, 4, 0);
    dlc_augment_spec a;
    dlc_augment_spec_init(&a);
    a.erase_prob = 1.0f;
    a.erase_value = DLC_ERASE_CONSTANT;
    const float k[4] = {7, 200, 255, 0};
    memcpy(a.erase_constant, k, sizeof k);
    dlc_loader_config c = fx_config();
    c.augment_specs = &a;
    c.num_augment_specs = 1;
    c.return_params = 1;
    dlc_loader *l = open_ok(d.path, &c);
    dlc_batch b;
    uint32_t erased = 0;
    while (dlc_loader_next(l, &b) == DLC_OK) {
        const dlc_batch_field *e = field(&b, "params_erase");
        for (uint32_t j = 0; j < b.count; j++) {
            const int32_t *bx = (const int32_t *)e->data + 4 * j;
            const uint8_t *img = (const uint8_t *)b.data + (size_t)j * c.crop_h * c.crop_w * 3;
            erased += bx[2] > 0;
            for (int32_t y = bx[0]; y < bx[0] + bx[2]; y++)
                for (int32_t x = bx[1]; x < bx[1] + bx[3]; x++)
                    for (uint32_t ch = 0; ch < 3; ch++)
                        cr_assert_eq(img[((size_t)y * c.crop_w + (size_t)x) * 3 + ch],
                                     (uint8_t)k[ch]);
        }
    }
    cr_assert(erased > N_REC / 2, "%u of %u erased", erased, N_REC);
    dlc_loader_close(l);
    fx_rmdir(&d);
}
