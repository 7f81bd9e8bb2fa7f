/*
 * cachebuild --tokens: a token store from token files or text (include/dlcache/tokens.h,
 * dlc_tokens_build()).
 *
 *   cachebuild --tokens SOURCE... -o STORE [--field NAME] [--tokenizer M.model] [--eos ID]
 *              [--vocab N] [--dtype uint16|uint32] [--store-dtype uint16|int32]
 *              [--format auto|jsonl|bin|npy|megatron] [--force] [--json]
 *
 * Exit status: 0 built, 1 failed (a bad source is named with its line or record), 2 usage error
 * or the output exists without --force.
 */
#include "cachebuild_tokens.h"

#include <dlcache/tokens.h>

#include "toolutil.h"

#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TOOL "cachebuild"

static void usage(FILE *f)
{
    fputs("usage: " TOOL " --tokens SOURCE... -o STORE [options]\n"
          "\n"
          "Write a token store: one document's token ids per record, with the prefix sums of\n"
          "the documents' lengths (docs/FORMAT.md, \"Token stores\").\n"
          "\n"
          "SOURCE, by its name (or --format):\n"
          "  FILE.jsonl, FILE.json  JSON lines; each object's --field member holds a list of\n"
          "                         token ids (default field \"tokens\"), or text tokenized by\n"
          "                         --tokenizer (default field \"text\")\n"
          "  FILE.bin               nanoGPT's flat file of --dtype ids, split into documents\n"
          "                         after each --eos id\n"
          "  FILE.npy               integers: 1-D split after each --eos id, 2-D one row each\n"
          "  PREFIX.idx, PREFIX.bin a Megatron-LM indexed dataset (MMIDIDX) and its data\n"
          "\n"
          "options:\n"
          "  -o, --output STORE     the store to write (required)\n"
          "  --field NAME           the JSON member to read\n"
          "  --tokenizer M.model    a SentencePiece model: JSON lines hold text\n"
          "  --eos ID               the end-of-document id (default: the tokenizer's)\n"
          "  --vocab N              ids are below N (default: the tokenizer's, or unknown)\n"
          "  --dtype uint16|uint32  the ids of flat .bin files (default uint16)\n"
          "  --store-dtype uint16|int32  the stored ids (default: uint16 when the vocabulary\n"
          "                         fits, else int32)\n"
          "  --format F             auto (default), jsonl, bin, npy or megatron\n"
          "  --shards N             write a store set of N parts in the directory STORE\n"
          "                         (the documents split in order), then join it\n"
          "  --part I/N             write part I of N only (one machine of many); then\n"
          "                         cachebuild --join STORE once every part is there\n"
          "  --force                replace STORE\n"
          "  --json                 print a JSON report\n",
          f);
}

int cachebuild_tokens_wanted(int argc, char **argv)
{
    for (int i = 1; i < argc; i++)
        if (strcmp(argv[i], "--tokens") == 0)
            return 1;
    return 0;
}

/* The build's progress callback: stop when a signal asked for it. */
static int stop_on_signal(void *user, uint64_t documents)
{
    (void)documents;
    return *(volatile sig_atomic_t *)user != 0;
}

int cachebuild_tokens_main(int argc, char **argv, volatile sig_atomic_t *signaled)
{
    dlc_tokens_build_options o;
    dlc_tokens_build_options_init(&o);
    int json = 0;
    enum {
        O_PART = 998,
        O_SHARDS = 999,
        O_TOKENS = 1000,
        O_FIELD,
        O_TOK,
        O_EOS,
        O_VOCAB,
        O_DTYPE,
        O_SDTYPE,
        O_FORMAT,
        O_FORCE,
        O_JSON
    };
    static const struct option longopts[] = {
        {"tokens", no_argument, NULL, O_TOKENS},
        {"output", required_argument, NULL, 'o'},
        {"field", required_argument, NULL, O_FIELD},
        {"tokenizer", required_argument, NULL, O_TOK},
        {"eos", required_argument, NULL, O_EOS},
        {"vocab", required_argument, NULL, O_VOCAB},
        {"dtype", required_argument, NULL, O_DTYPE},
        {"store-dtype", required_argument, NULL, O_SDTYPE},
        {"format", required_argument, NULL, O_FORMAT},
        {"force", no_argument, NULL, O_FORCE},
        {"json", no_argument, NULL, O_JSON},
        {"shards", required_argument, NULL, O_SHARDS},
        {"part", required_argument, NULL, O_PART},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    int c;
    uint64_t v;
    while ((c = getopt_long(argc, argv, "o:h", longopts, NULL)) != -1) {
        switch (c) {
        case O_TOKENS:
            break;
        case 'o':
            o.output = optarg;
            break;
        case O_FIELD:
            o.field = optarg;
            break;
        case O_TOK:
            o.tokenizer = optarg;
            break;
        case O_EOS:
            if (tool_parse_u64(optarg, UINT32_MAX, &v) != 0)
                return tool_usage_error(TOOL, NULL, "--eos is an id 0..2^32-1, not '%s'", optarg);
            o.eos_id = (int64_t)v;
            break;
        case O_VOCAB:
            if (tool_parse_u64(optarg, 1u << 31, &v) != 0 || v == 0)
                return tool_usage_error(TOOL, NULL, "--vocab is 1..2^31, not '%s'", optarg);
            o.vocab_size = (uint32_t)v;
            break;
        case O_DTYPE:
            if (strcmp(optarg, "uint16") != 0 && strcmp(optarg, "uint32") != 0)
                return tool_usage_error(TOOL, NULL, "--dtype is uint16 or uint32, not '%s'",
                                        optarg);
            o.bin_dtype = strcmp(optarg, "uint16") == 0 ? DLC_DTYPE_UINT16 : DLC_DTYPE_INT32;
            break;
        case O_SDTYPE:
            if (strcmp(optarg, "uint16") != 0 && strcmp(optarg, "int32") != 0)
                return tool_usage_error(TOOL, NULL, "--store-dtype is uint16 or int32, not '%s'",
                                        optarg);
            o.out_dtype = strcmp(optarg, "uint16") == 0 ? DLC_DTYPE_UINT16 : DLC_DTYPE_INT32;
            break;
        case O_FORMAT: {
            static const char *const names[] = {"auto", "jsonl", "bin", "npy", "megatron"};
            uint32_t f = 0;
            while (f < 5 && strcmp(optarg, names[f]) != 0)
                f++;
            if (f == 5)
                return tool_usage_error(
                    TOOL, NULL, "--format is auto, jsonl, bin, npy or megatron, not '%s'", optarg);
            o.format = f;
            break;
        }
        case O_FORCE:
            o.force = 1;
            break;
        case O_PART: {
            unsigned i = 0, n = 0;
            char end = 0;
            if (sscanf(optarg, "%u/%u%c", &i, &n, &end) != 2 || n == 0 || n > 65536 || i >= n)
                return tool_usage_error(TOOL, NULL, "--part wants I/N (part I of N), not '%s'",
                                        optarg);
            o.one_part = 1;
            o.part = i;
            o.shards = n;
            break;
        }
        case O_SHARDS:
            if (tool_parse_u64(optarg, 65536, &v) != 0 || v == 0)
                return tool_usage_error(TOOL, NULL, "--shards is 1..65536, not '%s'", optarg);
            o.shards = (uint32_t)v;
            break;
        case O_JSON:
            json = 1;
            break;
        case 'h':
            usage(stdout);
            return 0;
        default:
            return tool_usage_error(TOOL, usage, "unknown option or missing value: %s",
                                    argv[optind - 1]);
        }
    }
    if (!o.output || optind >= argc)
        return tool_usage_error(TOOL, usage, "--tokens needs SOURCE... and -o STORE");
    o.sources = (const char *const *)argv + optind;
    o.num_sources = (uint32_t)(argc - optind);
    o.progress = stop_on_signal;
    o.progress_user = (void *)signaled;
    dlc_tokens_build_report r;
    memset(&r, 0, sizeof r);
    const dlc_status rc = dlc_tokens_build(&o, &r);
    if (json) {
        tool_json j;
        tool_json_init(&j, stdout);
        tool_json_object_begin(&j, NULL);
        tool_json_str(&j, "output", o.output);
        tool_json_bool(&j, "ok", rc == DLC_OK);
        tool_json_u64(&j, "documents", r.documents);
        tool_json_u64(&j, "tokens", r.tokens);
        tool_json_u64(&j, "skipped", r.skipped);
        tool_json_str(&j, "dtype", dlc_dtype_name(r.dtype));
        tool_json_u64(&j, "eos_id", r.eos_id);
        tool_json_u64(&j, "vocab_size", r.vocab_size);
        tool_json_str(&j, "error", rc == DLC_OK ? NULL : dlc_errmsg());
        tool_json_object_end(&j);
        tool_json_finish(&j);
    }
    if (rc == DLC_ECANCELED && *signaled)
        return tool_interrupted(TOOL, o.output, *signaled);
    if (rc != DLC_OK) {
        tool_report(TOOL, rc, o.output);
        return rc == DLC_EEXIST ? 2 : 1;
    }
    char shown[1024];
    if (!json)
        printf("%s: %llu documents, %llu tokens (%s, end-of-document id %u)",
               tool_printable(o.output, shown, sizeof shown), (unsigned long long)r.documents,
               (unsigned long long)r.tokens, dlc_dtype_name(r.dtype), r.eos_id);
    if (!json && r.skipped)
        printf(", %llu empty documents skipped", (unsigned long long)r.skipped);
    if (!json)
        printf("\n");
    return 0;
}
