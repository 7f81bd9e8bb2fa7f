/* devsim: a CPU stand-in of the device behind the loader's table of device operations
 * (loader/device.h), so that the device path's ring, slots and events run under ThreadSanitizer
 * and AddressSanitizer on machines without a GPU.
 *
 * The model:
 *   - "Device memory" and "pinned host memory" are malloc'd blocks that the sim tracks by address
 *     range. A copy_h2d whose source is not inside one pinned block, or whose destination is not
 *     inside one device block, is refused with DEVSIM_EPTR, as CUDA refuses a wrong pointer.
 *     Device blocks start filled with 0xCD, so a read of memory that nothing wrote shows.
 *   - A stream is a FIFO queue drained by a thread of its own, which sleeps a random 0..max delay
 *     before each operation (xorshift seeded by devsim_opts.seed). NULL is the sim's default
 *     stream, an ordinary stream with a thread of its own: unlike CUDA's legacy default stream it
 *     never synchronizes implicitly with the others, so code that relies on that shows hazards.
 *   - Events follow CUDA: each event_record enqueues a mark; event_query, event_sync and
 *     stream_wait refer to the most recent record at the time of the call; an event never
 *     recorded is complete.
 *   - Hazards: every operation records the device ranges it reads and writes and a global
 *     enqueue number. When an operation starts, any operation of another stream that was
 *     enqueued before it, has not finished, and writes what it reads or reads or writes what it
 *     writes, is a hazard: nothing ordered the two. A copy_h2d also hashes its host source when
 *     enqueued and again when it runs; a difference is a hazard (the slot was refilled before
 *     its copy's event). Hazards are counted and the first one is described in words.
 *   - Contexts: set_device or device_enter makes a device current for the calling thread; every
 *     other operation (but errstr and device_count) made from a thread with none is a "stray"
 *     call (CUDA would create a context on device 0 there) and is counted.
 *   - Faults: devsim_fault() makes the Nth next call of an operation fail, synchronously (it
 *     returns DEVSIM_EFAULT and does nothing), asynchronously (it returns 0, does nothing when it
 *     runs, and the next call of any operation returns DEVSIM_EASYNC once) or stickily (the same,
 *     but every later call returns DEVSIM_ESTICKY and queued work is dropped, as after a fault
 *     that kills a CUDA context).
 *     Frees and destroys always do their work, so a loader can still be closed without leaks;
 *     set_device and device_enter never report an earlier error, so that a close path still
 *     runs on its device (and a call without one still shows as stray).
 *
 * Thread safety: every operation and inspection call may be made from any thread. One mutex
 * guards the sim's state; copies and conversions run outside it, so that ThreadSanitizer sees
 * the real accesses and the happens-before edges that the sim's queues give. */
#ifndef DLC_TEST_DEVSIM_H
#define DLC_TEST_DEVSIM_H

#include "device.h"

#include <stddef.h>
#include <stdint.h>

/* The sim's error codes (none is 1, which event_query uses for "pending"). */
#define DEVSIM_EINVAL 9001  /**< A bad argument (size, shape, dtype, NULL). */
#define DEVSIM_EHANDLE 9002 /**< A stream or event that is not (or no longer) the sim's. */
#define DEVSIM_EPTR 9003    /**< Memory that is not a live device or pinned block of the sim. */
#define DEVSIM_EDEVICE 9004 /**< A device ordinal beyond devsim_opts.devices. */
#define DEVSIM_ENOMEM 9005  /**< malloc failed. */
#define DEVSIM_EFAULT 9006  /**< An injected synchronous failure. */
#define DEVSIM_EASYNC 9007  /**< An injected asynchronous failure of an earlier operation. */
#define DEVSIM_ESTICKY 9008 /**< An injected sticky failure: the "context" is dead. */

/** The operations that are counted and can be made to fail. */
typedef enum devsim_op {
    DEVSIM_OP_DEVICE_COUNT,
    DEVSIM_OP_SET_DEVICE,
    DEVSIM_OP_DEVICE_ENTER,
    DEVSIM_OP_DEVICE_LEAVE,
    DEVSIM_OP_HOST_ALLOC,
    DEVSIM_OP_HOST_FREE,
    DEVSIM_OP_DEV_ALLOC,
    DEVSIM_OP_DEV_FREE,
    DEVSIM_OP_STREAM_CREATE,
    DEVSIM_OP_STREAM_DESTROY,
    DEVSIM_OP_STREAM_SYNC,
    DEVSIM_OP_EVENT_CREATE,
    DEVSIM_OP_EVENT_DESTROY,
    DEVSIM_OP_EVENT_RECORD,
    DEVSIM_OP_STREAM_WAIT,
    DEVSIM_OP_EVENT_QUERY,
    DEVSIM_OP_EVENT_SYNC,
    DEVSIM_OP_COPY_H2D,
    DEVSIM_OP_COPY_D2D,
    DEVSIM_OP_CONVERT,
    DEVSIM_OP_BENCH_H2D,
    DEVSIM_OP_MIX,
    DEVSIM_OP_ERASE,
    DEVSIM_OP_COUNT
} devsim_op;

/** How an injected fault surfaces. */
typedef enum devsim_fault_mode {
    DEVSIM_FAULT_SYNC = 0,   /**< The call returns DEVSIM_EFAULT and does nothing. */
    DEVSIM_FAULT_ASYNC = 1,  /**< The call returns 0; when it runs it does nothing, and the next
                                  call of any operation (any thread) returns DEVSIM_EASYNC. */
    DEVSIM_FAULT_STICKY = 2, /**< As ASYNC, but every call after returns DEVSIM_ESTICKY. */
} devsim_fault_mode;

typedef struct devsim_opts {
    int devices;            /**< What device_count says (default 1; 0: "no device"). */
    uint64_t seed;          /**< Of the streams' random delays (default 1). */
    uint32_t max_delay_us;  /**< Each stream sleeps 0..this before each operation (default 200;
                                 0: no delay). devsim_stream_delay() changes one stream's. */
    uint32_t min_delay_us;  /**< ... and at least this (default 0; at most max_delay_us): a slow
                                 device, so that what a missing wait lets happen does happen. */
    uint32_t call_delay_us; /**< Each enqueueing call sleeps 0..this on the caller's thread
                                 before it enqueues (default 0), to shake the host's timing. */
} devsim_opts;

/** Counters since devsim_create(). The live_* counts are the resources not freed yet: after the
 *  code under test has closed, they are its leaks. */
typedef struct devsim_stats {
    uint64_t calls[DEVSIM_OP_COUNT]; /**< Calls of each operation. */
    uint64_t hazards;                /**< Unordered conflicting operations, changed sources. */
    uint64_t stray_calls;            /**< Calls from a thread with no current device of this sim. */
    uint64_t wrong_device; /**< Enqueues on a stream of another device than the current one. */
    uint64_t errors;       /**< Non-zero codes returned (event_query's 1 aside). */
    uint64_t faults_fired; /**< Injected faults that fired. */
    uint64_t executed;     /**< Stream operations executed. */
    int64_t enter_depth;   /**< device_enter calls minus device_leave calls. */
    uint64_t busy_frees;   /**< Frees that had to wait for unfinished operations on the block
                                (legal in CUDA, whose cudaFree synchronizes, but a sign that the
                                caller did not wait itself). */
    uint64_t bad_frees;    /**< Frees and destroys of something that is not live. */
    uint64_t live_dev_blocks, live_host_blocks, live_streams, live_events;
} devsim_stats;

typedef struct devsim devsim;

/** Fill @p o with the defaults. */
void devsim_opts_init(devsim_opts *o);

/** @brief A new sim with @p o (NULL: the defaults) and its default stream's thread running.
 *  @return NULL when out of memory or threads. */
devsim *devsim_create(const devsim_opts *o);

/** The operation table (ctx = @p s, name "cpu-sim"); valid until devsim_destroy(). */
const dlc__devops *devsim_ops(devsim *s);

/** @brief Drain every queue, join the threads and free everything still allocated.
 *  @param[out] final NULL, or the counters at the end, whose live_* counts are the leaks (the
 *              default stream is not counted). Accepts a NULL @p s. */
void devsim_destroy(devsim *s, devsim_stats *final);

/** Counters now. */
void devsim_get_stats(devsim *s, devsim_stats *st);

/** The first hazard in words ("" when none); valid until devsim_destroy(). */
const char *devsim_first_hazard(devsim *s);

/** A summary of what went wrong, or "" when nothing did: hazards, stray or wrong-device calls,
 *  unbalanced device_enter, live resources. Written into @p buf (@p cap bytes), returned. */
const char *devsim_problems(devsim *s, char *buf, size_t cap);

/** Make the @p nth next call (1: the very next) of @p op fail in @p mode; one pending fault per
 *  operation (a new one replaces it). @p nth 0 cancels. */
void devsim_fault(devsim *s, devsim_op op, uint64_t nth, devsim_fault_mode mode);

/** Clear a pending asynchronous or sticky error. */
void devsim_clear_error(devsim *s);

/** The last fault that fired, in words ("" when none); valid until devsim_destroy(). */
const char *devsim_last_fault(devsim *s);

/** Set @p stream's (NULL: the default stream's) random delay bound to @p max_us. */
void devsim_stream_delay(devsim *s, void *stream, uint32_t max_us);

/** Hold (@p paused != 0) or let run @p stream's queue; a held stream starts nothing. */
void devsim_stream_pause(devsim *s, void *stream, int paused);

/** Is @p p inside a live device block? A pinned host block? */
int devsim_is_device(devsim *s, const void *p, size_t bytes);
int devsim_is_pinned(devsim *s, const void *p, size_t bytes);

/** The device current on the calling thread for this sim, or -1. */
int devsim_current_device(devsim *s);

/** The name of @p op ("copy_h2d"). */
const char *devsim_op_name(devsim_op op);

#endif /* DLC_TEST_DEVSIM_H */
