/* The I/O thread: works a few batches ahead of the workers. For each batch it looks the records
 * up (headers only) and asks the kernel for their payloads, either as readahead into the page
 * cache (mmap mode: IORING_OP_MADVISE WILLNEED on the mapped range) or as O_DIRECT reads into
 * the slot's own buffers (direct mode), so workers do not stall on page faults of a cold store.
 * A store set has one file per shard: each record is read from its own file (dlc_value.file),
 * through a direct descriptor per file, and each file is checked for shrinking. */
#include "internal.h"

#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define IO_ALIGN 4096u
#define RING_ENTRIES 256u

/* Bytes the page cache can still take, from MemAvailable in /proc/meminfo; 0 when unknown. */
static uint64_t mem_available(void)
{
    FILE *f = fopen("/proc/meminfo", "re");
    if (!f)
        return 0;
    char line[256];
    unsigned long long kb = 0;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "MemAvailable: %llu kB", &kb) == 1)
            break;
    fclose(f);
    return (uint64_t)kb * 1024;
}

static size_t align_up(size_t x, size_t a)
{
    return (x + a - 1) / a * a;
}

/* The most bytes a record's selected span can cover (see dlc__io_open()). */
static size_t span_bound(const dlc_loader *l)
{
    const dlc_store_info *in = l->info;
    size_t bound = 0;
    for (uint32_t f = 0; f < in->num_fields; f++) {
        if (!l->fields[f].max_size && l->selected[f] && l->fields[f].kind != DLC_FIELD_INT &&
            l->fields[f].kind != DLC_FIELD_FLOAT)
            return (size_t)(2 * (in->payload_bytes / (in->count ? in->count : 1))) + 65536;
        bound += (size_t)l->fields[f].max_size + 64;
    }
    return bound;
}

void dlc__selected_span(const dlc_loader *l, const dlc_value *v, uint64_t *off, size_t *len)
{
    uint64_t lo = UINT64_MAX, hi = 0;
    for (uint32_t f = 0; f < l->info->num_fields; f++) {
        const uint32_t k = l->fields[f].kind;
        if (!l->selected[f] || k == DLC_FIELD_INT || k == DLC_FIELD_FLOAT || !v[f].size)
            continue;
        lo = v[f].offset < lo ? v[f].offset : lo;
        hi = v[f].offset + v[f].size > hi ? v[f].offset + v[f].size : hi;
    }
    *off = lo == UINT64_MAX ? 0 : lo;
    *len = lo == UINT64_MAX ? 0 : (size_t)(hi - lo);
}

int dlc__io_resident(const dlc_loader *l)
{
    /* Direct mode is for stores larger than memory, where mincore would walk the page tables of
     * a huge map for an answer known in advance. */
    uint64_t resident = 0;
    /* Streamed, the shards are attached and detached by the I/O thread while this runs on the
     * consumer's (a reset): their maps cannot be walked here (ThreadSanitizer found it), and
     * the answer would be no anyway, since only the shards in use are local. */
    if (l->stream)
        return 0;
    return l->io_mode == DLC_IO_MMAP && dlc_store_resident(l->store, &resident) == DLC_OK &&
           resident >= l->info->file_bytes;
}

/* Direct mode: a descriptor per file of the store, opened with O_DIRECT. */
static dlc_status open_direct(dlc_loader *l)
{
    const dlc_loader_config *c = &l->cfg;
    l->direct_fds = malloc(l->nfiles * sizeof *l->direct_fds);
    if (!l->direct_fds)
        return dlc__errorf(-ENOMEM, "%s: out of memory for %u descriptors", l->path, l->nfiles);
    for (uint32_t f = 0; f < l->nfiles; f++)
        l->direct_fds[f] = -1;
    int refused = 0;
    for (uint32_t f = 0; f < l->nfiles; f++) {
        const char *path = dlc_store_file_path(l->store, f);
        /* By name again (O_DIRECT is a flag of the open file), never blocking: what is there now
         * must be the file the store checked, not a FIFO or another file renamed over it. */
        struct stat st, was;
        int fd = dlc__open_regular(path, O_DIRECT, "store", &st);
        if (fd == -EINVAL) {
            /* Some file systems (tmpfs) refuse O_DIRECT; the same aligned reads still work
             * through the page cache. Said once: a set's shards share their file system. */
            if (!refused++)
                dlc__logf(c->log, c->log_user, DLC_LOG_WARN,
                          "%s: O_DIRECT refused (%s): direct mode reads through the page cache",
                          path, dlc_strerror(-EINVAL));
            fd = dlc__open_regular(path, 0, "store", &st);
        }
        if (fd < 0)
            return fd; /* The message names the path. */
        l->direct_fds[f] = fd;
        const int sfd = dlc_store_file_fd(l->store, f);
        if (sfd >= 0 &&
            (fstat(sfd, &was) != 0 || was.st_ino != st.st_ino || was.st_dev != st.st_dev))
            return dlc__errorf(
                -EAGAIN, "%s: the file changed since the store was opened; open it again", path);
    }
    return DLC_OK;
}

/* A set of many files: the slots' lists of the files each batch reads, and the stamps that
 * keep a file from being listed twice. */
static dlc_status alloc_file_lists(dlc_loader *l)
{
    if (!dlc__io_lists(l))
        return DLC_OK;
    l->stamps = calloc(l->nfiles, sizeof *l->stamps);
    if (!l->stamps)
        return dlc__errorf(-ENOMEM, "%s: out of memory", l->path);
    for (uint32_t i = 0; i < l->nslots; i++) {
        l->slots[i].files = calloc(l->cfg.batch_size, sizeof *l->slots[i].files);
        if (!l->slots[i].files)
            return dlc__errorf(-ENOMEM, "%s: out of memory", l->path);
    }
    return DLC_OK;
}

dlc_status dlc__io_open(dlc_loader *l)
{
    dlc_status rc = DLC_OK;
    const dlc_loader_config *c = &l->cfg;
    l->nfiles = dlc_store_num_files(l->store);
    CHECK(alloc_file_lists(l));
    l->io_mode = c->io;
    if (l->stream) /* Shards arrive one by one and are read through their maps. */
        l->io_mode = DLC_IO_MMAP;
    if (l->io_mode == DLC_IO_AUTO) {
        const uint64_t avail = mem_available();
        l->io_mode = avail && l->info->file_bytes > avail ? DLC_IO_DIRECT : DLC_IO_MMAP;
        dlc__logf(c->log, c->log_user, DLC_LOG_INFO,
                  "%s: %llu bytes, %llu bytes of memory available: io mode %s", l->path,
                  (unsigned long long)l->info->file_bytes, (unsigned long long)avail,
                  l->io_mode == DLC_IO_DIRECT ? "direct" : "mmap");
    }

    const int qrc = io_uring_queue_init(RING_ENTRIES, &l->ring, 0);
    if (qrc == 0) {
        l->uring_ok = 1;
    } else {
        dlc__logf(c->log, c->log_user, DLC_LOG_WARN,
                  "io_uring is not available (%s): reading ahead with posix_fadvise/pread instead",
                  dlc_strerror(qrc));
    }

    if (l->io_mode == DLC_IO_DIRECT) {
        /* A buffer per sample that covers the 4096-aligned span of its selected payloads: the
         * schema bounds every field's size, and the span runs from the first selected payload
         * to the end of the last, over whatever lies between. A store that does not know its
         * largest payloads gets twice the average plus slack, and a larger record is read from
         * the map instead (counted as mmap reads, still correct). */
        l->io_cap = align_up(span_bound(l), IO_ALIGN) + IO_ALIGN;
        assert(l->io_cap % IO_ALIGN == 0); /* Every sample's buffer starts aligned. */
        const size_t slot_bytes = l->io_cap * l->cfg.batch_size;
        for (uint32_t i = 0; i < l->nslots; i++) {
            void *p = NULL;
            FAIL_IF(posix_memalign(&p, IO_ALIGN, slot_bytes), -ENOMEM,
                    "%s: out of memory for %zu bytes of direct I/O buffers", l->path, slot_bytes);
            l->slots[i].iobuf = p;
        }
        /* The lookups read each record's header with pread too: a store truncated under the
         * loader then fails a read (DLC_ECORRUPT naming the store and record) instead of raising
         * SIGBUS in the map between the batch's size check and its lookups. A version 1 store's
         * records are found through LMDB's B-tree, which only the map gives. */
        if (l->info->format_version >= 2) {
            l->hdr_bytes = dlc_store_header_bound(l->store);
            for (uint32_t i = 0; i < l->nslots; i++) {
                l->slots[i].hdr = malloc(l->hdr_bytes * l->cfg.batch_size);
                FAIL_IF(!l->slots[i].hdr, -ENOMEM, "%s: out of memory for record headers", l->path);
            }
        }
        CHECK(open_direct(l));
        if (l->uring_ok && slot_bytes <= (1u << 30)) {
            struct iovec *iov = calloc(l->nslots, sizeof *iov);
            FAIL_IF(!iov, -ENOMEM, "%s: out of memory", l->path);
            for (uint32_t i = 0; i < l->nslots; i++) {
                iov[i].iov_base = l->slots[i].iobuf;
                iov[i].iov_len = slot_bytes;
            }
            /* Registered once: the kernel pins the pages and skips per-read mapping. It counts
             * against RLIMIT_MEMLOCK, so a small limit leaves plain reads. */
            const int r = io_uring_register_buffers(&l->ring, iov, l->nslots);
            free(iov);
            if (r == 0)
                l->bufs_registered = 1;
            else
                dlc__logf(c->log, c->log_user, DLC_LOG_INFO,
                          "%s: io_uring_register_buffers of %zu bytes failed (%s): unregistered "
                          "reads",
                          l->path, slot_bytes * l->nslots, dlc_strerror(r));
        }
    }
    return DLC_OK;
fail:
    return rc;
}

void dlc__io_close(dlc_loader *l)
{
    if (l->uring_ok) {
        io_uring_queue_exit(&l->ring);
        l->uring_ok = 0;
    }
    for (uint32_t f = 0; l->direct_fds && f < l->nfiles; f++)
        if (l->direct_fds[f] >= 0)
            close(l->direct_fds[f]);
    free(l->direct_fds);
    l->direct_fds = NULL;
    for (uint32_t i = 0; l->slots && i < l->nslots; i++) {
        free(l->slots[i].files);
        l->slots[i].files = NULL;
        free(l->slots[i].hdr);
        l->slots[i].hdr = NULL;
    }
    free(l->stamps);
    l->stamps = NULL;
}

/* Collect finished readahead requests without waiting; their results do not matter. */
static void reap_madvise(dlc_loader *l)
{
    struct io_uring_cqe *cqe;
    while (l->madvise_inflight && io_uring_peek_cqe(&l->ring, &cqe) == 0) {
        io_uring_cqe_seen(&l->ring, cqe);
        l->madvise_inflight--;
    }
}

static struct io_uring_sqe *get_sqe(dlc_loader *l)
{
    struct io_uring_sqe *sqe = io_uring_get_sqe(&l->ring);
    if (!sqe) {
        io_uring_submit(&l->ring);
        sqe = io_uring_get_sqe(&l->ring);
    }
    return sqe;
}

static void readahead_mmap(dlc_loader *l, dlc__slot *s)
{
    const uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
    for (uint32_t j = 0; j < s->count; j++) {
        const dlc__sample_io *si = &s->io[j];
        if (si->status != DLC_OK || !si->span_len)
            continue;
        /* The map's base, from any payload view and its file offset: per record, since the
         * records of a set lie in the maps of their shards. */
        const uint8_t *map = NULL;
        for (uint32_t f = 0; f < l->info->num_fields && !map; f++)
            if (si->v[f].data && si->v[f].size)
                map = si->v[f].data - si->v[f].offset;
        if (!map)
            continue;
        if (l->uring_ok) {
            /* Keep the completion queue from filling with answers nobody waits for. */
            if (l->madvise_inflight >= RING_ENTRIES)
                reap_madvise(l);
            if (l->madvise_inflight >= RING_ENTRIES)
                break;
            struct io_uring_sqe *sqe = get_sqe(l);
            if (!sqe)
                break;
            const uintptr_t a = (uintptr_t)(map + si->span_off) & ~(page - 1);
            const uintptr_t e = (uintptr_t)(map + si->span_off) + si->span_len;
            io_uring_prep_madvise(sqe, (void *)a, (off_t)(e - a), MADV_WILLNEED);
            io_uring_sqe_set_data64(sqe, 0);
            l->madvise_inflight++;
        } else {
            posix_fadvise(dlc_store_file_fd(l->store, si->v[0].file), (off_t)si->span_off,
                          (off_t)si->span_len, POSIX_FADV_WILLNEED);
        }
    }
    if (l->uring_ok) {
        io_uring_submit(&l->ring);
        reap_madvise(l);
    }
}

/* Where record @p si's aligned span starts and how many bytes must arrive. */
static void span_of(const dlc__sample_io *si, uint64_t *start, size_t *len, size_t *need)
{
    *start = si->span_off & ~(uint64_t)(IO_ALIGN - 1);
    *need = (size_t)(si->span_off + si->span_len - *start);
    *len = align_up(*need, IO_ALIGN);
}

static void read_direct(dlc_loader *l, dlc__slot *s, uint32_t slot_index)
{
    assert(s->count <= l->cfg.batch_size && slot_index < l->nslots);
    uint32_t inflight = 0;
    for (uint32_t j = 0; j < s->count; j++) {
        dlc__sample_io *si = &s->io[j];
        if (si->status != DLC_OK || !si->span_len)
            continue;
        uint64_t start;
        size_t len, need;
        span_of(si, &start, &len, &need);
        if (len > l->io_cap) {
            /* Larger than a buffer: the worker reads it from the map, and so its values must
             * point there (the file was checked for shrinking at the batch's start). */
            if (l->hdr_bytes)
                si->status = dlc_store_read_values(l->io_reader, si->index, si->v);
            continue;
        }
        uint8_t *buf = s->iobuf + (size_t)j * l->io_cap;
        /* O_DIRECT wants the buffer, the offset and the length aligned. */
        assert((uintptr_t)buf % IO_ALIGN == 0 && start % IO_ALIGN == 0 && len % IO_ALIGN == 0);
        assert(need <= len && len <= l->io_cap);
        assert(si->v[0].file < l->nfiles);
        const int fd = l->direct_fds[si->v[0].file]; /* Every field of a record is in one file. */
        si->span = buf + (si->span_off - start);
        atomic_fetch_add_explicit(&l->st_bytes, si->span_len, memory_order_relaxed);
        if (!l->uring_ok) {
            const ssize_t r = pread(fd, buf, len, (off_t)start);
            if (r < 0 || (size_t)r < need)
                si->status = r < 0 ? -errno : -EIO;
            continue;
        }
        struct io_uring_sqe *sqe = get_sqe(l);
        if (!sqe) {
            si->status = -EBUSY;
            continue;
        }
        if (l->bufs_registered)
            io_uring_prep_read_fixed(sqe, fd, buf, (unsigned)len, start, (int)slot_index);
        else
            io_uring_prep_read(sqe, fd, buf, (unsigned)len, start);
        io_uring_sqe_set_data64(sqe, j);
        inflight++;
    }
    if (!l->uring_ok)
        return;
    io_uring_submit(&l->ring);
    const uint64_t t0 = dlc__now_ns();
    while (inflight) {
        struct io_uring_cqe *cqe;
        const int r = io_uring_wait_cqe(&l->ring, &cqe);
        if (r == -EINTR)
            continue;
        if (r < 0)
            break;
        const uint64_t j = io_uring_cqe_get_data64(cqe);
        const int res = cqe->res;
        io_uring_cqe_seen(&l->ring, cqe);
        /* Only this batch's reads are in flight: direct mode sends no readahead. */
        assert(j < s->count && inflight > 0);
        inflight--;
        dlc__sample_io *si = &s->io[j];
        uint64_t start;
        size_t len, need;
        span_of(si, &start, &len, &need);
        if (res < 0)
            si->status = res;
        else if ((size_t)res < need)
            si->status = -EIO; /* A short read: the file ends inside the record. */
    }
    dlc__cnt_add(&l->io_read, dlc__now_ns() - t0);
}

int dlc__file_shrunk(const dlc_loader *l, uint32_t file, uint64_t *now)
{
    struct stat st;
    const uint64_t size = dlc_store_file_bytes(l->store, file);
    if (fstat(dlc_store_file_fd(l->store, file), &st) != 0 || (uint64_t)st.st_size >= size)
        return 0;
    *now = (uint64_t)st.st_size;
    return 1;
}

int dlc__store_shrunk(const dlc_loader *l, const dlc__slot *s, uint32_t *file, uint64_t *now)
{
    const int all = !dlc__io_lists(l);
    const uint32_t n = all ? l->nfiles : s->nfiles;
    assert(all || (s->files && s->nfiles <= s->count));
    for (uint32_t i = 0; i < n; i++) {
        *file = all ? i : s->files[i];
        if (dlc__file_shrunk(l, *file, now))
            return 1;
    }
    return 0;
}

void dlc__shrunk_msg(const dlc_loader *l, uint32_t file, uint64_t now, uint64_t index, char *buf,
                     size_t cap)
{
    const uint64_t was = dlc_store_file_bytes(l->store, file);
    char what[PATH_MAX + 32] = "the store";
    if (l->nfiles > 1)
        snprintf(what, sizeof what, "its shard %s", dlc_store_file_path(l->store, file));
    snprintf(buf, cap,
             "%s: record %llu: %s shrank from %llu to %llu bytes while the loader was reading it "
             "(truncated in place; replace a store by renaming a new file over it)",
             l->path, (unsigned long long)index, what, (unsigned long long)was,
             (unsigned long long)now);
}

/* Every sample of slot @p s fails with @p rc, the batch's error saying @p msg. */
static void fail_batch(dlc_loader *l, dlc__slot *s, dlc_status rc, const char *msg)
{
    const dlc__shard *sh = &l->shard;
    assert(s->count >= 1);
    for (uint32_t j = 0; j < s->count; j++) {
        dlc__sample_io *si = &s->io[j];
        si->pos = dlc__shard_pos(sh, s->batch * sh->batch + j);
        si->index = dlc__sampler_at(&l->sampler, si->pos);
        si->span = NULL;
        si->span_len = 0;
        si->status = rc;
    }
    s->io_err_at = 0;
    s->lookup_by_workers = 0;
    if (msg != s->io_msg)
        snprintf(s->io_msg, sizeof s->io_msg, "%s", msg);
}

/* Every sample of slot @p s fails with DLC_ECHANGED: file @p file of the store shrank under the
 * loader. */
static void fail_shrunk(dlc_loader *l, dlc__slot *s, uint32_t file, uint64_t now)
{
    fail_batch(l, s, DLC_ECHANGED, "");
    dlc__shrunk_msg(l, file, now, s->io[0].index, s->io_msg, sizeof s->io_msg);
}

/* A set of many files: list the files the records of slot @p s are in, from their numbers
 * alone (the map is not touched before the files are checked). */
static void list_files(dlc_loader *l, dlc__slot *s)
{
    const dlc__shard *sh = &l->shard;
    s->nfiles = 0;
    if (!dlc__io_lists(l))
        return;
    const uint64_t stamp = ++l->resolves;
    for (uint32_t j = 0; j < s->count; j++) {
        /* Kept for the lookups after the shrink check, which then need not place them again. */
        dlc__sample_io *si = &s->io[j];
        si->pos = dlc__shard_pos(sh, s->batch * sh->batch + j);
        si->index = dlc__sampler_at(&l->sampler, si->pos);
        const uint32_t f = dlc_store_record_file(l->store, si->index);
        if (f < l->nfiles && l->stamps[f] != stamp) {
            assert(s->nfiles <= j); /* A file is listed once: the list fits the batch. */
            l->stamps[f] = stamp;
            s->files[s->nfiles++] = f;
        }
    }
}

/* Look the records of slot @p s up and start their I/O. Runs on the I/O thread without mu.
 * Returns 1 when the batch failed because a shard it reads could not be had (streaming). */
static int resolve(dlc_loader *l, dlc__slot *s, uint32_t slot_index)
{
    const dlc__shard *sh = &l->shard;
    const uint32_t nf = l->info->num_fields;
    s->io_err_at = UINT32_MAX;
    /* Variable outputs start empty: a sample that fails leaves nothing for the packing. */
    for (uint32_t i = 0; i < l->nout; i++)
        if (s->out[i].lengths)
            memset(s->out[i].lengths, 0, (size_t)s->count * sizeof *s->out[i].lengths);
    /* A store truncated in place under the loader would kill the process with SIGBUS at the
     * first touch of a page past its new end, here in the lookup or later in a worker. The
     * library installs no signal handler (it would be the whole process's), so it checks the
     * size of each file (a set's: of each file the batch reads, dlc__store_shrunk()), once per
     * batch, before it looks up any record of the batch: the batch then fails with
     * DLC_ECHANGED naming the store, the shard and its first record. */
    list_files(l, s);
    /* Streaming: every shard the batch reads is on disk and attached before any lookup. */
    int refused = 0;
    if (l->stream) {
        const uint64_t t0 = dlc__now_ns();
        const dlc_status prc = dlc__stream_pin(l, s, &refused);
        const uint64_t t1 = dlc__now_ns();
        dlc__cnt_add(&l->io_stall, t1 - t0);
        if (l->trace)
            dlc__trace_span(l, DLC__TRACK_IO, DLC__SPAN_DOWNLOAD, s->epoch,
                            l->batch_base + s->batch, t0, t1);
        if (prc != DLC_OK) {
            fail_batch(l, s, prc, dlc_errmsg());
            return 1;
        }
    }
    uint64_t now;
    uint32_t file;
    if (dlc__store_shrunk(l, s, &file, &now)) {
        fail_shrunk(l, s, file, now);
        return 0;
    }
    /* A store all in the page cache needs no readahead, so the lookups (one random load of a
     * record header each: at millions of small records a second, more than one thread's work)
     * go to the workers, each finding the records it builds. */
    s->lookup_by_workers = l->io_mode == DLC_IO_MMAP && l->resident && !refused;
    if (s->lookup_by_workers)
        return 0;
    uint64_t bytes = 0;
    const int lists = dlc__io_lists(l);
    for (uint32_t j = 0; j < s->count; j++) {
        dlc__sample_io *si = &s->io[j];
        if (!lists) { /* Else list_files() placed them. */
            si->pos = dlc__shard_pos(sh, s->batch * sh->batch + j);
            si->index = dlc__sampler_at(&l->sampler, si->pos);
        }
        si->v = s->values + (size_t)j * nf;
        si->span = NULL;
        /* A batch that reads a shard the streaming cache refused: only that shard's records fail
         * (and are replaced, on_corrupt = replace); the others are read. */
        si->status = refused ? dlc__stream_record_ok(l, si->index) : DLC_OK;
        if (si->status == DLC_OK)
            si->status =
                l->io_mode == DLC_IO_DIRECT && l->hdr_bytes
                    ? dlc_store_read_values_pread(l->store, si->index, si->v,
                                                  s->hdr + (size_t)j * l->hdr_bytes, l->hdr_bytes)
                    : dlc_store_read_values(l->io_reader, si->index, si->v);
        if (si->status != DLC_OK) {
            si->span_off = si->span_len = 0;
            if (s->io_err_at == UINT32_MAX) {
                s->io_err_at = j;
                snprintf(s->io_msg, sizeof s->io_msg, "%s", dlc_errmsg());
            }
            continue;
        }
        dlc__selected_span(l, si->v, &si->span_off, &si->span_len);
        bytes += si->span_len;
    }
    if (l->io_mode == DLC_IO_DIRECT) {
        read_direct(l, s, slot_index);
    } else {
        atomic_fetch_add_explicit(&l->st_bytes, bytes, memory_order_relaxed);
        if (!l->resident)
            readahead_mmap(l, s);
    }
    return 0;
}

/* A download gave up for the batch before fill_next (mu held): nothing more until the caller has
 * taken that failure. A reset moves fill_next and cons_next together, which ends it. */
static int held_for_failure(const dlc_loader *l)
{
    return l->io_hold && l->fill_next == l->io_hold && l->cons_next < l->io_hold;
}

void *dlc__io_main(void *arg)
{
    dlc_loader *l = arg;
    /* A reader belongs to the thread that opens it. */
    const dlc_status orc = dlc_store_reader_open(l->store, &l->io_reader);
    pthread_mutex_lock(&l->mu);
    l->ready_workers++;
    if (orc != DLC_OK && l->start_rc == DLC_OK) {
        l->start_rc = orc;
        snprintf(l->start_msg, sizeof l->start_msg, "%s", dlc_errmsg());
    }
    pthread_cond_broadcast(&l->cv_done);
    for (;;) {
        /* Streaming: give back the shards no batch reads any more, whenever a slot moves. */
        while (dlc__stream_unpin_locked(l),
               !l->stop &&
                   (l->paused || l->fill_next >= l->shard.batches ||
                    l->slots[dlc__slot_of(l, l->fill_next)].state != DLC__SLOT_FREE ||
                    /* A worker may still be about to find the slot's claims exhausted; reusing the
                     * slot before it leaves would hand it a fresh claim of the next batch. */
                    l->slots[dlc__slot_of(l, l->fill_next)].active || held_for_failure(l))) {
            /* What the wait is charged to: nothing to do; the consumer, which holds that slot
             * beside the batch it uses (max_lent > 1: its holding shortens the ring); or a ring
             * full of batches ahead of the consumer or still in work. */
            dlc__cnt *why = &l->io_full;
            if (l->paused || l->fill_next >= l->shard.batches || held_for_failure(l))
                why = &l->io_idle;
            else if (l->slots[dlc__slot_of(l, l->fill_next)].state == DLC__SLOT_LENT &&
                     l->nlent > 1)
                why = &l->io_held;
            const uint64_t t0 = dlc__now_ns();
            pthread_cond_wait(&l->cv_io, &l->mu);
            dlc__cnt_add(why, dlc__now_ns() - t0);
        }
        if (l->stop)
            break;
        l->io_hold = 0; /* Taken, or ended by a reset. */
        const uint64_t b = l->fill_next++;
        const uint32_t si = dlc__slot_of(l, b);
        dlc__slot *s = &l->slots[si];
        /* Batches are taken in order, never behind the consumer, into a slot nobody holds. */
        assert(b < l->shard.batches && l->cons_next <= b);
        assert(s->state == DLC__SLOT_FREE && s->active == 0);
        s->state = DLC__SLOT_IO; /* FREE -> IO */
        s->batch = b;
        const uint64_t first = b * l->shard.batch;
        assert(first < l->shard.per_rank && l->shard.batch <= l->cfg.batch_size);
        const uint64_t left = l->shard.per_rank - first;
        s->count = (uint32_t)(left < l->shard.batch ? left : l->shard.batch);
        s->seed = l->sampler.seed;
        s->epoch = l->sampler.epoch;
        s->err = DLC_OK;
        s->err_at = UINT32_MAX;
        s->errmsg[0] = '\0';
        atomic_store(&s->claim, 0);
        atomic_store(&s->done, 0);
        pthread_mutex_unlock(&l->mu);

        const uint64_t t0 = dlc__now_ns();
        const int pin_failed = resolve(l, s, si);
        const uint64_t t1 = dlc__now_ns();
        dlc__cnt_add(&l->io_busy, t1 - t0);
        if (l->trace)
            dlc__trace_span(l, DLC__TRACK_IO, DLC__SPAN_IO, s->epoch, l->batch_base + b, t0, t1);

        pthread_mutex_lock(&l->mu);
        /* A reset waits while a slot is in IO: nothing else moved this one. */
        assert(s->state == DLC__SLOT_IO && s->batch == b);
        s->state = DLC__SLOT_FILL; /* IO -> FILL */
        if (pin_failed)
            l->io_hold = b + 1;
        pthread_cond_broadcast(&l->cv_work);
        pthread_cond_broadcast(&l->cv_done);
    }
    pthread_mutex_unlock(&l->mu);
    dlc_store_reader_close(l->io_reader);
    l->io_reader = NULL;
    return NULL;
}
