/* Private to cachebench: what its files share. cachebench.c holds main and the usage text;
 * bench_util.c the thread window, memory figures and JPEG files in memory; bench_decode.c the
 * plain decode reference; bench_ceiling.c the memcpy ceiling; bench_jpeg.c the decode-every-epoch
 * path; bench_opts.c the load options; bench_load.c the loader's timed window and the untimed
 * digest pass; bench_device.c the device path (--device); bench_report.c the load report.
 *
 * The JPEG path runs the loader's own augmentation code (loader/augment.h, reached through the
 * include directory that CMake gives this tool), so that its figure is the loader's work plus a
 * decode, never a copy of the loader that could drift from it. */
#ifndef DLCACHE_TOOLS_BENCH_H
#define DLCACHE_TOOLS_BENCH_H

#include "toolutil.h"

#include <dlcache/loader.h>
#include <dlcache/store.h>

#include <pthread.h>
#include <stdatomic.h>
#include <xxhash.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#define TOOL "cachebench"

/* Each time-based measurement runs at least this long by default: long enough that thread
 * start, the first page faults and one slow batch are a small part of the window, short enough
 * for a sweep over thread counts. */
#define BENCH_DEFAULT_SECONDS 2.0

/* The usage text (cachebench.c). */
void bench_usage(FILE *out);

/* ---- Plumbing (bench_util.c) ----------------------------------------------------------------- */

/* 64-byte aligned memory (at least 64 bytes); release with free(). NULL when out of memory. */
void *bench_aligned(size_t size);

/* Bytes of resident and anonymous memory of this process now (not the peak): the file-backed
 * part of the store's map is shared page cache, the anonymous part is what the loader itself
 * allocated. Zeros when /proc is not readable. */
void bench_memory_now(uint64_t *rss, uint64_t *anon);

/* Parse a positive number of seconds. Returns 0, or -1 on a malformed or non-positive value. */
int bench_parse_seconds(const char *v, double *out);

const char *bench_io_name(uint32_t io);

/* A start line for worker threads, so that the clock starts when all of them are ready rather
 * than while the last one is still being created. */
typedef struct bench_sync {
    pthread_barrier_t start; /**< Workers wait here, then the window is open. */
    atomic_int stop;         /**< Set by the main thread when the window is over. */
    atomic_int failed;       /**< A worker hit an error and reported it. */
    double t0;               /**< dlc__now_s() when the window opened. */
} bench_sync;

/* Start @p n threads running @p fn on the @p n records of @p arg_size bytes at @p args, open the
 * window when all are ready, let it run @p seconds (0: until the workers stop by themselves) or
 * until a worker sets sync->failed, and return the window's length in seconds. Exits the process
 * when a thread cannot be started. */
double bench_run_window(int n, void *(*fn)(void *), void *args, size_t arg_size, bench_sync *sync,
                        double seconds);

/* One timed window of a reference: what it did and for how long. */
typedef struct bench_window {
    double seconds;
    uint64_t samples;
} bench_window;

/* ---- JPEG files in memory (bench_util.c) ----------------------------------------------------- */

typedef struct bench_jpeg_file {
    char *path;    /**< Full path, for error messages. */
    uint8_t *data; /**< The whole file. */
    size_t size;   /**< Bytes. */
    int64_t label; /**< Index of the top-level folder, ImageFolder style. */
} bench_jpeg_file;

typedef struct bench_jpeg_set {
    bench_jpeg_file *files;
    size_t count, cap;
    uint64_t bytes; /**< Sum of the files' sizes. */
} bench_jpeg_set;

/* List the .jpg/.jpeg files under @p dir (recursively, sorted at each level) and read them into
 * memory, at most @p limit of them when non-zero. Returns 0, or -1 after printing why; free the
 * set with bench_jpeg_set_free() either way. */
int bench_jpeg_set_load(bench_jpeg_set *set, const char *dir, uint64_t limit);
void bench_jpeg_set_free(bench_jpeg_set *set);

/* ---- The plain decode reference (bench_decode.c) --------------------------------------------- */

/* `cachebench decode ARGS`: returns the exit status (0, 1 on a failure, 2 on a usage error). */
int bench_cmd_decode(int argc, char **argv);

/* ---- The memcpy ceiling (bench_ceiling.c) ---------------------------------------------------- */

/* Buffers made once and used for the windows before and after the loader. */
typedef struct bench_ceiling bench_ceiling;

/* Make the source buffer (its pages written, so no window takes a page fault) and one batch of
 * @p batch x @p sample_bytes per thread. Returns 0, or -1 after printing why. */
int bench_ceiling_open(int threads, uint32_t batch, size_t sample_bytes, bench_ceiling **out);
/* One window of @p seconds: @p threads copy sample-sized blocks from random places. */
void bench_ceiling_run(bench_ceiling *c, double seconds, bench_window *res);
size_t bench_ceiling_source_bytes(const bench_ceiling *c);
/* Accepts NULL. */
void bench_ceiling_close(bench_ceiling *c);

/* ---- The decode-every-epoch path (bench_jpeg.c) ---------------------------------------------- */

/* The JPEG path's files, codecs and buffers, made once and used for the windows before and after
 * the loader; the files' order continues from one window to the next. */
typedef struct bench_jpeg bench_jpeg;

/* Read the JPEGs under @p dir and make one codec and batch buffer per thread, to decode each
 * file to the store's @p store_side (square, center crop) and augment it as @p cfg says.
 * Returns 0, or -1 after printing why. */
int bench_jpeg_open(const char *dir, int threads, const dlc_loader_config *cfg, uint32_t store_side,
                    size_t sample_bytes, bench_jpeg **out);
/* One window of @p seconds. Returns 0, or -1 when a worker failed (it printed why). */
int bench_jpeg_run(bench_jpeg *jb, double seconds, bench_window *res);
uint64_t bench_jpeg_files(const bench_jpeg *jb);
/* Accepts NULL. */
void bench_jpeg_close(bench_jpeg *jb);

/* ---- load: options (bench_opts.c) ------------------------------------------------------------ */

typedef struct bench_load_opts {
    const char *store;    /**< STORE. */
    const char *jpeg_dir; /**< --jpeg-dir, or NULL. */
    dlc_loader_config cfg;
    uint64_t epochs, batches; /**< --epochs / --batches; 0 when the window is time-based. */
    double seconds;           /**< --seconds: the window, and the references' windows. */
    int json, prewarm;
    int device_lend; /**< --device-lend: the device path in lend mode, no conversion. */
    /* The untimed digest pass: off when both are 0, else exactly one is set. */
    uint64_t digest_epochs;                  /**< Hash this many whole epochs. */
    uint64_t digest_batches;                 /**< Hash this many batches. */
    const char *field_names[DLC_MAX_FIELDS]; /**< --fields, split; cfg.fields points here. */
    int streamed;          /**< STORE is a set's URL: read through the shard cache. */
    int sampler_set;       /**< --sampler was given. */
    dlc_warm_options net;  /**< --endpoint, --region, --timeout, --retries: the downloads'
                                (cfg.net points here). */
    char fields_buf[1024]; /**< The --fields text the names point into. */
    /* A mixture: STORE A B ... --weights 0.7,0.3 (dlc_loader_open_mix()). */
    const char *mix[64];        /**< Every STORE given, the first being `store`. */
    uint32_t nmix;              /**< Entries of mix. */
    double weights[64];         /**< --weights, one per STORE (default 1 each). */
    uint32_t nweights;          /**< Entries given to --weights. */
    uint64_t samples_per_epoch; /**< --samples-per-epoch (0: the sources' records). */
    /** STORE as shown in messages and --json: a URL's password and query string redacted. */
    char shown[4096];
} bench_load_opts;

/* Open the loader of @p o's STORE, or of its mixture when several were given, with @p cfg. */
/* Whether @p path is a set's URL (s3://, gs://, http(s)://), streamed through the cache. */
int bench_is_url(const char *path);
dlc_status bench_open_loader(const bench_load_opts *o, const dlc_loader_config *cfg,
                             dlc_loader **out);

/* Parse `cachebench load` arguments. Returns 0, 1 when --help was printed, or -1 after printing
 * a usage error. */
int bench_load_parse(int argc, char **argv, bench_load_opts *o);

/* ---- load: the loader (bench_load.c) --------------------------------------------------------- */

/* The timed run of the loader. */
typedef struct bench_loader_result {
    double open_seconds, first_batch_seconds, seconds;
    uint64_t warmup_samples; /**< The first batch, not timed. */
    uint64_t samples, batches, bytes, epochs_done;
    uint64_t rss_open, anon_open; /**< Just before dlc_loader_open. */
    uint64_t rss_first_batch, anon_first_batch, rss_end, anon_end;
    dlc_loader_stats stats;
    dlc_loader_stats stats_warm;    /**< After the warm-up batch: the window's counters are the
                                         difference. */
    dlc_loader_stream_stats stream; /**< Streaming's counters over the loader's life. */
    double copy_event_seconds;      /**< dlc_loader_device_copy_event_seconds() at the end. */
    double copy_event_seconds_warm; /**< The same after the warm-up batch. */
    dlc_loader_report report;       /**< Where the time went over the window's last batches. */
} bench_loader_result;

/* The untimed digest pass. */
typedef struct bench_digest {
    int done;         /**< A digest was asked for and computed. */
    uint64_t value;   /**< XXH3-64 over each batch's bytes then labels, in order. */
    uint64_t batches; /**< Batches hashed. */
    uint64_t samples; /**< Samples in them. */
    double seconds;   /**< How long the pass took (not a throughput figure). */
} bench_digest;

/* `cachebench load ARGS`: returns the exit status. */
int bench_cmd_load(int argc, char **argv);

/* What the timed window consumes batches with: the host path (bench_load.c) or the device path
 * (bench_device.c). */
typedef struct bench_consumer {
    /* Take the next batch, count it and give it back (or hand it on to the device): @p count
     * samples and @p bytes delivered. */
    dlc_status (*next)(void *ctx, dlc_loader *l, uint32_t *count, size_t *bytes);
    /* NULL, or wait on the host until the work that next() enqueued has completed: called after
     * the warm-up batch and to close the window, so that the window holds exactly its batches'
     * work. */
    dlc_status (*drain)(void *ctx);
    void *ctx;
} bench_consumer;

/* ---- load: the device path (bench_device.c) -------------------------------------------------- */

/* The device path's references, measured before and after the loader's window. */
typedef struct bench_device_refs {
    size_t sample_bytes;            /**< One sample as staged: images uint8, the rest as stored. */
    size_t batch_bytes;             /**< batch x sample_bytes: what each ceiling copy moves. */
    uint32_t reps;                  /**< Copies per ceiling window. */
    double ceil_before, ceil_after; /**< GB/s of dlc_cuda_copy_ceiling(). */
} bench_device_refs;

/* One output's device memory, cachebench's own (dlc_cuda_alloc). */
typedef struct bench_device_buf {
    void *data;    /**< cap bytes, or NULL before an output had bytes. */
    size_t cap;    /**< Bytes at data. */
    void *lengths; /**< batch int64, for an output with lengths; else NULL. */
    void *offsets; /**< batch + 1 int64, for an output with offsets; else NULL. */
} bench_device_buf;

/* The device path's consumer. Emit mode (the default): each batch is converted by
 * dlc_loader_device_emit() on the legacy default stream into device buffers allocated at the
 * first batch (the warm-up one, untimed) from its dlc_device_field.bytes, and grown when a later
 * batch needs more (variable-size outputs only: an image store's shapes are fixed). Lend mode
 * (--device-lend): each staged batch is waited for on that stream and released, no kernel. */
typedef struct bench_device_out {
    int device;             /**< The GPU. */
    int lend;               /**< --device-lend. */
    uint32_t batch;         /**< config.batch_size: no batch has more samples. */
    uint32_t num;           /**< Outputs per batch, from the first batch (0 before it). */
    bench_device_buf *bufs; /**< num buffers. */
    dlc_device_dst *dst;    /**< num destinations into bufs. */
    void *indices;          /**< batch uint64 record numbers. */
    uint64_t allocated;     /**< Device bytes held for the outputs (they only grow). */
    uint32_t reallocs;      /**< Buffers grown after the first batch. */
    int has_image;          /**< The batches have an image output. */
    uint32_t image_dtype;   /**< The first image output as written (lend: as staged). */
    uint32_t image_layout;  /**< Ditto: DLC_LAYOUT_NCHW or DLC_LAYOUT_NHWC. */
} bench_device_out;

/* Can the device path run on o->cfg.device? Prints the reason (dlc_cuda_probe()'s) when it
 * cannot. Fills @p refs' sizes from the store @p s. Returns 0 or -1. */
int bench_device_prepare(const bench_load_opts *o, const dlc_store *s, bench_device_refs *refs);
/* The loader is open: is its device path on? Prints why not. Returns 0 or -1. */
int bench_device_check_loader(const bench_load_opts *o, const dlc_loader *l);
/* One window of the copy ceiling into *gbps. Returns 0 or -1 (printed). */
int bench_device_ceiling(const bench_load_opts *o, const bench_device_refs *refs, double *gbps);
/* The consumer of the device path over @p out (zeroed here), in the mode --device-lend says. */
void bench_device_consumer(const bench_load_opts *o, bench_device_out *out, bench_consumer *c);
/* Free @p out's device memory (after dlc_loader_close(), which waits for the conversions);
 * keeps its figures for the report. */
void bench_device_out_free(bench_device_out *out);

/* ---- load: the selected fields (bench_fields.c) ---------------------------------------------- */

typedef struct bench_load_run bench_load_run;

/* Split --fields NAME,NAME... into o->field_names and the loader's configuration. Returns 0, or
 * -1 for an empty list or one of more than DLC_MAX_FIELDS names. */
int bench_fields_parse(const char *v, bench_load_opts *o);

/* Check the names against the store, and fill run->selected, run->sample_bytes (one sample of
 * every selected output), run->image_bytes (of the first image field's output, 0 when it is not
 * selected) and run->has_image. Returns 0, or -1 after naming an unknown field. */
int bench_fields_resolve(const dlc_store *s, const bench_load_opts *o, bench_load_run *run);

/* Bytes of every output of @p b. */
size_t bench_batch_bytes(const dlc_batch *b);

/* Hash @p b for the determinism digest: each output's bytes (and lengths or offsets) in order,
 * but the label field's, then the labels. */
void bench_digest_batch(XXH3_state_t *st, const dlc_batch *b, uint32_t label_field);

/* ---- load: the report (bench_report.c) ------------------------------------------------------- */

/* Everything one `cachebench load` run measured. */
struct bench_load_run {
    const bench_load_opts *o;
    dlc_store_info info;
    char field_list[1024];                  /**< The selected fields' names, "image, label". */
    unsigned char selected[DLC_MAX_FIELDS]; /**< The outputs the loader makes. */
    int has_image;                          /**< An image or mask is among them. */
    size_t sample_bytes;                    /**< One sample of every selected output. */
    size_t image_bytes;                     /**< One sample of the first image's output. */
    uint64_t resident_before, resident_after;
    double prewarm_seconds;
    bench_window ceil_before, ceil_after;
    size_t ceil_source_bytes;
    bench_window jpeg_before, jpeg_after; /**< Zero without --jpeg-dir. */
    uint64_t jpeg_files;
    bench_loader_result lr;
    bench_device_refs dev;    /**< Zero without --device. */
    bench_device_out dev_out; /**< Zero without --device. */
    bench_digest digest;
};

/* Print the run as JSON (--json) or as a few lines of text, on stdout. */
void bench_load_report(const bench_load_run *run);
/* The device path's part of the report (bench_device.c). */
void bench_device_json(tool_json *j, const bench_load_run *r);
void bench_device_text(const bench_load_run *r);

#endif /* DLCACHE_TOOLS_BENCH_H */
