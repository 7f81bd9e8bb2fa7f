/* The smallest complete use of the loader: open a store, run two epochs of
 * shuffled, augmented float32 batches, and print what arrived.
 *   cc consume.c $(pkg-config --cflags --libs dlcache) -o consume
 *   ./consume train.dlc */
#include <dlcache/loader.h>

#include <stdio.h>

static void log_line(void *user, dlc_log_level level, const char *msg)
{
    (void)user;
    fprintf(stderr, "dlcache[%d]: %s\n", (int)level, msg);
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: %s STORE\n", argv[0]);
        return 2;
    }
    dlc_loader_config cfg;
    dlc_loader_config_init(&cfg); /* defaults: shuffle, batch 256, random crop 224, flip 0.5 */
    cfg.batch_size = 64;
    cfg.augment = DLC_AUGMENT_RANDOM_RESIZED_CROP;
    cfg.dtype = DLC_DTYPE_FLOAT32; /* NCHW, (x/255 - mean) / std with ImageNet's mean/std */
    cfg.seed = 42;
    cfg.log = log_line;

    dlc_loader *loader = NULL;
    dlc_status rc = dlc_loader_open(argv[1], &cfg, &loader);
    if (rc != DLC_OK) {
        fprintf(stderr, "open: %s: %s\n", dlc_strerror(rc), dlc_errmsg());
        return 1;
    }
    for (uint64_t epoch = 0; epoch < 2 && rc >= 0; epoch++) {
        dlc_loader_set_epoch(loader, epoch); /* a new order and new crops each epoch */
        uint64_t samples = 0;
        dlc_batch b;
        while ((rc = dlc_loader_next(loader, &b)) == DLC_OK) {
            /* b.data: b.shape[0] x 3 x 224 x 224 floats, valid until the next call. */
            samples += b.count;
        }
        if (rc == DLC_END)
            printf("epoch %llu: %llu samples in %llu batches\n", (unsigned long long)epoch,
                   (unsigned long long)samples,
                   (unsigned long long)dlc_loader_batches_per_epoch(loader));
    }
    if (rc < 0)
        fprintf(stderr, "next: %s: %s\n", dlc_strerror(rc), dlc_errmsg());
    dlc_loader_stats st;
    dlc_loader_get_stats(loader, &st);
    printf("waited %.3f s for data over %llu batches\n", st.wait_seconds,
           (unsigned long long)st.batches);
    dlc_loader_close(loader);
    return rc < 0 ? 1 : 0;
}
