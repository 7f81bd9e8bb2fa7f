/* Drawing one sample's ops: torchvision's TrivialAugmentWide, RandAugment (with timm's mstd) and
 * AutoAugment's ImageNet policy, color jitter, grayscale, blur and solarize. */
#include "aug_internal.h"

dlc_status dlc__aug_config_check(const dlc__aug_config *cfg, const char *what)
{
    (void)cfg;
    return dlc__errorf(DLC_ENOSYS, "%s: augmentation is not implemented yet", what);
}

void dlc__aug_draw_policy(const dlc__aug_config *cfg, uint32_t width, uint32_t height,
                          dlc__rng *rng, dlc__aug_record *rec)
{
    (void)cfg;
    (void)width;
    (void)height;
    (void)rng;
    (void)rec;
}

void dlc__aug_draw(const dlc__aug_config *cfg, uint32_t width, uint32_t height, uint32_t channels,
                   dlc__rng *rng, dlc__aug_record *rec)
{
    (void)channels;
    rec->n = 0;
    dlc__aug_draw_policy(cfg, width, height, rng, rec);
}
