/*
 * cachebench: throughput of the loader, measured against the machine's memcpy
 * ceiling and against decoding the JPEGs every epoch, in one process and one
 * run (docs/BENCHMARKS.md).
 *
 *   cachebench decode SOURCE --threads T [--json] [--limit N]
 *   cachebench load STORE --batch B --threads T ... [--jpeg-dir DIR] [--json]
 *
 * The machines this runs on are shared and noisy, so every absolute figure is
 * reported next to a reference measured seconds apart on the same threads:
 * the loader's bytes per second over a plain memcpy of the same bytes, and its
 * samples per second over the decode-every-epoch path. Those ratios are what
 * docs/BENCHMARKS.md quotes.
 *
 * This file holds the usage text and the dispatch; tools/bench.h says which
 * file holds each engine. The tool uses the public headers, tools/toolutil.h,
 * the common part and, for the JPEG path, the loader's own augmentation code.
 */
#include "bench.h"

#include <string.h>

void bench_usage(FILE *out)
{
    fputs("usage: cachebench decode SOURCE [--threads T] [--limit N] [--seconds S]\n"
          "                         [--size N [--center-crop]] [--json]\n"
          "       cachebench load STORE [options] [--json]\n"
          "       cachebench load STORE STORE... --weights W,W... [--samples-per-epoch N]\n"
          "\n"
          "decode: plain libjpeg-turbo decode at full size of every JPEG under SOURCE (an\n"
          "  ImageFolder tree or any directory of .jpg files, searched recursively and\n"
          "  sorted), on T threads with one codec each. Files are read into memory first\n"
          "  (not timed); passes over all images repeat until S seconds (default 2) have\n"
          "  passed. This is the reference the builder's images/s is compared with.\n"
          "  --size N: then, on the same files and threads, the builder's own transform\n"
          "  (decode + resize to short side N, --center-crop as cachebuild's) into memory,\n"
          "  nothing written: the ceiling of cachebuild --size N (resize_images_per_s).\n"
          "\n"
          "load: in one run, (1) the memcpy ceiling: T threads copy sample-sized blocks from a\n"
          "  buffer larger than the last-level cache into batch-sized destinations, (2) the\n"
          "  loader's samples/s and GB/s of output, (3) with --jpeg-dir, the decode-every-\n"
          "  epoch path: the builder's decode + resize to the store's size, then the loader's\n"
          "  own crop + flip + convert into a batch, on the same T threads. (1) and (3) run\n"
          "  half before and half after (2). Then, untimed, a second loader of the same\n"
          "  configuration hashes its batches for the determinism digest. Options:\n"
          "  --batch B            samples per batch (default 256)\n"
          "  --threads T          worker threads for all three (default: all cores); auto: the\n"
          "                       loader tunes its own up to the cores (the references use all)\n"
          "  --prefetch P         batches in flight (default 4)\n"
          "  --fields A,B,...     the fields to load (default: all); bytes and the\n"
          "                       ceiling count every selected field\n"
          "  --crop C             output C x C (default 224; 0 = the store's size)\n"
          "  --random-resized-crop  RandomResizedCrop(C) instead of a random C x C crop\n"
          "  --flip P             horizontal flip probability (default 0.5)\n"
          "  --dtype uint8|float32|float16|bfloat16  (default uint8; floats are normalized NCHW)\n"
          "  --seed S --epoch E   sampler seed and first epoch (default 0, 0)\n"
          "  --epochs K | --batches K  measure exactly K epochs or K batches after the\n"
          "                       warm-up batch (default: as many as fit in S seconds)\n"
          "  --seconds S          length of each time-based window (default 2)\n"
          "  --io auto|mmap|direct  how the loader reads records (default auto)\n"
          "  --rank R --world-size W  read rank R's shard of W\n"
          "  --sampler sequential|shuffle|windows  the order (default shuffle; windows for a\n"
          "                       URL): windows = shard windows (docs/STREAMING.md)\n"
          "  --window-shards N --streams V  the shard windows' shape (default 4, world size)\n"
          "  --cache-dir DIR      STORE is a set's URL (s3://, gs://, https://): stream it\n"
          "                       through the shard cache in DIR\n"
          "  --cache-limit SIZE   the most bytes DIR may hold (e.g. 50G; default no limit);\n"
          "                       SIZE: K, M, G, KiB... are powers of 1024, kB, MB, GB of 1000\n"
          "  --cache-ranks N      processes sharing DIR (default 1)\n"
          "  --downloads N        shards downloaded at once (default 2)\n"
          "  --endpoint URL --region R  the S3 or GCS endpoint and region of the URL\n"
          "  --timeout SECONDS    retry a request slower than 1 KiB/s this long (default 30, min "
          "0.1)\n"
          "  --retries N          attempts per request after the first, 0..1000 (default 8;\n"
          "                       0: fail fast)\n"
          "  --weights W,W,...    several STOREs are a mixture (dlc_loader_open_mix): one\n"
          "                       weight per STORE (default equal); the shares of each\n"
          "                       source per epoch go to stderr after the report\n"
          "  --samples-per-epoch N  a mixture's epoch (default: its records)\n"
          "  --device N           run the loader's device path on GPU N instead: each batch\n"
          "                       is converted (--dtype, --device-layout) by\n"
          "                       dlc_loader_device_emit on the default stream into device\n"
          "                       memory of cachebench's own; samples/s on the GPU, the\n"
          "                       copies' GB/s and their ceiling (pinned copies of one\n"
          "                       batch, before and after) replace the memcpy ceiling; exit\n"
          "                       1 naming why when the GPU is unusable\n"
          "  --device-layout nchw|nhwc  images written on the GPU (default: the library's,\n"
          "                       uint8 NHWC and floats NCHW)\n"
          "  --device-lend        with --device: lend mode, each staged uint8 batch waited\n"
          "                       for and released, no conversion kernel\n"
          "  --jpeg-dir DIR       the JPEGs the store was built from: also time the\n"
          "                       decode-every-epoch path and report the loader's speed-up\n"
          "  --digest | --no-digest  hash batches in the untimed pass: the batches of\n"
          "                       --epochs/--batches (on by default with them), else the\n"
          "                       first epoch (off by default with a time-based window\n"
          "                       and with --device, whose digest is of host batches)\n"
          "  --digest-batches K   hash exactly the first K batches instead\n"
          "  --no-prewarm         do not read the store into the page cache first\n"
          "  --json               print one JSON object on stdout\n",
          out);
}

int main(int argc, char **argv)
{
    if (argc < 2 || !strcmp(argv[1], "-h") || !strcmp(argv[1], "--help")) {
        bench_usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    if (!strcmp(argv[1], "decode"))
        return bench_cmd_decode(argc - 2, argv + 2);
    if (!strcmp(argv[1], "load"))
        return bench_cmd_load(argc - 2, argv + 2);
    fprintf(stderr, TOOL ": error: unknown command '%s' (decode or load; see --help)\n", argv[1]);
    return 2;
}
