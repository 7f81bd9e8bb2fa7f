/**
 * @file loader.h
 * @brief Shuffled, augmented, collated batches from a store, at memory speed.
 *
 * The loader reads a store made by cachebuild or a writer and lends out batches. Worker
 * threads crop, flip and convert each sample straight from its view in the
 * memory map into its final place in a batch slot; slots form a ring of
 * `prefetch` batches allocated at open, so the hot path allocates nothing and
 * takes no lock per sample.
 *
 * Fields. A batch carries every field of the store, or those named in
 * config.fields, as ::dlc_batch_field outputs in schema order:
 *   - images: cropped (or RandomResizedCrop-ed, antialiased bilinear),
 *     flipped and converted as configured, 1, 3 or 4 channels, uint8 NHWC or
 *     float NCHW normalized with one mean/std per channel;
 *   - masks (DLC_FIELD_MASK): the same crop and flip with nearest neighbour,
 *     uint8 NHWC as stored, so class ids are never blended;
 *   - boxes (DLC_FIELD_BOXES): moved, scaled, flipped and clipped with the
 *     same crop; boxes left without area are dropped with the entries of their
 *     linked class field;
 *   - other arrays as stored: fixed shapes stacked [N, ...]; a variable
 *     leading dimension padded with zeros to the longest in the batch or to a
 *     fixed max_len with a lengths array, or the values end to end with
 *     offsets, chosen per field (dlc_field_option); bytes as values + offsets;
 *   - int and float fields as int64 and float64 [N].
 * The images, masks and boxes of a record move together: one crop box and
 * one flip per view, drawn on the size of the store's first image field
 * (which all of a record's images and masks must share), whatever the
 * selection, so choosing fields never changes another field's bytes. View
 * groups (dlc_view_spec) give K differently augmented views of every image
 * and mask per sample. Variable outputs are packed once per batch by the
 * worker that completes it; their slot room is the schema's largest record,
 * so memory follows batch x prefetch x the largest sample, not the store.
 *
 * Determinism: the order of samples and every augmentation parameter are a
 * pure function of (seed, epoch, rank, world size, position). The number of
 * threads, the prefetch depth and timing never change an output byte.
 *
 * Sharding follows torch's DistributedSampler: each epoch has one global
 * order of the store's records (a permutation when shuffling); it is padded
 * by repeating its first entries to a multiple of world_size (or cut to one
 * with drop_last), and rank r takes every world_size-th position starting at
 * r. With drop_last the last incomplete batch of a rank is dropped too.
 *
 * Lifetime of a batch: the ::dlc_batch filled by dlc_loader_next() and the
 * memory it points to are lent to the caller until dlc_loader_release() on
 * it or, when the caller already holds config.max_lent batches (1 by default),
 * the next dlc_loader_next(), which gives back the oldest; then the slot is
 * refilled. Each lent batch needs a ::dlc_batch of its own.
 *
 * Thread safety: one consumer thread at a time calls dlc_loader_* on a given
 * loader (the loader runs its own workers). Different loaders are independent.
 *
 * The device path. With config.device >= 0 and the CUDA plugin (libdlcache_cuda.so, found next
 * to libdlcache.so or through $DLCACHE_CUDA_PLUGIN) able to use that GPU, batches go to the GPU:
 *   - The slots are page-locked, allocated once at open. Workers crop and flip into them in
 *     uint8, as stored, whatever config.dtype says.
 *   - A copy thread of the loader moves each finished slot with one asynchronous copy (more only
 *     for a short last batch or variable-size outputs) on a stream of the loader's own into a
 *     ring of config.device_staging device buffers allocated at open, and records the batch's
 *     ready event. The slot is refilled only after that event has completed; a staging buffer
 *     is overwritten only after the work that the consumer enqueued on it (the release) has
 *     completed on the device. Neither wait ever blocks the device or the consumer's thread.
 *   - dlc_loader_next_device() lends the next staged batch: its shapes, host copies of the small
 *     per-sample arrays, and device pointers into the staging buffer.
 *   - dlc_loader_device_emit() enqueues on the caller's stream, in order: a wait for the ready
 *     event, the conversion of every image output (uint8 NHWC to config.dtype, normalized with
 *     config.mean and config.std, in config.device_layout; then RandomErasing and MixUp /
 *     CutMix when configured) and a device-to-device copy of every
 *     other output, into memory the caller owns; then the release. The caller's later work on
 *     that stream sees the outputs; nothing waits on the host.
 *   - Or lend mode, for a C caller that wants no kernel: dlc_loader_device_wait() on its stream,
 *     use the staged pointers there, then dlc_loader_device_release() on the same stream.
 * Outputs are bit-identical to the host path's batch with the same configuration: uint8 and
 * float16 exactly, float32 with 0 ulp of difference (the arithmetic is written once for both,
 * see docs/ARCHITECTURE.md). Every thread of the loader that calls CUDA makes config.device
 * current first; calls on the consumer's thread put back the context that was current before.
 * Without the plugin, a driver or any GPU, the loader opens anyway, serves host batches
 * (dlc_loader_next()), says why once through config.log, and dlc_loader_device() answers the
 * same question; a device ordinal beyond the GPUs present is DLC_EINVAL at open.
 *
 * Drawn parameters. With config.return_params, a batch carries after the fields, for each view
 * group G (the suffix `_G`; none for the default group, whose outputs have no view dimension), what
 * each of its K views drew, as ::dlc_batch_field outputs with field DLC_NO_FIELD, kind
 * DLC_FIELD_NDARRAY and layout DLC_LAYOUT_NONE (copied as they are on the device path):
 *   - `params_box_G`: int32 [N, K, 4]: top, left, height, width of the crop, in pixels of the
 *     record's first image as stored;
 *   - `params_flip_G`: uint8 [N, K]: 1 when the view was mirrored;
 *   - `params_ops_G`: int32 [N, K, DLC_AUGMENT_MAX_OPS, 2]: the ops applied to the uint8 view,
 *     in order: the ::dlc_op value (ops.h), -1 after the last, and flags (1: the op of the
 *     affine family turns about the center given in its arguments 6 and 7, else about the
 *     image's center);
 *   - `params_args_G`: float32 [N, K, DLC_AUGMENT_MAX_OPS, 8]: the arguments of each op (unused
 *     ones 0): the factor of the adjust ops; bits; threshold; kernel width, height, sigma x, y of
 *     gaussian_blur; the angle of rotate; angle, translate x, y, scale, shear x, y, center x, y
 *     of affine and of the policies' shear and translate ops; the fill is the spec's;
 *   - `params_magnitude_G`: float32 [N, K, DLC_AUGMENT_MAX_OPS]: the signed magnitude a policy
 *     drew for each of its ops, in torchvision's units (0 for the other ops);
 *   - `params_erase_G`: int32 [N, K, 4]: top, left, height, width of the box RandomErasing wrote,
 *     in the output's pixels; all 0 when it did not erase.
 * Applying a view's ops one at a time with dlc_op_apply() to its cropped and flipped uint8 view,
 * then converting (and erasing), gives the loader's bytes (a test checks it).
 *
 * Errors: DLC_OK, DLC_END (not an error: the epoch is over), DLC_EINVAL (bad
 * config, with the field named in dlc_errmsg()), DLC_ECORRUPT (a record that
 * fails its checksum or header check, with on_corrupt = DLC_CORRUPT_FAIL; the
 * message names the store and the record), DLC_ESTATE, DLC_ECUDA (a CUDA call of
 * the device path failed, named with CUDA's text), -errno.
 */
#ifndef DLCACHE_LOADER_H
#define DLCACHE_LOADER_H

#include <dlcache/status.h>
#include <dlcache/warm.h>
#include <dlcache/store.h>

#ifdef __cplusplus
extern "C" {
#endif

/** An open loader: its store, worker threads and batch slots. One consumer thread at a time. */
typedef struct dlc_loader dlc_loader;

/** How the epoch's global order is made. */
typedef enum dlc_sampler {
    DLC_SAMPLER_SEQUENTIAL = 0,    /**< 0, 1, 2, ... */
    DLC_SAMPLER_SHUFFLE = 1,       /**< A fresh permutation per (seed, epoch). */
    DLC_SAMPLER_WEIGHTED = 2,      /**< Draws with replacement, P(record) proportional to
                                        class_weights[label]. */
    DLC_SAMPLER_QUASI_RANDOM = 3,  /**< Shuffled groups of neighbouring records, shuffled again
                                        within a window: large sequential reads for stores
                                        larger than memory (io = direct). */
    DLC_SAMPLER_SHARD_WINDOWS = 4, /**< The order a set is streamed in (docs/STREAMING.md): per
                                        epoch the shards are permuted and dealt to `streams`
                                        streams, each stream is read in windows of
                                        `window_shards` shards whose records are fully
                                        permuted, and the streams are interleaved. Ranks of a
                                        world size that divides `streams` read disjoint shards.
                                        A pure function of (seed, epoch, the shards' record
                                        counts, window_shards, streams); a single store is one
                                        shard. */
} dlc_sampler;

/** Per-sample spatial augmentation. */
typedef enum dlc_augment {
    DLC_AUGMENT_CENTER_CROP = 0,         /**< Central crop_h x crop_w (evaluation). */
    DLC_AUGMENT_RANDOM_CROP = 1,         /**< A uniformly placed crop_h x crop_w window. */
    DLC_AUGMENT_RANDOM_RESIZED_CROP = 2, /**< torchvision RandomResizedCrop(scale, ratio) resized
                                             to crop_h x crop_w, antialiased bilinear. */
} dlc_augment;

/* Element types (::dlc_dtype) are in store.h. Images come out as DLC_DTYPE_UINT8 (pixels as
 * stored, layout NHWC) or DLC_DTYPE_FLOAT32 / DLC_DTYPE_FLOAT16 ((x/255 - mean) / std per
 * channel, layout NCHW); masks always as stored (uint8, NHWC); every other field in its stored
 * dtype. */

/** Layout of an image output. */
typedef enum dlc_layout {
    DLC_LAYOUT_NHWC = 0, /**< Samples, rows, columns, channels: the pixels as stored. */
    DLC_LAYOUT_NCHW = 1, /**< Samples, channels, rows, columns: planar, as torch models take it. */
    DLC_LAYOUT_NONE = 2, /**< Not an image: the field's own shape after the batch dimension. */
} dlc_layout;

/** How a field whose leading dimension varies per record (token ids, boxes, audio) and a bytes
 *  field go into a batch. */
typedef enum dlc_variable_mode {
    DLC_VARIABLE_PAD = 0,     /**< Zero-padded to the longest in the batch; NAME_lengths beside
                                   it. The default. */
    DLC_VARIABLE_PAD_TO = 1,  /**< Zero-padded, or cut, to max_len; NAME_lengths beside it. */
    DLC_VARIABLE_OFFSETS = 2, /**< The batch's values end to end, NAME_offsets (count + 1) beside
                                   them. Always used for bytes fields. */
} dlc_variable_mode;

/** Options of one field of the store; fields not named take the defaults. */
typedef struct dlc_field_option {
    const char *name;  /**< A field of the store. */
    uint32_t variable; /**< A ::dlc_variable_mode (variable ndarray fields). */
    uint32_t max_len;  /**< DLC_VARIABLE_PAD_TO: the leading dimension of every sample. */
} dlc_field_option;

/**
 * A group of views: @p count differently augmented crops of every image (and mask) of a sample,
 * as in self-supervised training (two global crops of 224 and six local crops of 96). Each view
 * draws its own parameters from the deterministic streams. The outputs of an image field F are
 * named F_NAME with shape [N, count, ...].
 */
typedef struct dlc_view_spec {
    const char *name;   /**< [A-Za-z0-9_]+, appended to the field's name. */
    uint32_t count;     /**< Views in the group, 1..64. */
    uint32_t augment;   /**< A ::dlc_augment. */
    uint32_t crop_h;    /**< Output height of the group. */
    uint32_t crop_w;    /**< Output width of the group. */
    float rrc_scale[2]; /**< RandomResizedCrop area fraction range. */
    float rrc_ratio[2]; /**< RandomResizedCrop aspect range. */
    float flip_prob;    /**< Horizontal flip probability. */
} dlc_view_spec;

/** Automatic augmentation policies (::dlc_augment_spec.auto_augment): torchvision 0.14's op
 *  sets, magnitude tables and signed magnitudes, applied to the uint8 view after its crop and
 *  flip (include/dlcache/ops.h names the ops). */
typedef enum dlc_auto_augment {
    DLC_AUTO_AUGMENT_NONE = 0,         /**< No policy (the default). */
    DLC_AUTO_AUGMENT_TRIVIAL_WIDE = 1, /**< TrivialAugmentWide(num_magnitude_bins): one op and one
                                            magnitude bin, both uniform, per view. */
    DLC_AUTO_AUGMENT_RAND = 2,         /**< RandAugment(num_ops, magnitude, num_magnitude_bins),
                                            with timm's magnitude noise magnitude_std. */
    DLC_AUTO_AUGMENT_IMAGENET = 3,     /**< AutoAugment(AutoAugmentPolicy.IMAGENET). */
    DLC_AUTO_AUGMENT_TIMM_RAND = 4,    /**< timm's RandAugment (rand_augment_transform, its own
                                            op set of 15 with SolarizeAdd and the relative
                                            translations): num_ops (timm's n), magnitude (m, on
                                            timm's 0..10 scale), magnitude_std (mstd),
                                            magnitude_max (mmax), increasing (inc), op_prob (p);
                                            timm's fill is the mean pixel (its img_mean). The
                                            ops run as torchvision's tensor path (nearest
                                            resampling), where timm runs PIL. */
} dlc_auto_augment;

/** What RandomErasing writes into the erased box (::dlc_augment_spec.erase_value). */
typedef enum dlc_erase_value {
    DLC_ERASE_ZERO = 0,     /**< 0 on the normalized output (torchvision's value=0, the default). */
    DLC_ERASE_NOISE = 1,    /**< A standard normal value per element (torchvision's
                                 value="random"): a counter-based function of the view's own
                                 key and the element's index in the box (channel, row,
                                 column), the same on the host and the device; |value| is
                                 at most 5.8 (24-bit uniforms into Box-Muller). */
    DLC_ERASE_CONSTANT = 2, /**< erase_constant[c] in channel c, on the normalized scale. */
} dlc_erase_value;

/** The most ops drawn for one view: the policy's (RandAugment's num_ops at most 8), then color
 *  jitter's four, grayscale, blur and solarize. Rows of the params_ops output. */
#define DLC_AUGMENT_MAX_OPS 16u

/**
 * Per-sample augmentation of one view group, beyond its crop and flip (dlc_loader_config.
 * augment_specs). Each view of the group draws its own parameters, after its crop and flip, from
 * the same deterministic stream (a pure function of seed, epoch, rank, world size, position and
 * view; never of the threads or prefetch), so a loader without any of these options gives the
 * bytes it always gave.
 *
 * Order of application, on the uint8 view after crop and flip and before the conversion to
 * config.dtype (so the device path gets them unchanged, converting after): the policy
 * (auto_augment), then color jitter (its parts in a random order per view, as torchvision's
 * ColorJitter), grayscale, Gaussian blur, solarize. RandomErasing comes last, after the
 * conversion, on the normalized output. On the device path it runs on the device after the
 * conversion (float dtypes; uint8 is erased in the slot before the copy), with the boxes drawn
 * by the workers and staged with the batch, so the bytes are the host path's, noise included;
 * in lend mode (dlc_loader_device_wait()) the staged uint8 images are not erased: params_erase
 * says where to. Before MixUp / CutMix on both paths. The ops change image outputs only: masks and
 * boxes follow the crop and flip alone, so a policy (whose ops move pixels) is refused with
 * them.
 *
 * Arrays of it: every entry has the struct_size that dlc_augment_spec_init() gave the first,
 * and the library steps through the array by it (a struct_size it does not know is DLC_EINVAL).
 */
typedef struct dlc_augment_spec {
    uint32_t struct_size;     /**< Set by dlc_augment_spec_init() (status.h, "How structs grow"). */
    float jitter_prob;        /**< Probability that color jitter applies to a view (default 1;
                                   torchvision's RandomApply([ColorJitter(...)], p)). */
    float brightness[2];      /**< Brightness factor range (default 1, 1: off). torchvision's
                                   ColorJitter(brightness=b) is (max(0, 1 - b), 1 + b). */
    float contrast[2];        /**< Contrast factor range (default 1, 1: off). */
    float saturation[2];      /**< Saturation factor range (default 1, 1: off). */
    float hue[2];             /**< Hue shift range within [-0.5, 0.5] (default 0, 0: off). */
    float grayscale_prob;     /**< RandomGrayscale's p (default 0); 3 equal channels out. */
    float blur_prob;          /**< Probability of a Gaussian blur (default 0: off). */
    float blur_sigma[2];      /**< Its sigma range, drawn uniformly (default 0.1, 2). */
    uint32_t blur_kernel[2];  /**< Its kernel width and height, odd (no default: required with
                                   blur_prob > 0). */
    float solarize_prob;      /**< Probability of solarize (default 0: off). */
    float solarize_threshold; /**< Pixels >= threshold are inverted (0..255; default 128). */
    uint32_t auto_augment;    /**< A ::dlc_auto_augment (default DLC_AUTO_AUGMENT_NONE). */
    uint32_t num_ops;         /**< RandAugment: ops per view, 1..8 (default 2). */
    float magnitude;          /**< RandAugment: the magnitude bin (default 9), below
                                   num_magnitude_bins. */
    uint32_t num_magnitude_bins; /**< RandAugment, TrivialAugmentWide: 2..1024 (default 31). */
    float magnitude_std;         /**< RandAugment: timm's mstd, the standard deviation of the
                                      normal noise added to the magnitude per op (default 0). */
    uint32_t fill[3];            /**< Per channel, 0..255: the value of the pixels a policy's
                                      geometric op uncovers (default 0). */
    float erase_prob;            /**< RandomErasing's p (default 0: off). */
    float erase_scale[2];        /**< Its area fraction range (default 0.02, 0.33). */
    float erase_ratio[2];        /**< Its aspect (height / width) range (default 0.3, 3.3). */
    uint32_t erase_value;        /**< A ::dlc_erase_value (default DLC_ERASE_ZERO). */
    float erase_constant[4];     /**< DLC_ERASE_CONSTANT: per channel, normalized (default 0). */
    uint32_t interpolation;      /**< The policy's geometric ops: a ::dlc_interpolation (ops.h;
                                      default 0, nearest), torchvision's interpolation=. */
    uint32_t has_fill;           /**< With bilinear: 1 when `fill` was given (torchvision's
                                      fill=[...], also of zeros), blended in by the weight of the
                                      outside; 0 (default) with a fill of zeros: torchvision's
                                      fill=None, the outside counts 0 (a nonzero fill is given). */
    float magnitude_max;         /**< DLC_AUTO_AUGMENT_TIMM_RAND: timm's mmax, the upper clip of
                                      the magnitudes (default 10). */
    uint32_t increasing;         /**< DLC_AUTO_AUGMENT_TIMM_RAND: 1 for timm's increasing op set
                                      (its inc; default 0). */
    float op_prob;               /**< DLC_AUTO_AUGMENT_TIMM_RAND: the probability that each
                                      chosen op applies (timm's p; default 0.5). */
} dlc_augment_spec;

/** @brief Fill @p s with the defaults (nothing on: the crop and flip alone), never writing past
 *         @p size; called through the macro dlc_augment_spec_init().
 *  @param[out] s The spec (NULL, or smaller than a uint32_t: nothing is written).
 *  @param[in] size sizeof(dlc_augment_spec) in the caller's header; struct_size is set to it. */
DLC_API void dlc_augment_spec_init_sized(dlc_augment_spec *s, size_t size);

/** Fill @p s (a ::dlc_augment_spec *) with the defaults, at the caller's size. */
#define dlc_augment_spec_init(s) dlc_augment_spec_init_sized((s), sizeof *(s))

/** When record checksums are checked. */
typedef enum dlc_verify_mode {
    DLC_VERIFY_OFF = 0,    /**< Never (headers and bounds are always checked). */
    DLC_VERIFY_FIRST = 1,  /**< The first time this loader reads each record. */
    DLC_VERIFY_ALWAYS = 2, /**< Every read. */
} dlc_verify_mode;

/** What happens to a record that fails its check. */
typedef enum dlc_corrupt_policy {
    DLC_CORRUPT_FAIL = 0,    /**< dlc_loader_next() fails with DLC_ECORRUPT naming the record. */
    DLC_CORRUPT_REPLACE = 1, /**< It is replaced by a deterministically chosen good record and
                                  counted in the stats; the batch keeps its size. */
} dlc_corrupt_policy;

/** How records reach memory. */
typedef enum dlc_io_mode {
    DLC_IO_AUTO = 0,   /**< mmap when the store fits in memory, else direct. */
    DLC_IO_MMAP = 1,   /**< Views into the shared page cache, with io_uring/fadvise readahead. */
    DLC_IO_DIRECT = 2, /**< O_DIRECT reads through io_uring into registered buffers. */
} dlc_io_mode;

/** The most batch slots of a loader (dlc_loader_config.prefetch); Python mirrors it. */
#define DLC_LOADER_MAX_PREFETCH 1024u

/** Loader options. dlc_loader_config_init() sets every field to its default. */
typedef struct dlc_loader_config {
    uint32_t struct_size;        /**< sizeof(dlc_loader_config) as the caller's header has it; set
                                      by dlc_loader_config_init() (status.h, "How structs grow"). */
    uint32_t batch_size;         /**< Samples per batch (default 256). */
    int drop_last;               /**< Cut to a multiple of world_size and drop a short last batch
                                      (default 0). */
    uint32_t sampler;            /**< A ::dlc_sampler (default DLC_SAMPLER_SHUFFLE). */
    uint64_t seed;               /**< Default 0. */
    uint64_t epoch;              /**< First epoch (default 0). */
    uint32_t rank;               /**< This process's rank (default 0). */
    uint32_t world_size;         /**< Number of ranks (default 1). */
    uint32_t threads;            /**< Worker threads; 0 = all online cores (default). */
    uint32_t prefetch;           /**< Batches in flight: 1..DLC_LOADER_MAX_PREFETCH (default 4). */
    const double *class_weights; /**< DLC_SAMPLER_WEIGHTED: one weight per label; copied at open. */
    uint32_t num_class_weights;  /**< Entries in class_weights (must equal the store's labels). */
    uint64_t num_samples; /**< DLC_SAMPLER_WEIGHTED: draws per epoch (0 = the store's count). */
    uint32_t quasi_group; /**< DLC_SAMPLER_QUASI_RANDOM: records per group (default 64). */
    uint32_t augment;     /**< A ::dlc_augment (default DLC_AUGMENT_RANDOM_CROP). */
    uint32_t crop_h;      /**< Output height (default 224; 0 = the store's height). */
    uint32_t crop_w;      /**< Output width (default 224; 0 = the store's width). */
    float rrc_scale[2];   /**< RandomResizedCrop area fraction range (default 0.08, 1). */
    float rrc_ratio[2];   /**< RandomResizedCrop aspect range (default 3/4, 4/3). */
    float flip_prob;      /**< Horizontal flip probability (default 0.5; 0 for eval). */
    uint32_t dtype;       /**< Images: DLC_DTYPE_UINT8 (default), FLOAT32, FLOAT16 or BFLOAT16. */
    float mean[4];        /**< Per channel, on the 0..1 scale (default ImageNet's, then 0.5). */
    float std[4];         /**< Per channel, on the 0..1 scale (default ImageNet's, then 0.5). */
    uint32_t verify;      /**< A ::dlc_verify_mode (default DLC_VERIFY_OFF). */
    uint32_t on_corrupt;  /**< A ::dlc_corrupt_policy (default DLC_CORRUPT_FAIL). */
    uint32_t io;          /**< A ::dlc_io_mode (default DLC_IO_AUTO). */
    int32_t device;       /**< CUDA device of the device path (see "The device path"), or -1:
                               host batches only (default). */
    const char *const *fields;             /**< Names of the fields to load (NULL: every field). */
    uint32_t num_fields;                   /**< Entries in fields. */
    const dlc_field_option *field_options; /**< Per-field options; copied at open. */
    uint32_t num_field_options;            /**< Entries in field_options. */
    const dlc_view_spec *views; /**< View groups (NULL: one view per image, made of augment,
                                     crop_h, crop_w, rrc_scale, rrc_ratio, flip_prob); copied. */
    uint32_t num_views;         /**< Entries in views. */
    dlc_log_fn log;             /**< Notices (chosen I/O mode, no GPU...); may be NULL. */
    void *log_user;             /**< Passed to log as its first argument. */
    uint32_t device_layout;     /**< Images written by dlc_loader_device_emit(): DLC_LAYOUT_NCHW,
                                     DLC_LAYOUT_NHWC (torch's channels_last for float), or
                                     DLC_LAYOUT_NONE (default): as on the host, uint8 NHWC and
                                     float NCHW. */
    uint32_t device_staging;    /**< Device staging buffers, 1..16 (default 2). */
    uint32_t max_lent;          /**< Host batches the consumer may hold at once (default 1): when
                                     it holds this many, dlc_loader_next() gives back the oldest.
                                     Above 1 it must be below prefetch. */
    uint32_t window_shards;     /**< DLC_SAMPLER_SHARD_WINDOWS: shards whose records are shuffled
                                     together, 1..4095 (default 4). */
    uint32_t streams;           /**< DLC_SAMPLER_SHARD_WINDOWS: streams interleaved, 1..4095;
                                     0 (default) = world_size. Keep it when resuming with
                                     another world size: the order depends on it. */
    /* Streaming (a store set's URL as the path: s3://, gs://, http(s)://; docs/STREAMING.md). */
    const char *cache_dir;       /**< The local folder that holds shards while they are read;
                                      required for a URL; shared by the ranks and jobs of a node.
                                      Not retained. No wait for one of its locks blocks: the
                                      folder-wide lock is waited for net->timeout_s at most,
                                      another process's download of a shard as long as its file
                                      changes within timeout_s * (max_retries + 1); then
                                      -ETIMEDOUT names the lock file and its holder. close() and
                                      net->progress (Ctrl-C) end every wait at once. */
    uint64_t cache_limit;        /**< The most bytes the cache folder may hold, temporary files
                                      counted; 0 (default) = no limit. Checked at open against
                                      what the windows need (the bytes needed are named). */
    uint32_t cache_ranks;        /**< Processes sharing cache_dir on this node, each needing its
                                      windows (default 1; Python: LOCAL_WORLD_SIZE). */
    uint32_t downloads;          /**< Shards this process downloads at once (default 2). */
    const dlc_warm_options *net; /**< Endpoint, region, retries, timeouts, log of the downloads;
                                      NULL (default): dlc_warm_options_init()'s, which read the
                                      environment. Copied at open. */
    const char *trace;           /**< A file to write the timeline to at close: Chrome trace-event
                                      JSON (Perfetto, chrome://tracing), one track per thread, one
                                      span per batch stage (docs/WAITING.md). NULL (default):
                                      $DLCACHE_TRACE, or none. Not retained. */
    uint32_t trace_batches;      /**< Spans the trace keeps per thread: the last ones (0, the
                                      default: 256). */
    uint32_t auto_threads;       /**< 1: tune the worker count while running (threads="auto"):
                                      start with 2; while the consumer waits a share w of its
                                      step for batches and the workers do not wait for reads or
                                      downloads, go to about n / (1 - w) workers (at most twice
                                      as many at once); give one back at a time when they idle;
                                      at most threads, or (0) the cores divided by
                                      $LOCAL_WORLD_SIZE. 0 (default): threads workers
                                      throughout. The output bytes never depend on it. */
    const dlc_augment_spec *augment_specs; /**< Per-sample ops of each view group (one per entry
                                                of views, or one without views); NULL (default):
                                                crop and flip alone. Copied at open. */
    uint32_t num_augment_specs;            /**< Entries in augment_specs: 0, or num_views (1
                                                without views). */
    uint32_t return_params;                /**< 1: every batch also carries what each view drew
                                                (outputs params_*, see "Drawn parameters");
                                                0 (default): not. */
    /* Per batch, after conversion: MixUp and CutMix as timm's Mixup (mode "batch"), and soft
     * targets (see "MixUp and CutMix" below). */
    float mixup_alpha;      /**< MixUp: lambda ~ Beta(alpha, alpha); 0 (default): no MixUp. */
    float cutmix_alpha;     /**< CutMix: lambda ~ Beta(alpha, alpha); 0 (default): no CutMix. */
    float mix_prob;         /**< Probability that a batch is mixed at all (default 1). */
    float switch_prob;      /**< With both alphas above 0: probability of CutMix rather than
                                 MixUp (default 0.5). */
    double label_smoothing; /**< Soft targets: off = s / num_classes, on = 1 - s + off in double,
                                 then float32, as timm's (default 0). Above 0, or with an alpha
                                 above 0, the label output is float32 [N, num_classes]. */
    uint32_t num_classes;   /**< Classes of the soft targets, 2..65536; 0 (default): the store's
                                 num_labels. */
    uint32_t max_crop_h;    /**< Progressive resizing, on when this or max_crop_w is above 0:
                                 the largest height that dlc_loader_set_resolution() may set;
                                 the slots are sized for it at open (0, the default: crop_h). */
    uint32_t max_crop_w;    /**< The largest width likewise (0, the default: crop_w). */
    uint32_t aug_repeats;   /**< Repeated augmentation (torchvision's RASampler, timm's
                                 RepeatAugSampler, DeiT's repeated_aug): 2..256 gives each
                                 record of the epoch's order to that many consecutive
                                 positions, which the ranks' striding deals to as many ranks,
                                 each drawing its own crop and ops. The epoch keeps its length,
                                 so it reads count / aug_repeats distinct records, a new subset
                                 each epoch. Samplers SEQUENTIAL, SHUFFLE, QUASI_RANDOM and
                                 WEIGHTED; not a mixture nor shard windows. 0 or 1 (default):
                                 each position its own record. */
} dlc_loader_config;

/** One output of a batch: a field of the store (or one view group of an image field), for every
 *  sample of the batch. */
typedef struct dlc_batch_field {
    const char *name;                 /**< The field's name, or FIELD_VIEW; valid until close. */
    uint32_t field;                   /**< Its index in the store's schema (dlc_store_fields()). */
    uint32_t kind;                    /**< The field's ::dlc_field_kind. */
    void *data;                       /**< Contiguous, 64-byte aligned. */
    size_t bytes;                     /**< Bytes of data used by this batch. */
    uint32_t dtype;                   /**< A ::dlc_dtype. */
    uint32_t layout;                  /**< A ::dlc_layout (DLC_LAYOUT_NONE for fields that are not
                                           images). */
    uint32_t ndim;                    /**< Entries of shape used. */
    uint64_t shape[DLC_MAX_DIMS + 2]; /**< N first; then the view count for view groups; then
                                           the sample's dimensions. OFFSETS: the total of the
                                           leading dimensions, then the trailing ones. */
    const int64_t *lengths; /**< PAD and PAD_TO: N leading dimensions (after cutting and, for
                                 boxes, after the crop dropped some); else NULL. */
    const int64_t *offsets; /**< OFFSETS and bytes: N + 1 offsets into data, in units of the
                                 leading dimension (bytes: in bytes); else NULL. */
} dlc_batch_field;

/** A lent batch. Pointers stay valid until dlc_loader_release() or the next
 *  dlc_loader_next(); never free them. data, dtype, layout, shape and bytes describe the first
 *  image output (NULL data without one); labels are the label field's values (0 without one). */
typedef struct dlc_batch {
    void *data;                    /**< Host batch: count x shape, contiguous, 64-byte aligned. */
    const int64_t *labels;         /**< count labels. */
    const uint64_t *indices;       /**< count store record numbers. */
    uint32_t count;                /**< Samples in this batch (the last may be short). */
    uint32_t dtype;                /**< A ::dlc_dtype. */
    uint32_t layout;               /**< A ::dlc_layout. */
    uint32_t shape[4];             /**< N, then H, W, C for NHWC or C, H, W for NCHW; N = count. */
    size_t bytes;                  /**< Bytes of data used by this batch. */
    uint64_t epoch;                /**< Epoch this batch belongs to. */
    uint64_t batch_index;          /**< Batch number within the epoch for this rank. */
    uint32_t num_fields;           /**< Outputs in fields. */
    const dlc_batch_field *fields; /**< Every selected field, in schema order (view groups in
                                        the order given). */
} dlc_batch;

/** Counters since open. */
typedef struct dlc_loader_stats {
    uint64_t batches;           /**< Batches delivered. */
    uint64_t samples;           /**< Samples delivered. */
    double wait_seconds;        /**< Time the consumer spent blocked in dlc_loader_next(). */
    double io_wait_seconds;     /**< Time workers spent blocked on I/O (page faults aside). */
    uint64_t corrupt_replaced;  /**< Corrupt records replaced (DLC_CORRUPT_REPLACE). */
    uint64_t bytes_read;        /**< Payload bytes read from the store. */
    uint32_t io_mode;           /**< The ::dlc_io_mode actually in use (never AUTO). */
    uint32_t threads;           /**< Worker threads in use (with auto_threads: working now). */
    int32_t device;             /**< The device path's GPU, or -1 when it is off. */
    uint64_t device_bytes;      /**< Bytes copied from the slots to the device. */
    double device_copy_seconds; /**< Sum over the copies of the time from issuing one to its
                                     event's completion, as the loader's copy thread saw it. */
    uint64_t reserved[8];       /**< Zero; fields added in later 1.x versions take these words, so
                                     the struct keeps its size (status.h, "How structs grow"). */
} dlc_loader_stats;

/** What streaming did since open (dlc_loader_get_stream_stats()). */
typedef struct dlc_loader_stream_stats {
    uint32_t struct_size;      /**< sizeof(dlc_loader_stream_stats) as the caller's header has it:
                                    set it before the call; the library fills that many bytes. */
    double stall_seconds;      /**< Time the loader's I/O thread waited for a shard to arrive. */
    uint64_t hits;             /**< Shards found in the cache when a batch needed them. */
    uint64_t misses;           /**< Shards a batch had to wait for. */
    uint64_t bytes_fetched;    /**< Bytes downloaded (the index, retries counted). */
    uint64_t requests;         /**< HTTP requests sent. */
    uint64_t peak_cache_bytes; /**< The most bytes the cache folder held, as this process saw it
                                    (its reservation counted). */
    uint64_t evictions;        /**< Shards this process removed to make room. */
    uint64_t downloads;        /**< Shards this process downloaded. */
} dlc_loader_stream_stats;

/**
 * @brief What streaming did since open: zeros for a local store.
 * @param[in] l The loader.
 * @param[in,out] st Its struct_size set by the caller; filled up to it.
 * @return DLC_OK; DLC_EINVAL (NULL, or a struct_size of 0 or larger than the library's).
 * Thread safety: any thread.
 */
DLC_API dlc_status dlc_loader_get_stream_stats(const dlc_loader *l, dlc_loader_stream_stats *st);

/** Bytes of a serialized loader state (see dlc_loader_state_save()). */
#define DLC_LOADER_STATE_SIZE 64u

/** @brief Fill the caller's @p c with the defaults, never writing past @p size; called
 *         through the macro dlc_loader_config_init(), which passes the caller's sizeof.
 *  @param[out] c The options to fill (NULL, or smaller than a uint32_t: nothing is written).
 *  @param[in] size sizeof(dlc_loader_config) in the header the caller was built with: the bytes of
 *                  @p c that are written; struct_size is set to it (status.h, "How structs
 *                  grow"). */
DLC_API void dlc_loader_config_init_sized(dlc_loader_config *c, size_t size);

/** Fill @p c (a ::dlc_loader_config, not a pointer to void) with the defaults, its struct_size
 *  with the caller's sizeof: every field the caller's header has is written. */
#define dlc_loader_config_init(c) dlc_loader_config_init_sized((c), sizeof *(c))

/**
 * @brief Open the store at @p path and start the workers on the first epoch.
 * @param[in] path A store file or a store set's directory (not retained).
 * @param[in] config Filled by dlc_loader_config_init(), then changed; copied. NULL means all
 *            defaults.
 * @param[out] out Release with dlc_loader_close().
 * @return DLC_OK, DLC_EINVAL (a struct_size of 0, larger than the library's or no size it had
 *         (status.h, "How structs grow"); a bad field, named; a plain or center crop larger than
 * the smallest image of a variable image or mask field, naming a record of that size, when the
 * store records it: ::dlc_field.min_dim0), the errors of dlc_store_open().
 */
DLC_API dlc_status dlc_loader_open(const char *path, const dlc_loader_config *config,
                                   dlc_loader **out);

/**
 * @brief Lend the next batch of the current epoch, waiting for it if needed.
 *        When config.max_lent batches are lent, the oldest is released first.
 * @param[in] l The loader.
 * @param[out] batch Filled with the lent batch (zeroed with DLC_END); what it points to stays
 *             valid until the batch is released (see "Lifetime of a batch").
 * @return DLC_OK, DLC_END when the epoch has no more batches for this rank
 *         (then call dlc_loader_set_epoch()), DLC_ECORRUPT, DLC_ECHANGED (the
 *         store file shrank under the loader: replace stores by renaming a new
 *         file over them, never by truncating in place), DLC_ESTATE (the device path is on:
 *         take batches with dlc_loader_next_device()), DLC_EINVAL (a NULL argument), -errno.
 */
DLC_API dlc_status dlc_loader_next(dlc_loader *l, dlc_batch *batch);

/**
 * @brief dlc_loader_next() that waits at most @p timeout_ms for the batch: a caller that must
 *        do something of its own while it waits (run a signal handler, see a close) asks again.
 *
 * The Python package waits in slices of this call, returning to the interpreter between them,
 * so that Ctrl-C, the program's own signal handlers and asyncio act within a slice. A wait cut
 * into slices counts as one call in the loader's report and trace: from the first slice to the
 * one that returns, the consumer is waiting, never away.
 * @param[in] l The loader.
 * @param[out] batch As dlc_loader_next()'s; zeroed with DLC_AGAIN.
 * @param[in] timeout_ms The longest wait in milliseconds; 0 takes only a batch that is ready.
 * @return What dlc_loader_next() returns, or ::DLC_AGAIN when the batch was not ready within
 *         @p timeout_ms (nothing changed but that the oldest lent batch was released, as
 *         dlc_loader_next() does when config.max_lent are lent).
 * Thread safety: the consumer's thread, like dlc_loader_next().
 */
DLC_API dlc_status dlc_loader_next_wait(dlc_loader *l, dlc_batch *batch, uint32_t timeout_ms);

/** @brief Give back a lent batch early so its slot can be refilled.
 *  @param[in] l The loader.
 *  @param[in] batch A batch that dlc_loader_next() lent and that is still lent; not used after.
 *  @return DLC_OK, or DLC_EINVAL when @p batch is not one lent. */
DLC_API dlc_status dlc_loader_release(dlc_loader *l, const dlc_batch *batch);

/** @brief Give back the batch the last dlc_loader_next() lent as if it had not been taken: the
 *         next dlc_loader_next() lends it again, the same bytes, and a state saved before then
 *         does not count it as consumed.
 *
 * For a caller interrupted between the lend and the batch's delivery (the Python package, when a
 * Ctrl-C lands there): without it, that batch would count as consumed and a resume would never
 * deliver it. Host batches only.
 * @param[in] l The loader.
 * @param[in] batch The batch the last dlc_loader_next() or dlc_loader_next_wait() lent, still
 *            lent; not used after.
 * @return DLC_OK; DLC_EINVAL when an argument is NULL or @p batch is not the last one lent (it is
 *         then as it was).
 * Thread safety: the consumer's thread, like dlc_loader_next(). */
DLC_API dlc_status dlc_loader_put_back(dlc_loader *l, const dlc_batch *batch);

/** @brief Give back a lent batch whose memory the caller still uses: its slot gets new memory
 *         and is refilled there, and the memory the batch points to becomes the caller's.
 *
 * For a caller whose views of a batch may outlive its turn (the Python package, when a tensor
 * cut from a batch is still alive as the batch is given back): nothing is copied, and what the
 * batch's data, labels, indices and fields[i].data, lengths and offsets point to keeps its
 * bytes until dlc_loader_kept_free(), also after dlc_loader_close(). The ::dlc_batch itself and
 * its fields array belong to the slot and are not valid after this call. Costs one allocation
 * of a slot's size: for the batches kept only, never in the usual loop. Host batches only (not
 * with the device path); a caller that page-locked the slots (dlc_loader_host_slots()) must
 * not keep them.
 * @param[in] l The loader.
 * @param[in] batch A batch that dlc_loader_next() lent and that is still lent; not used after.
 * @param[out] memory The batch's memory, to free with dlc_loader_kept_free(); NULL on failure.
 * @return DLC_OK; DLC_EINVAL when an argument is NULL or @p batch is not one lent; DLC_ESTATE
 *         with the device path; -ENOMEM (the batch is then still lent). */
DLC_API dlc_status dlc_loader_keep(dlc_loader *l, const dlc_batch *batch, void **memory);

/** Free the memory of a batch kept with dlc_loader_keep(); with or without its loader.
 *  @param[in] memory From dlc_loader_keep(), or NULL (nothing happens). */
DLC_API void dlc_loader_kept_free(void *memory);

/** @brief Batches per epoch for this rank (what len() of a DataLoader says).
 *  @param[in] l The loader; NULL gives 0.
 *  @return The count; 0 when @p l is NULL. */
DLC_API uint64_t dlc_loader_batches_per_epoch(const dlc_loader *l);

/** @brief Samples of the store (not of the epoch).
 *  @param[in] l The loader; NULL gives 0.
 *  @return The store's record count; 0 when @p l is NULL. */
DLC_API uint64_t dlc_loader_store_count(const dlc_loader *l);

/** @brief The loader's store: its schema, labels and metadata. A streamed set's is opened from
 *  its index: its records are read through the loader only, and dlc_store_verify() refuses it.
 *  @param[in] l The loader; NULL gives NULL.
 *  @return Owned by the loader, valid until dlc_loader_close(); NULL only when @p l is NULL. */
DLC_API const dlc_store *dlc_loader_store(const dlc_loader *l);

/**
 * @brief Open the store a loader of @p path would read, for its schema, labels and metadata:
 *        dlc_store_open() of a local store or set; for a streamed set's URL, the set opened
 *        from its index, fetched into memory (config.cache_dir must be given, but nothing is
 *        made, written or removed there; no shard is downloaded; its records are read through a
 *        loader only).
 * @param[in] path A store, a set's directory, or a set's URL.
 * @param[in] config Its cache_dir and net are used for a URL; NULL for a local path.
 * @param[out] out Close with dlc_store_close().
 * @return DLC_OK; the errors of dlc_store_open(); DLC_EINVAL (a URL without cache_dir, a bad
 *         struct_size); DLC_EHTTP, DLC_ENETWORK, DLC_ECORRUPT (fetching the index).
 * Thread safety: any thread; shares nothing.
 */
DLC_API dlc_status dlc_loader_open_store(const char *path, const dlc_loader_config *config,
                                         dlc_store **out);

/** What a run of DLC_SAMPLER_SHARD_WINDOWS would need and do (dlc_loader_plan()). */
typedef struct dlc_loader_plan_info {
    uint32_t struct_size;         /**< Set by the caller: sizeof(dlc_loader_plan_info). */
    uint32_t shards;              /**< The store's files: a set's shards, or 1. */
    uint32_t streams;             /**< Streams in effect (at most the shards with records). */
    uint32_t nodes;               /**< world_size / cache_ranks, rounded up. */
    uint64_t set_bytes;           /**< The shards' bytes. */
    uint64_t largest_shard_bytes; /**< The largest shard. */
    uint64_t epoch_samples;       /**< Positions of epoch 0 (records, and the padding). */
    uint64_t samples_per_rank;    /**< Rank 0's samples in epoch 0; every rank has as many. */
    uint64_t batches_per_rank;    /**< And its batches. */
    uint64_t cache_needed_bytes;  /**< The smallest cache_limit that config would be opened
                                       with (as dlc_loader_open() checks it). */
    uint64_t egress_bytes;        /**< Bytes downloaded in epoch 0 by all nodes together, each
                                       node once per shard its ranks read (a cache that holds a
                                       shard for its whole window). */
    double batch_same_shard;      /**< The chance that two samples of one batch of rank 0 come
                                       from the same shard (on label-ordered data with a label
                                       per shard: that they share a label); over its first
                                       2^16 samples when it has more than 2^22 (a share that
                                       large is planned from its windows, in time that follows
                                       the shards, not the records). */
    double neighbour_same_shard;  /**< The same for neighbouring samples. */
} dlc_loader_plan_info;

/**
 * @brief Plan a shard-window run without reading a record: epoch 0 of @p config (its sampler
 *        taken as DLC_SAMPLER_SHARD_WINDOWS) over the store or set at @p path, or over a
 *        streamed set whose URL is @p path (only its index is fetched, into memory: nothing is
 *        made, written or removed in config.cache_dir).
 * @param[in] path A store, a set's directory, or a set's URL.
 * @param[in] config As for dlc_loader_open() (NULL: the defaults); cache_limit is not checked
 *        (the answer says what it must be).
 * @param[in,out] out struct_size set by the caller; filled up to it.
 * @return DLC_OK; DLC_EINVAL (a bad config, a struct_size of 0 or too large); the errors of
 *         dlc_store_open() and of fetching a streamed set's index. dlc_errmsg() says why.
 * Thread safety: any thread; shares nothing.
 */
DLC_API dlc_status dlc_loader_plan(const char *path, const dlc_loader_config *config,
                                   dlc_loader_plan_info *out);

/**
 * @brief Start epoch @p epoch from its beginning (also to repeat an epoch).
 *        Batches in flight are discarded; batches the caller holds stay lent, valid until
 *        given back as usual (dlc_loader_release(), or dlc_loader_next() when max_lent are
 *        held).
 * @param[in] l The loader.
 * @param[in] epoch The epoch to start; any value, earlier ones included.
 * @return DLC_OK, or DLC_EINVAL when @p l is NULL.
 */
DLC_API dlc_status dlc_loader_set_epoch(dlc_loader *l, uint64_t epoch);

/**
 * @brief Serialize the stream's position: seed, epoch, and how far the
 *        epoch's global order has been consumed by all ranks together.
 *        Give it to dlc_loader_state_restore() to continue from there.
 * @param[in] l The loader.
 * @param[out] buf DLC_LOADER_STATE_SIZE bytes, little-endian, checksummed.
 * @return DLC_OK, or DLC_EINVAL when @p l or @p buf is NULL (@p buf is then untouched).
 */
DLC_API dlc_status dlc_loader_state_save(const dlc_loader *l, uint8_t buf[DLC_LOADER_STATE_SIZE]);

/**
 * @brief Continue from a saved position, also under another world size: the
 *        samples of the epoch not yet delivered are then split among the new
 *        ranks. The seed in the state replaces the configured one.
 * @param[in] l The loader; batches in flight are discarded, as by dlc_loader_set_epoch().
 * @param[in] buf A state from dlc_loader_state_save(); not retained.
 * @param[in] size Bytes at @p buf: DLC_LOADER_STATE_SIZE.
 * @return DLC_OK, DLC_EINVAL (wrong size, bad checksum, another version, sampler, store count
 *         or epoch length; the loader is then unchanged).
 *
 * A state saved by this library (version 2) holds the content digest of its store and is
 * refused by any other (a set and the one store of the same records differ), naming both
 * digests; an epoch past 2^63 is refused. A version 1 state (no digest) is matched by the
 * store's record count, as before.
 */
DLC_API dlc_status dlc_loader_state_restore(dlc_loader *l, const void *buf, size_t size);

/** @brief Counters since open.
 *  @param[in] l The loader; NULL writes zeros (device -1) into @p stats.
 *  @param[out] stats Every field is written; NULL: nothing is. */
DLC_API void dlc_loader_get_stats(const dlc_loader *l, dlc_loader_stats *stats);

/* ---- The device path (see the file's comment) ------------------------------------------------ */

/** One output of a device batch. Shapes are in memory order: an NHWC image output is
 *  [N, H, W, C] (torch's channels_last tensor [N, C, H, W] has exactly this memory). */
typedef struct dlc_device_field {
    const char *name;                 /**< As in ::dlc_batch_field; valid until close. */
    uint32_t field;                   /**< Its index in the store's schema. */
    uint32_t kind;                    /**< The field's ::dlc_field_kind. */
    uint32_t dtype;                   /**< Of what dlc_loader_device_emit() writes. */
    uint32_t layout;                  /**< Ditto (DLC_LAYOUT_NONE for fields that are not
                                           images). */
    uint32_t ndim;                    /**< Entries of shape used. */
    uint64_t shape[DLC_MAX_DIMS + 2]; /**< N first, as in ::dlc_batch_field. */
    size_t bytes;                     /**< Bytes that dlc_loader_device_emit() writes. */
    const void *staged;            /**< Device memory: the output as copied (images and masks uint8
                                        NHWC), valid from the batch's ready event until release. */
    size_t staged_bytes;           /**< Bytes at staged. */
    const int64_t *lengths;        /**< Host copy of the N lengths of a padded output, else NULL;
                                        valid until release. */
    const int64_t *offsets;        /**< Host copy of the N + 1 offsets, else NULL. */
    const int64_t *staged_lengths; /**< The same on the device (staging), or NULL. */
    const int64_t *staged_offsets; /**< The same on the device (staging), or NULL. */
} dlc_device_field;

/** A lent device batch. Host pointers stay valid until the batch is released; device pointers
 *  (staged*) may be read on the device only after its ready event and until its release. */
typedef struct dlc_device_batch {
    uint32_t count;                 /**< Samples. */
    int32_t device;                 /**< The GPU. */
    uint64_t epoch;                 /**< Epoch this batch belongs to. */
    uint64_t batch_index;           /**< Batch number within the epoch for this rank. */
    const int64_t *labels;          /**< Host copy of the labels (zeros without a label field). */
    const uint64_t *indices;        /**< Host copy of the store record numbers. */
    const int64_t *staged_labels;   /**< The labels on the device (staging). */
    const uint64_t *staged_indices; /**< The record numbers on the device (staging). */
    void *ready_event;              /**< cudaEvent_t recorded after the copy to staging. */
    uint32_t num_fields;            /**< Outputs in fields. */
    const dlc_device_field *fields; /**< Every selected output, as in ::dlc_batch. */
} dlc_device_batch;

/** Where dlc_loader_device_emit() writes one output: device memory that the caller owns. */
typedef struct dlc_device_dst {
    void *data;    /**< dlc_device_field.bytes bytes, or NULL to skip this output. */
    void *lengths; /**< N int64 where the field has lengths, or NULL to skip them. */
    void *offsets; /**< N + 1 int64 where the field has offsets, or NULL to skip them. */
} dlc_device_dst;

/**
 * @brief The device path's GPU, and why it is off if it is.
 * @param[in] l The loader, or NULL (then -1).
 * @param[out] why NULL, or set to NULL when the path is on, else to the reason (valid until
 *             close), the same text that the log got once at open.
 * @return The CUDA device ordinal in use, or -1.
 */
DLC_API int dlc_loader_device(const dlc_loader *l, const char **why);

/**
 * @brief The device path's copies as the device timed them: the sum over the copies from the
 *        slots of the time between two CUDA events recorded around them on the loader's own
 *        stream, their own time on the copy engine. Beside dlc_loader_stats.device_copy_seconds
 *        (the copy thread's host wait for each copy) it tells the link's rate from the thread's
 *        waits; over the same dlc_loader_stats.device_bytes it is the copies' GB/s.
 * @param[in] l The loader, or NULL (then 0).
 * @return Seconds since open; 0 when the device path is off or its backend times no events.
 * Thread safety: any thread.
 */
DLC_API double dlc_loader_device_copy_event_seconds(const dlc_loader *l);

/**
 * @brief Lend the next batch of the current epoch as staged on the device, waiting (on the host,
 *        for the workers and the copy thread, never for the device) until it has been issued.
 *        Releases the batch lent before, if it was not released (ordered after the stream given
 *        to dlc_loader_device_wait() for it, if any).
 * @param[in] l The loader.
 * @param[out] batch Filled with the lent batch (zeroed when there is none); valid as
 *             ::dlc_device_batch says.
 * @return DLC_OK, DLC_END, DLC_ESTATE (the device path is off: the message says why), DLC_ECUDA
 *         (the copy could not be issued: CUDA's text), and the errors of dlc_loader_next().
 */
DLC_API dlc_status dlc_loader_next_device(dlc_loader *l, dlc_device_batch *batch);

/**
 * @brief dlc_loader_next_device() that waits at most @p timeout_ms for the batch, as
 *        dlc_loader_next_wait() is to dlc_loader_next().
 * @param[in] l The loader.
 * @param[out] batch As dlc_loader_next_device()'s; zeroed with DLC_AGAIN.
 * @param[in] timeout_ms The longest wait in milliseconds; 0 takes only a batch that is staged.
 * @return What dlc_loader_next_device() returns, or ::DLC_AGAIN when the batch was not staged
 *         within @p timeout_ms (the batch lent before was given back, as by
 *         dlc_loader_next_device(); nothing else changed).
 * Thread safety: the consumer's thread, like dlc_loader_next_device().
 */
DLC_API dlc_status dlc_loader_next_device_wait(dlc_loader *l, dlc_device_batch *batch,
                                               uint32_t timeout_ms);

/**
 * @brief Enqueue on @p stream the wait for @p batch's copy, the conversion or copy of every
 *        output into @p dst, and the batch's release. Returns at once; the outputs are ready for
 *        work enqueued on @p stream after this call. @p batch must not be used after.
 * @param[in] l The loader.
 * @param[in] batch The batch that dlc_loader_next_device() lent.
 * @param[in] stream A cudaStream_t of config.device (NULL: the legacy default stream).
 * @param[in] dst batch->num_fields destinations (device memory of config.device).
 * @param[in] indices NULL, or device memory for batch->count uint64 record numbers.
 * @return DLC_OK, DLC_EINVAL (not the lent batch), DLC_ECUDA (CUDA's text; the batch is then
 *         released after a host wait for what was enqueued).
 */
DLC_API dlc_status dlc_loader_device_emit(dlc_loader *l, const dlc_device_batch *batch,
                                          void *stream, const dlc_device_dst *dst, void *indices);

/**
 * @brief Lend mode: make work enqueued on @p stream after this call wait for @p batch's copy, so
 *        that it may read the staged pointers.
 * @param[in] l The loader.
 * @param[in] batch The batch that dlc_loader_next_device() lent.
 * @param[in] stream A cudaStream_t of config.device (NULL: the legacy default stream).
 * @return DLC_OK, DLC_EINVAL (not the lent batch), DLC_ECUDA.
 */
DLC_API dlc_status dlc_loader_device_wait(dlc_loader *l, const dlc_device_batch *batch,
                                          void *stream);

/**
 * @brief Give back a lent device batch: its staging buffer is overwritten only after the work
 *        enqueued on @p stream up to this call has completed on the device.
 * @param[in] l The loader.
 * @param[in] batch The batch that dlc_loader_next_device() lent; not used after.
 * @param[in] stream The stream that read the staged pointers, or NULL when nothing did.
 * @return DLC_OK, DLC_EINVAL (not the lent batch), DLC_ECUDA.
 */
DLC_API dlc_status dlc_loader_device_release(dlc_loader *l, const dlc_device_batch *batch,
                                             void *stream);

/**
 * @brief The memory of the batch slots, for a GPU runtime of the caller's own to page-lock
 *        (cudaHostRegister) when the device path is off: torch's, in the Python package. Each
 *        slot is one block, allocated at open and freed by dlc_loader_close(); unregister it
 *        before closing. A block being copied must not be handed back (the next
 *        dlc_loader_next()) before its copy has completed.
 * @param[in] l The loader; NULL gives 0.
 * @param[out] bases @p cap entries for the slots' first bytes, or NULL.
 * @param[out] sizes @p cap entries for the slots' sizes in bytes, or NULL.
 * @param[in] cap Entries of @p bases and @p sizes; the first @p cap slots are written. 0 (with
 *            NULL arrays) only counts.
 * @return The number of slots, which may exceed @p cap; 0 when @p l is NULL.
 */
DLC_API uint32_t dlc_loader_host_slots(const dlc_loader *l, void **bases, size_t *sizes,
                                       uint32_t cap);

/**
 * @brief Can the device path run on @p device in this process? Loads the CUDA plugin if needed.
 * @param[in] device A CUDA device ordinal.
 * @param[out] why NULL, or @p cap bytes for the reason when it cannot ("" when it can).
 * @param[in] cap Bytes at @p why.
 * @return DLC_OK, DLC_ENOSYS (no plugin, or no driver or GPU: the reason in @p why and in
 *         dlc_errmsg()), DLC_EINVAL (no GPU of that ordinal).
 */
DLC_API dlc_status dlc_cuda_probe(int device, char *why, size_t cap);

/**
 * @brief The ceiling of the device path's copy, measured now: @p reps asynchronous copies of
 *        @p bytes from page-locked host memory to @p device, timed with CUDA events.
 * @param[in] device A CUDA device ordinal.
 * @param[in] bytes Bytes per copy, at least 1.
 * @param[in] reps Copies, at least 1.
 * @param[out] gbps Gigabytes (1e9 bytes) per second.
 * @return DLC_OK, DLC_EINVAL (@p bytes or @p reps 0, @p gbps NULL), the errors of
 *         dlc_cuda_probe(), DLC_ECUDA, -ENOMEM.
 */
DLC_API dlc_status dlc_cuda_copy_ceiling(int device, size_t bytes, uint32_t reps, double *gbps);

/**
 * @brief Device memory for the outputs of dlc_loader_device_emit(), for programs without a CUDA
 *        runtime of their own (the tools, C tests); with the plugin's runtime.
 * @param[in] device A CUDA device ordinal.
 * @param[in] bytes Bytes to allocate (0 allocates 1).
 * @param[out] ptr Free with dlc_cuda_free() on the same device; NULL on failure.
 * @return DLC_OK, DLC_EINVAL (@p ptr is NULL), the errors of dlc_cuda_probe(), DLC_ECUDA (out of
 * device memory...).
 */
DLC_API dlc_status dlc_cuda_alloc(int device, size_t bytes, void **ptr);

/** Free memory from dlc_cuda_alloc().
 *  @param[in] device The device @p ptr was allocated on.
 *  @param[in] ptr The memory, or NULL (nothing happens). */
DLC_API void dlc_cuda_free(int device, void *ptr);

/** @brief Wait on the host until the work enqueued on @p stream (a cudaStream_t of @p device;
 *         NULL: the legacy default stream) has completed.
 *  @param[in] device A CUDA device ordinal.
 *  @param[in] stream The stream, or NULL.
 *  @return DLC_OK, the errors of dlc_cuda_probe(), DLC_ECUDA (an error of that work). */
DLC_API dlc_status dlc_cuda_stream_sync(int device, void *stream);

/* ---- Mixtures: several stores and sets in one loader, by weight (docs/MIXTURES.md) ----------- */

/** One source of a mixture. dlc_mix_source_init() sets the defaults; in an array every entry
 *  has the first one's struct_size. */
typedef struct dlc_mix_source {
    uint32_t struct_size; /**< sizeof(dlc_mix_source) as the caller's header has it; set by
                               dlc_mix_source_init() (status.h, "How options grow"). */
    const char *path;     /**< A version 2 store, a set's directory or a set's URL (streamed
                               through config.cache_dir); copied at open. */
    double weight;        /**< Its share of the samples: weight / the sum of the weights
                               (default 1; 0: none, its pass waits where it stands). */
    int64_t label_offset; /**< Added to the source's labels (default 0), for sources whose
                               label spaces are disjoint. */
} dlc_mix_source;

/** Set @p s to the defaults (weight 1, no path, offset 0) and its struct_size, writing at most
 *  @p size bytes. Call it through the macro dlc_mix_source_init(), which passes the caller's
 *  sizeof.
 *  @param[out] s The source.
 *  @param[in] size sizeof(dlc_mix_source) in the caller's header. */
DLC_API void dlc_mix_source_init_sized(dlc_mix_source *s, size_t size);
/** Set @p s (a dlc_mix_source *) to the defaults, at the caller's size. */
#define dlc_mix_source_init(s) dlc_mix_source_init_sized((s), sizeof *(s))

/** Options of a mixture beside the loader's. dlc_mix_options_init() sets the defaults. */
typedef struct dlc_mix_options {
    uint32_t struct_size;       /**< Set by dlc_mix_options_init(). */
    uint64_t samples_per_epoch; /**< Positions of an epoch over all ranks (0: the sum of the
                                     sources' records). Rounded up to a multiple of world_size
                                     with new draws, never repeats (with drop_last: down to a
                                     multiple of world_size x batch_size). */
} dlc_mix_options;

/** Set @p o to the defaults and its struct_size, writing at most @p size bytes. Call it through
 *  the macro dlc_mix_options_init(), which passes the caller's sizeof.
 *  @param[out] o The options.
 *  @param[in] size sizeof(dlc_mix_options) in the caller's header. */
DLC_API void dlc_mix_options_init_sized(dlc_mix_options *o, size_t size);
/** Set @p o (a dlc_mix_options *) to the defaults, at the caller's size. */
#define dlc_mix_options_init(o) dlc_mix_options_init_sized((o), sizeof *(o))

/**
 * @brief Open a loader over a mixture of @p num_sources stores and sets.
 *
 * Each source walks its own passes: pass k is a permutation of its records (config.sampler
 * DLC_SAMPLER_SHUFFLE, keyed by the seed, k and the source's content digest) or its records in
 * order (DLC_SAMPLER_SEQUENTIAL), finished before pass k + 1 begins. A fixed low-discrepancy
 * cycle (largest deficit over integer quotas of the weights) says which source each row of
 * world_size positions draws from, so every rank's sequence of sources is the same: each prefix
 * of it holds every source's share within less than 1 sample of weight x n, each of its windows
 * (a batch) within less than 2, and within less than 1 with two sources. The order is a pure
 * function of (seed, epoch, the weights, the sources' record counts and digests, world_size,
 * drop_last); the schedule runs on across epochs. A source smaller than its share repeats its
 * passes within an epoch; a larger one spreads its pass over several.
 *
 * A mixture of one source whose samples_per_epoch is 0 or its record count is the plain loader,
 * byte for byte (dlc_loader_open() of the source: its order, padding, augmentations; its weight
 * only has to be above 0, and any config.sampler works): each epoch is one pass keyed by the
 * epoch. With another samples_per_epoch it walks the mixture's schedule as above.
 *
 * Records are numbered globally, source after source (::dlc_batch.indices; see
 * dlc_loader_source_info()); labels are each source's plus its label_offset. The schemas must
 * agree (the same fields with the same kinds, dtypes and flags; sizes may differ): a mismatch is
 * DLC_EINVAL naming the source and the field. Everything else of the loader (fields, crops,
 * views, the device path, prefetch, kept batches) works as on one store.
 * @param[in] sources @p num_sources entries (1..64); not retained.
 * @param[in] num_sources Entries of @p sources.
 * @param[in] mix Options of the mixture, or NULL for the defaults.
 * @param[in] config As for dlc_loader_open(); sampler DLC_SAMPLER_SHUFFLE or SEQUENTIAL (any
 *                   for the plain one-source mixture).
 * @param[out] out The loader; close with dlc_loader_close().
 * @return DLC_OK; DLC_EINVAL (a weight negative, NaN or infinite, all weights 0, a weight below
 *         1/65536 of the total, a negative label offset, another sampler, mismatched schemas, a
 *         source without records or of version 1: named); the errors of dlc_store_open() and
 *         dlc_loader_open(). dlc_errmsg() says why.
 */
DLC_API dlc_status dlc_loader_open_mix(const dlc_mix_source *sources, uint32_t num_sources,
                                       const dlc_mix_options *mix, const dlc_loader_config *config,
                                       dlc_loader **out);

/** A mixture's source, as the loader has it. */
typedef struct dlc_mix_source_info {
    uint32_t struct_size;        /**< Set by the caller: sizeof(dlc_mix_source_info). */
    uint32_t quota;              /**< Its slots per cycle of the schedule. */
    uint32_t period;             /**< Slots per cycle (the same for every source). */
    uint64_t first;              /**< Global number of its first record (::dlc_batch.indices). */
    uint64_t count;              /**< Its records. */
    uint64_t epoch_samples;      /**< Its draws in the current epoch, all ranks together. */
    uint64_t drawn;              /**< Its draws before the current epoch (its pass is drawn /
                                      count, the position in it drawn % count). */
    uint64_t content_digest;     /**< Of the source (a state matches sources by it and the path). */
    int64_t label_offset;        /**< As opened. */
    uint64_t cache_needed_bytes; /**< A streamed source (a URL): the bytes of cache_dir its shards
                                      need, as the loader's check at open counts them (a share
                                      of 1 assumed); config.cache_limit must hold the sum over
                                      the streamed sources. 0 for a local source. */
} dlc_mix_source_info;

/**
 * @brief Sources of a mixture loader: 0 for a loader of one store.
 * @param[in] l The loader; NULL gives 0.
 * @return The number of sources.
 */
DLC_API uint32_t dlc_loader_num_sources(const dlc_loader *l);

/**
 * @brief Describe source @p source of a mixture.
 * @param[in] l The loader.
 * @param[in] source Below dlc_loader_num_sources().
 * @param[in,out] out struct_size set by the caller; filled up to it.
 * @return DLC_OK, DLC_EINVAL (not a mixture, no such source, a bad struct_size).
 */
DLC_API dlc_status dlc_loader_source_info(const dlc_loader *l, uint32_t source,
                                          dlc_mix_source_info *out);

/** The largest state of a mixture (dlc_loader_mix_state_save()), in bytes. */
#define DLC_LOADER_MIX_STATE_MAX (80u + 40u * 64u + 8u)

/**
 * @brief Save a mixture's position: the seed, the epoch, how far all ranks together consumed
 *        it, the schedule, and each source's draws (its pass and place in it), path and digest.
 * @param[in] l A mixture loader.
 * @param[out] buf @p cap bytes; DLC_LOADER_MIX_STATE_MAX always suffice.
 * @param[in] cap Bytes at @p buf.
 * @param[out] size The state's bytes (80 + 40 per source + 8; a plain one-source mixture's:
 *                  80 + 40 + DLC_LOADER_STATE_SIZE + 8), little-endian, checksummed.
 * @return DLC_OK, DLC_EINVAL (not a mixture, NULL, @p cap too small: nothing written).
 */
DLC_API dlc_status dlc_loader_mix_state_save(const dlc_loader *l, void *buf, size_t cap,
                                             size_t *size);

/**
 * @brief Continue a mixture from a saved state, also with other weights, sources added or
 *        removed, another world size or samples_per_epoch.
 *
 * Sources are matched by path (then by content digest). When nothing of the schedule changed
 * (the same sources in the same order, quotas, world size, drop_last and epoch length), the
 * stream continues exactly as it would have. Otherwise a new schedule begins at the saved
 * position and every source continues its pass exactly where it stood: no record of a source is
 * seen twice before its pass ends, none is skipped; a new source starts its first pass, a
 * removed one is dropped. The seed in the state replaces the configured one.
 *
 * A plain one-source mixture's state (its source walked the plain loader's order, see
 * dlc_loader_open_mix()) resumes only into a plain one-source mixture of that source, as
 * dlc_loader_state_restore() would (also into another world size); into any other mixture it is
 * DLC_EINVAL. A plain one-source loader given another mixture's state (a source removed down to
 * one) continues it in the mixture's schedule (config.sampler SHUFFLE or SEQUENTIAL), until a
 * plain state is restored into it again.
 * @param[in] l A mixture loader; batches in flight are discarded, as by dlc_loader_set_epoch().
 * @param[in] buf A state from dlc_loader_mix_state_save(); not retained.
 * @param[in] size Bytes at @p buf.
 * @return DLC_OK; DLC_EINVAL (not a mixture, bad size, checksum or version; a source whose
 *         records changed since the save, named with both counts and digests; a position
 *         before the saved schedule began; a plain one-source state into another mixture, and
 *         back). The loader is unchanged on failure.
 */
DLC_API dlc_status dlc_loader_mix_state_restore(dlc_loader *l, const void *buf, size_t size);

/* ---- MixUp and CutMix, progressive resizing ---------------------------------------------------
 * With config.mixup_alpha or cutmix_alpha above 0, each batch is mixed after all its samples are
 * written and converted, as timm's Mixup(mode="batch", correct_lam=True, cutmix_minmax=None):
 * sample j is paired with sample N-1-j (the batch flipped); with probability mix_prob the batch
 * is mixed, by CutMix with probability switch_prob when both alphas are set; lambda is drawn
 * from Beta(alpha, alpha). MixUp: x_j = lam * x_j + (1 - lam) * x_{N-1-j}, in float32 (each
 * product and the sum rounded; for float16 and bfloat16 each rounded to the output type, with
 * (float)lam and (float)(1 - lam), as torch's CUDA kernels compute
 * x.mul_(lam).add_(x.flip(0).mul_(1 - lam)) on such tensors). CutMix: a box of
 * sqrt(1 - lam) of each side centered at a uniform pixel, clipped to the image, is pasted from
 * the partner, and lam becomes 1 - box area / image area. The draw of a batch is a pure
 * function of (seed, epoch, rank, world size, batch index) (dlc_loader_mixup_params()). The
 * label output becomes float32 [N, num_classes]: lam * one_hot(y_j) + (1 - lam) *
 * one_hot(y_{N-1-j}) with label smoothing, each in float32; ::dlc_batch.labels keeps the int64
 * labels. Image outputs must be float (uint8 pixels are not mixed: DLC_EINVAL at open), of the
 * default view group (no config.views). On the device path the targets are made on the host
 * and the images are mixed on the device after their conversion, with the same draw and the
 * same arithmetic (common/convert_hd.h): the bytes are the host path's. */

/** How a batch was mixed (dlc_loader_mixup_params()). */
typedef struct dlc_mixup_params {
    uint32_t struct_size; /**< Set by the caller: sizeof(dlc_mixup_params). */
    uint32_t mode;        /**< 0: not mixed (lam 1), 1: MixUp, 2: CutMix. */
    double lam;           /**< The weight of each sample's own image and label. */
    uint32_t box[4];      /**< CutMix: rows box[0]..box[1]-1, columns box[2]..box[3]-1 (timm's
                               yl, yh, xl, xh) come from the partner; else 0. */
} dlc_mixup_params;

/**
 * @brief The MixUp / CutMix draw of batch @p batch_index of epoch @p epoch of this rank, on
 *        images of @p height x @p width: what the loader applies to that batch. Pure.
 * @param[in] l The loader (its seed, rank, world size and mixing options).
 * @param[in] epoch The epoch (::dlc_batch.epoch).
 * @param[in] batch_index The batch within the epoch for this rank (::dlc_batch.batch_index).
 * @param[in] height Rows of the images (the output size of that epoch).
 * @param[in] width Columns of the images.
 * @param[in,out] out Its struct_size set by the caller; filled up to it.
 * @return DLC_OK; DLC_EINVAL (NULL, a bad struct_size, a zero size). Without mixing configured,
 *         mode 0 and lam 1.
 * Thread safety: the consumer's thread, or any thread while no state is being restored (a
 * restore may change the seed).
 */
DLC_API dlc_status dlc_loader_mixup_params(const dlc_loader *l, uint64_t epoch,
                                           uint64_t batch_index, uint32_t height, uint32_t width,
                                           dlc_mixup_params *out);

/**
 * @brief The draw of dlc_loader_mixup_params() from its keys alone, for a caller that mixes
 *        batches itself (the Python package's torch backend does, on the GPU): the same
 *        function the loader uses. Pure; any thread.
 * @param[in] mixup_alpha As dlc_loader_config.mixup_alpha.
 * @param[in] cutmix_alpha As dlc_loader_config.cutmix_alpha.
 * @param[in] mix_prob As dlc_loader_config.mix_prob.
 * @param[in] switch_prob As dlc_loader_config.switch_prob.
 * @param[in] seed The loader's seed (after a state restore, the state's).
 * @param[in] epoch The epoch.
 * @param[in] rank The rank.
 * @param[in] world_size The world size.
 * @param[in] batch_index The batch within the epoch for this rank.
 * @param[in] height Rows of the images.
 * @param[in] width Columns of the images.
 * @param[in,out] out Its struct_size set by the caller; filled up to it.
 * @return DLC_OK; DLC_EINVAL (NULL, a bad struct_size, a zero size, an alpha or probability out
 *         of range).
 */
DLC_API dlc_status dlc_mixup_draw(float mixup_alpha, float cutmix_alpha, float mix_prob,
                                  float switch_prob, uint64_t seed, uint64_t epoch, uint32_t rank,
                                  uint32_t world_size, uint64_t batch_index, uint32_t height,
                                  uint32_t width, dlc_mixup_params *out);

/**
 * @brief Progressive resizing: images of @p height x @p width from the next plan on (the next
 *        dlc_loader_set_epoch() or state restore), as FFCV's ResNet recipe grows them from 160
 *        to 192 pixels over the epochs.
 *
 * The slots were sized at open for config.max_crop_h x max_crop_w (one of them set, the other
 * defaulting to the crop), so
 * nothing is allocated. The size is not part of the 64-byte state: a caller that resumes sets it
 * again before the restore (the Python Loader keeps it in its state_dict()). Batches already
 * lent keep their shapes.
 * @param[in] l The loader: one view group (no config.views), a crop size (not the store's).
 * @param[in] height 1..max_crop_h.
 * @param[in] width 1..max_crop_w; a plain or center crop must also fit the store's images.
 * @return DLC_OK; DLC_EINVAL (NULL, view groups, a loader opened with neither max_crop_h nor
 *         max_crop_w set, a size out of range: named).
 * Thread safety: the consumer's thread.
 */
DLC_API dlc_status dlc_loader_set_resolution(dlc_loader *l, uint32_t height, uint32_t width);

/* ---- Why is the GPU waiting? (docs/WAITING.md) ------------------------------------------- */

/** What bounds the training step, as a report judges it (dlc_loader_report.bound). */
typedef enum dlc_bound {
    DLC_BOUND_UNKNOWN = 0,  /**< No batch delivered in the window yet. */
    DLC_BOUND_MODEL = 1,    /**< Batches were ready: the consumer's own step is the limit. */
    DLC_BOUND_CPU = 2,      /**< The workers were busy while the consumer waited. */
    DLC_BOUND_STORAGE = 3,  /**< Reads from the disk or page faults held the batches back. */
    DLC_BOUND_NETWORK = 4,  /**< Streaming: the loader waited for shards to arrive. */
    DLC_BOUND_COPY = 5,     /**< The device copy thread was busy while the consumer waited. */
    DLC_BOUND_CONSUMER = 6, /**< The consumer held batches, so the slots ran out. */
    DLC_BOUND_BATCH = 7,    /**< The workers idled while the consumer waited: what each batch
                                 costs beyond its samples (small batches) is the limit. */
} dlc_bound;

/** Where the time of the loader's threads and of its consumer went, over the last batches or
 *  since open (dlc_loader_get_report()), and the verdict. Shares are of wall_seconds, except
 *  where said; a stage's shares add up to at most 1. */
typedef struct dlc_loader_report {
    uint32_t struct_size;      /**< sizeof(dlc_loader_report) as the caller's header has it: set
                                    it before the call; the library fills that many bytes. */
    uint32_t bound;            /**< A ::dlc_bound. */
    uint64_t batches;          /**< Batches delivered in the window. */
    uint64_t samples;          /**< Samples delivered in the window. */
    uint32_t threads;          /**< Worker threads. */
    int32_t device;            /**< The device path's GPU, or -1. */
    double wall_seconds;       /**< The window: from the batch before it (or open) to its last. */
    double wait_seconds;       /**< The consumer's time inside dlc_loader_next() (or _device). */
    double away_seconds;       /**< The consumer's time between those calls: its own step. */
    double input_share;        /**< wait / (wait + away): the share of the step lost to input. */
    double step_seconds;       /**< (wait + away) per batch. */
    double io_busy_share;      /**< The I/O thread resolving batches (lookups, reads, pins), */
    double io_read_share;      /**< of which waiting for direct reads to complete, */
    double io_stall_share;     /**< and waiting for shards to arrive (streaming). */
    double io_held_share;      /**< The I/O thread waiting for a slot the consumer holds beside
                                    the batch it uses (max_lent > 1). */
    double io_full_share;      /**< The I/O thread waiting with the ring full: batches made ahead
                                    of the consumer, or still in the workers' or copy's hands. */
    double io_idle_share;      /**< The I/O thread with nothing to do (the plan's end). */
    double workers_busy_share; /**< The workers inside batches (mean over workers). */
    double workers_io_share;   /**< The workers waiting while a batch was in its I/O stage. */
    double workers_idle_share; /**< The workers waiting with no batch in I/O. */
    double workers_cpu_share;  /**< Of the workers' busy time, the share on the CPU (the rest:
                                    page faults from the disk, or cores shared with others). */
    double sample_seconds;     /**< Workers' busy time per sample (crop, resize, convert). */
    uint64_t major_faults;     /**< Major page faults of the workers inside batches. */
    double copy_busy_share;    /**< The device copy thread copying (0 without the device path). */
    double copy_idle_share;    /**< The device copy thread waiting for work or a free buffer. */
    double stall_seconds;      /**< Streaming: the I/O thread's wait for shards (io_stall). */
    uint64_t bytes_read;       /**< Payload bytes read in the window. */
    char reason[256];          /**< The verdict in a sentence, with the figures behind it. */
    char advice[256];          /**< What to change (or "nothing" when the model bounds). */
} dlc_loader_report;

/**
 * @brief Where the time went, over the last @p last batches delivered or since open, and which
 *        part bounds the step. Costs a sum over the workers' counters; allocates nothing.
 * @param[in] l The loader.
 * @param[in] last Batches of the window (at most 1023 are kept); 0, or more than were
 *            delivered: since open.
 * @param[in,out] r Its struct_size set by the caller; filled up to it.
 * @return DLC_OK; DLC_EINVAL (NULL, or a struct_size of 0 or larger than the library's).
 * Thread safety: the consumer's thread, like dlc_loader_next().
 */
DLC_API dlc_status dlc_loader_get_report(const dlc_loader *l, uint32_t last, dlc_loader_report *r);

/** @brief The name of a ::dlc_bound: "model", "cpu", "storage", "network", "copy",
 *         "consumer", "batch", or "unknown".
 *  @param[in] bound A ::dlc_bound.
 *  @return A static string. */
DLC_API const char *dlc_bound_name(uint32_t bound);

/**
 * @brief Write @p r as text: a short table of the shares, the verdict, its reason and advice.
 * @param[in] r A report filled by dlc_loader_get_report() (all of this header's fields).
 * @param[out] buf @p cap bytes, NUL-terminated when @p cap > 0; may be NULL when @p cap is 0.
 * @param[in] cap Bytes at @p buf.
 * @return The length of the whole text (as snprintf: larger than @p cap - 1 when cut).
 */
DLC_API size_t dlc_loader_report_text(const dlc_loader_report *r, char *buf, size_t cap);

/** Stop the workers and free everything. Lent batches die. With the device path,
 *  waits first (on the host) for the device work the loader enqueued, including conversions on
 *  the caller's streams.
 *  After it, @p l is freed memory: any call with it, dlc_loader_next() included, is a use after
 *  free that no library can answer reliably (the memory may already hold something else). The
 *  loader marks itself closed before it is freed, so a call soon after usually fails with
 *  DLC_ESTATE instead of waiting on threads that are gone, and ASan names the call; set the
 *  pointer to NULL after closing (NULL is DLC_EINVAL, 0 or NULL in every loader call).
 *  @param[in] l The loader, or NULL (nothing happens). */
DLC_API void dlc_loader_close(dlc_loader *l);

#ifdef __cplusplus
}
#endif
#endif /* DLCACHE_LOADER_H */
