"""ctypes view of libdlcache: finding the library, struct layouts, prototypes.

The structures below mirror include/dlcache/*.h field by field; ctypes applies
the platform's C alignment rules, so the offsets match the compiler's as long
as the field types match. tests/python/test_layout.py compiles a small C
program that prints sizeof/offsetof of every mirrored struct and compares them
with these classes, so a header change that is not followed here fails a test
instead of corrupting memory.

Every function is called through a ctypes.CDLL handle, which releases the GIL
for the duration of each call: a training thread blocked in dlc_loader_next()
or dlc_build() leaves the interpreter to the other Python threads.
"""

import ctypes
import ctypes.util
import os

__all__ = ["lib", "lib_path", "find_library"]

c_status = ctypes.c_int
c_u8p = ctypes.POINTER(ctypes.c_uint8)

# status.h: void (*dlc_log_fn)(void *user, dlc_log_level level, const char *msg)
LOG_FN = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int, ctypes.c_char_p)


# ---------------------------------------------------------------- store.h
class StoreInfo(ctypes.Structure):
    _fields_ = [
        ("format_version", ctypes.c_uint32),
        ("encoding", ctypes.c_uint32),
        ("count", ctypes.c_uint64),
        ("height", ctypes.c_uint32),
        ("width", ctypes.c_uint32),
        ("channels", ctypes.c_uint32),
        ("num_labels", ctypes.c_uint32),
        ("skipped", ctypes.c_uint64),
        ("payload_bytes", ctypes.c_uint64),
        ("content_digest", ctypes.c_uint64),
        ("file_bytes", ctypes.c_uint64),
        ("num_fields", ctypes.c_uint32),
        ("image_field", ctypes.c_uint32),
        ("label_field", ctypes.c_uint32),
    ]


MAX_FIELDS = 64
MAX_DIMS = 6
NO_FIELD = 0xFFFFFFFF


class Field(ctypes.Structure):
    """dlc_field: one field of a store's schema."""
    _fields_ = [
        ("name", ctypes.c_char * 32),
        ("kind", ctypes.c_uint32),
        ("dtype", ctypes.c_uint32),
        ("encoding", ctypes.c_uint32),
        ("flags", ctypes.c_uint32),
        ("ndim", ctypes.c_uint32),
        ("shape", ctypes.c_uint32 * MAX_DIMS),
        ("max_dim0", ctypes.c_uint32),
        ("max_dim1", ctypes.c_uint32),
        ("max_size", ctypes.c_uint64),
        ("link", ctypes.c_uint32),
        ("min_dim0", ctypes.c_uint32),
        ("min_dim1", ctypes.c_uint32),
        ("min_record0", ctypes.c_uint64),
        ("min_record1", ctypes.c_uint64),
    ]


class Value(ctypes.Structure):
    """dlc_value: one field of one record, a view into the map."""
    _fields_ = [
        ("data", ctypes.c_void_p),
        ("size", ctypes.c_size_t),
        ("offset", ctypes.c_uint64),
        ("dim0", ctypes.c_uint32),
        ("dim1", ctypes.c_uint32),
        ("xxh3", ctypes.c_uint64),
        ("i", ctypes.c_int64),
        ("f", ctypes.c_double),
        ("file", ctypes.c_uint32),
    ]


class Record(ctypes.Structure):
    _fields_ = [
        ("data", ctypes.c_void_p),
        ("size", ctypes.c_size_t),
        ("offset", ctypes.c_uint64),
        ("index", ctypes.c_uint64),
        ("label", ctypes.c_int64),
        ("height", ctypes.c_uint32),
        ("width", ctypes.c_uint32),
        ("channels", ctypes.c_uint32),
        ("encoding", ctypes.c_uint32),
        ("xxh3", ctypes.c_uint64),
    ]


class VerifyProgress(ctypes.Structure):
    _fields_ = [
        ("done", ctypes.c_uint64),
        ("total", ctypes.c_uint64),
        ("bytes_done", ctypes.c_uint64),
        ("bad", ctypes.c_uint64),
        ("bad_index", ctypes.c_uint64),
        ("bad_status", c_status),
        ("bad_msg", ctypes.c_char_p),
    ]


VERIFY_FN = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.POINTER(VerifyProgress))


# ---------------------------------------------------------------- image.h
class Image(ctypes.Structure):
    """dlc_image: interleaved uint8 pixels."""
    _fields_ = [
        ("data", ctypes.c_void_p),
        ("width", ctypes.c_uint32),
        ("height", ctypes.c_uint32),
        ("channels", ctypes.c_uint32),
        ("stride", ctypes.c_size_t),
    ]


# ---------------------------------------------------------------- ops.h
class OpParams(ctypes.Structure):
    """dlc_op_params: one op of include/dlcache/ops.h and its parameters."""
    _fields_ = [
        ("struct_size", ctypes.c_uint32),
        ("op", ctypes.c_uint32),
        ("factor", ctypes.c_double),
        ("bits", ctypes.c_uint32),
        ("num_output_channels", ctypes.c_uint32),
        ("threshold", ctypes.c_double),
        ("kernel_size", ctypes.c_uint32 * 2),
        ("sigma", ctypes.c_double * 2),
        ("angle", ctypes.c_double),
        ("translate", ctypes.c_double * 2),
        ("scale", ctypes.c_double),
        ("shear", ctypes.c_double * 2),
        ("has_center", ctypes.c_uint32),
        ("center", ctypes.c_double * 2),
        ("fill", ctypes.c_uint8 * 4),
        ("interpolation", ctypes.c_uint32),
        ("has_fill", ctypes.c_uint32),
        ("addition", ctypes.c_double),
    ]


# ---------------------------------------------------------------- writer.h
class FieldSpec(ctypes.Structure):
    """dlc_field_spec: one field of the schema to write."""
    _fields_ = [
        ("name", ctypes.c_char_p),
        ("kind", ctypes.c_uint32),
        ("dtype", ctypes.c_uint32),
        ("encoding", ctypes.c_uint32),
        ("flags", ctypes.c_uint32),
        ("ndim", ctypes.c_uint32),
        ("shape", ctypes.c_uint32 * MAX_DIMS),
        ("link", ctypes.c_char_p),
        ("quality", ctypes.c_int),
    ]


# Options structs open with struct_size (status.h, "How structs grow"): always fill one with its
# _init() (which sets struct_size to the library's sizeof, which test_layout.py checks is this
# mirror's) before setting fields.
class WriterConfig(ctypes.Structure):
    """dlc_writer_config."""
    _fields_ = [
        ("struct_size", ctypes.c_uint32),
        ("fields", ctypes.POINTER(FieldSpec)),
        ("num_fields", ctypes.c_uint32),
        ("label_names", ctypes.POINTER(ctypes.c_char_p)),
        ("num_labels", ctypes.c_uint32),
        ("force", ctypes.c_int),
        ("size_hint", ctypes.c_uint64),
        ("build_json", ctypes.c_char_p),
        ("source_digest", ctypes.c_uint64),
    ]


# ---------------------------------------------------------------- build.h
class BuildProgress(ctypes.Structure):
    _fields_ = [
        ("done", ctypes.c_uint64),
        ("total", ctypes.c_uint64),
        ("skipped", ctypes.c_uint64),
        ("bytes_in", ctypes.c_uint64),
        ("bytes_out", ctypes.c_uint64),
        ("seconds", ctypes.c_double),
    ]


BUILD_PROGRESS_FN = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.POINTER(BuildProgress))


class BuildOptions(ctypes.Structure):
    _fields_ = [
        ("struct_size", ctypes.c_uint32),
        ("size", ctypes.c_uint32),
        ("center_crop", ctypes.c_int),
        ("encoding", ctypes.c_uint32),
        ("quality", ctypes.c_int),
        ("threads", ctypes.c_uint32),
        ("strict", ctypes.c_int),
        ("force", ctypes.c_int),
        ("command", ctypes.c_char_p),
        ("progress", BUILD_PROGRESS_FN),
        ("progress_user", ctypes.c_void_p),
        ("log", LOG_FN),
        ("log_user", ctypes.c_void_p),
        # What each record holds besides what the sources give.
        ("channels", ctypes.c_uint32),
        ("masks", ctypes.c_char_p),
        ("mask_encoding", ctypes.c_int),
        # A store set: parts > 0.
        ("parts", ctypes.c_uint32),
        ("one_part", ctypes.c_int),
        ("part", ctypes.c_uint32),
    ]


class BuildSkip(ctypes.Structure):
    _fields_ = [("path", ctypes.c_char_p), ("reason", ctypes.c_char_p)]


class BuildPart(ctypes.Structure):
    """dlc_build_part: one part of a store set that dlc_build() wrote."""
    _fields_ = [
        ("part", ctypes.c_uint32),
        ("first_item", ctypes.c_uint64),
        ("end_item", ctypes.c_uint64),
        ("count", ctypes.c_uint64),
        ("skipped", ctypes.c_uint64),
        ("file_bytes", ctypes.c_uint64),
    ]


class BuildReport(ctypes.Structure):
    _fields_ = [
        ("count", ctypes.c_uint64),
        ("skipped", ctypes.c_uint64),
        ("bytes_in", ctypes.c_uint64),
        ("bytes_out", ctypes.c_uint64),
        ("file_bytes", ctypes.c_uint64),
        ("seconds", ctypes.c_double),
        ("images_per_s", ctypes.c_double),
        ("threads", ctypes.c_uint32),
        ("content_digest", ctypes.c_uint64),
        ("skips", ctypes.POINTER(BuildSkip)),
        ("channels", ctypes.c_uint32),
        ("converted", ctypes.c_uint64),
        # A store set (BuildOptions.parts > 0) only.
        ("parts", ctypes.c_uint32),
        ("set_id", ctypes.c_uint64),
        ("items", ctypes.c_uint64),
        ("num_built", ctypes.c_uint32),
        ("built", ctypes.POINTER(BuildPart)),
    ]


class SetJoinReport(ctypes.Structure):
    """dlc_set_join_report (set.h): what dlc_set_join() found and wrote."""
    _fields_ = [
        ("num_shards", ctypes.c_uint32),
        ("count", ctypes.c_uint64),
        ("file_bytes", ctypes.c_uint64),
        ("set_id", ctypes.c_uint64),
        ("temp_files", ctypes.c_uint32),
        ("unchanged", ctypes.c_int),
        ("reserved", ctypes.c_uint64 * 8),
    ]


# ---------------------------------------------------------------- warm.h
class WarmProgress(ctypes.Structure):
    """dlc_warm_progress."""
    _fields_ = [
        ("total", ctypes.c_uint64),
        ("done", ctypes.c_uint64),
        ("downloaded", ctypes.c_uint64),
        ("seconds", ctypes.c_double),
        ("verifying", ctypes.c_int),
    ]


WARM_PROGRESS_FN = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.POINTER(WarmProgress))


class WarmOptions(ctypes.Structure):
    """dlc_warm_options: the network part of a download (LoaderConfig.net for streaming)."""
    _fields_ = [
        ("struct_size", ctypes.c_uint32),
        ("connections", ctypes.c_uint32),
        ("chunk_size", ctypes.c_uint64),
        ("endpoint", ctypes.c_char_p),
        ("region", ctypes.c_char_p),
        ("flags", ctypes.c_uint32),
        ("max_retries", ctypes.c_uint32),
        ("timeout_s", ctypes.c_double),
        ("connect_timeout_s", ctypes.c_double),
        ("progress", WARM_PROGRESS_FN),
        ("progress_user", ctypes.c_void_p),
        ("log", LOG_FN),
        ("log_user", ctypes.c_void_p),
    ]


# ---------------------------------------------------------------- loader.h
class FieldOption(ctypes.Structure):
    """dlc_field_option: how one field of the store goes into a batch."""
    _fields_ = [
        ("name", ctypes.c_char_p),
        ("variable", ctypes.c_uint32),
        ("max_len", ctypes.c_uint32),
    ]


class ViewSpec(ctypes.Structure):
    """dlc_view_spec: a group of differently augmented views of every image."""
    _fields_ = [
        ("name", ctypes.c_char_p),
        ("count", ctypes.c_uint32),
        ("augment", ctypes.c_uint32),
        ("crop_h", ctypes.c_uint32),
        ("crop_w", ctypes.c_uint32),
        ("rrc_scale", ctypes.c_float * 2),
        ("rrc_ratio", ctypes.c_float * 2),
        ("flip_prob", ctypes.c_float),
    ]


class AugmentSpec(ctypes.Structure):
    """dlc_augment_spec: the per-sample ops of one view group (issue 33)."""
    _fields_ = [
        ("struct_size", ctypes.c_uint32),
        ("jitter_prob", ctypes.c_float),
        ("brightness", ctypes.c_float * 2),
        ("contrast", ctypes.c_float * 2),
        ("saturation", ctypes.c_float * 2),
        ("hue", ctypes.c_float * 2),
        ("grayscale_prob", ctypes.c_float),
        ("blur_prob", ctypes.c_float),
        ("blur_sigma", ctypes.c_float * 2),
        ("blur_kernel", ctypes.c_uint32 * 2),
        ("solarize_prob", ctypes.c_float),
        ("solarize_threshold", ctypes.c_float),
        ("auto_augment", ctypes.c_uint32),
        ("num_ops", ctypes.c_uint32),
        ("magnitude", ctypes.c_float),
        ("num_magnitude_bins", ctypes.c_uint32),
        ("magnitude_std", ctypes.c_float),
        ("fill", ctypes.c_uint32 * 3),
        ("erase_prob", ctypes.c_float),
        ("erase_scale", ctypes.c_float * 2),
        ("erase_ratio", ctypes.c_float * 2),
        ("erase_value", ctypes.c_uint32),
        ("erase_constant", ctypes.c_float * 4),
        ("interpolation", ctypes.c_uint32),
        ("has_fill", ctypes.c_uint32),
        ("magnitude_max", ctypes.c_float),
        ("increasing", ctypes.c_uint32),
        ("op_prob", ctypes.c_float),
    ]


class LoaderConfig(ctypes.Structure):
    _fields_ = [
        ("struct_size", ctypes.c_uint32),
        ("batch_size", ctypes.c_uint32),
        ("drop_last", ctypes.c_int),
        ("sampler", ctypes.c_uint32),
        ("seed", ctypes.c_uint64),
        ("epoch", ctypes.c_uint64),
        ("rank", ctypes.c_uint32),
        ("world_size", ctypes.c_uint32),
        ("threads", ctypes.c_uint32),
        ("prefetch", ctypes.c_uint32),
        ("class_weights", ctypes.POINTER(ctypes.c_double)),
        ("num_class_weights", ctypes.c_uint32),
        ("num_samples", ctypes.c_uint64),
        ("quasi_group", ctypes.c_uint32),
        ("augment", ctypes.c_uint32),
        ("crop_h", ctypes.c_uint32),
        ("crop_w", ctypes.c_uint32),
        ("rrc_scale", ctypes.c_float * 2),
        ("rrc_ratio", ctypes.c_float * 2),
        ("flip_prob", ctypes.c_float),
        ("dtype", ctypes.c_uint32),
        ("mean", ctypes.c_float * 4),
        ("std", ctypes.c_float * 4),
        ("verify", ctypes.c_uint32),
        ("on_corrupt", ctypes.c_uint32),
        ("io", ctypes.c_uint32),
        ("device", ctypes.c_int32),
        ("fields", ctypes.POINTER(ctypes.c_char_p)),
        ("num_fields", ctypes.c_uint32),
        ("field_options", ctypes.POINTER(FieldOption)),
        ("num_field_options", ctypes.c_uint32),
        ("views", ctypes.POINTER(ViewSpec)),
        ("num_views", ctypes.c_uint32),
        ("log", LOG_FN),
        ("log_user", ctypes.c_void_p),
        ("device_layout", ctypes.c_uint32),
        ("device_staging", ctypes.c_uint32),
        ("max_lent", ctypes.c_uint32),
        # DLC_SAMPLER_SHARD_WINDOWS.
        ("window_shards", ctypes.c_uint32),
        ("streams", ctypes.c_uint32),
        # Streaming a store set from its URL.
        ("cache_dir", ctypes.c_char_p),
        ("cache_limit", ctypes.c_uint64),
        ("cache_ranks", ctypes.c_uint32),
        ("downloads", ctypes.c_uint32),
        ("net", ctypes.POINTER(WarmOptions)),
        ("trace", ctypes.c_char_p),
        ("trace_batches", ctypes.c_uint32),
        ("auto_threads", ctypes.c_uint32),
        # Per-sample ops of each view group, and the drawn parameters (issue 33).
        ("augment_specs", ctypes.POINTER(AugmentSpec)),
        ("num_augment_specs", ctypes.c_uint32),
        ("return_params", ctypes.c_uint32),
        # MixUp / CutMix, soft targets, progressive resizing (issue 33).
        ("mixup_alpha", ctypes.c_float),
        ("cutmix_alpha", ctypes.c_float),
        ("mix_prob", ctypes.c_float),
        ("switch_prob", ctypes.c_float),
        ("label_smoothing", ctypes.c_double),
        ("num_classes", ctypes.c_uint32),
        ("max_crop_h", ctypes.c_uint32),
        ("max_crop_w", ctypes.c_uint32),
        ("aug_repeats", ctypes.c_uint32),
    ]


class MixupParams(ctypes.Structure):
    """dlc_mixup_params: how a batch was mixed."""
    _fields_ = [
        ("struct_size", ctypes.c_uint32),
        ("mode", ctypes.c_uint32),
        ("lam", ctypes.c_double),
        ("box", ctypes.c_uint32 * 4),
    ]


class BatchField(ctypes.Structure):
    """dlc_batch_field: one output of a lent batch."""
    _fields_ = [
        ("name", ctypes.c_char_p),
        ("field", ctypes.c_uint32),
        ("kind", ctypes.c_uint32),
        ("data", ctypes.c_void_p),
        ("bytes", ctypes.c_size_t),
        ("dtype", ctypes.c_uint32),
        ("layout", ctypes.c_uint32),
        ("ndim", ctypes.c_uint32),
        ("shape", ctypes.c_uint64 * (MAX_DIMS + 2)),
        ("lengths", ctypes.c_void_p),
        ("offsets", ctypes.c_void_p),
    ]


class Batch(ctypes.Structure):
    _fields_ = [
        ("data", ctypes.c_void_p),
        ("labels", ctypes.c_void_p),
        ("indices", ctypes.c_void_p),
        ("count", ctypes.c_uint32),
        ("dtype", ctypes.c_uint32),
        ("layout", ctypes.c_uint32),
        ("shape", ctypes.c_uint32 * 4),
        ("bytes", ctypes.c_size_t),
        ("epoch", ctypes.c_uint64),
        ("batch_index", ctypes.c_uint64),
        ("num_fields", ctypes.c_uint32),
        ("fields", ctypes.POINTER(BatchField)),
    ]


class LoaderStats(ctypes.Structure):
    _fields_ = [
        ("batches", ctypes.c_uint64),
        ("samples", ctypes.c_uint64),
        ("wait_seconds", ctypes.c_double),
        ("io_wait_seconds", ctypes.c_double),
        ("corrupt_replaced", ctypes.c_uint64),
        ("bytes_read", ctypes.c_uint64),
        ("io_mode", ctypes.c_uint32),
        ("threads", ctypes.c_uint32),
        ("device", ctypes.c_int32),
        ("device_bytes", ctypes.c_uint64),
        ("device_copy_seconds", ctypes.c_double),
        ("reserved", ctypes.c_uint64 * 8),
    ]


# ---------------------------------------------------------------- loader.h: the device path
class DeviceField(ctypes.Structure):
    """dlc_device_field: one output of a device batch; shape in memory order."""
    _fields_ = [
        ("name", ctypes.c_char_p),
        ("field", ctypes.c_uint32),
        ("kind", ctypes.c_uint32),
        ("dtype", ctypes.c_uint32),
        ("layout", ctypes.c_uint32),
        ("ndim", ctypes.c_uint32),
        ("shape", ctypes.c_uint64 * (MAX_DIMS + 2)),
        ("bytes", ctypes.c_size_t),
        ("staged", ctypes.c_void_p),
        ("staged_bytes", ctypes.c_size_t),
        ("lengths", ctypes.c_void_p),
        ("offsets", ctypes.c_void_p),
        ("staged_lengths", ctypes.c_void_p),
        ("staged_offsets", ctypes.c_void_p),
    ]


class DeviceBatch(ctypes.Structure):
    """dlc_device_batch: a batch lent as staged on the device."""
    _fields_ = [
        ("count", ctypes.c_uint32),
        ("device", ctypes.c_int32),
        ("epoch", ctypes.c_uint64),
        ("batch_index", ctypes.c_uint64),
        ("labels", ctypes.c_void_p),
        ("indices", ctypes.c_void_p),
        ("staged_labels", ctypes.c_void_p),
        ("staged_indices", ctypes.c_void_p),
        ("ready_event", ctypes.c_void_p),
        ("num_fields", ctypes.c_uint32),
        ("fields", ctypes.POINTER(DeviceField)),
    ]


class LoaderStreamStats(ctypes.Structure):
    """dlc_loader_stream_stats: what streaming did since open; struct_size is set by the
    caller (the library fills that many bytes)."""
    _fields_ = [
        ("struct_size", ctypes.c_uint32),
        ("stall_seconds", ctypes.c_double),
        ("hits", ctypes.c_uint64),
        ("misses", ctypes.c_uint64),
        ("bytes_fetched", ctypes.c_uint64),
        ("requests", ctypes.c_uint64),
        ("peak_cache_bytes", ctypes.c_uint64),
        ("evictions", ctypes.c_uint64),
        ("downloads", ctypes.c_uint64),
    ]


class LoaderReport(ctypes.Structure):
    """dlc_loader_report: where the loader's and the consumer's time went, and the verdict;
    struct_size is set by the caller (the library fills that many bytes)."""
    _fields_ = [
        ("struct_size", ctypes.c_uint32),
        ("bound", ctypes.c_uint32),
        ("batches", ctypes.c_uint64),
        ("samples", ctypes.c_uint64),
        ("threads", ctypes.c_uint32),
        ("device", ctypes.c_int32),
        ("wall_seconds", ctypes.c_double),
        ("wait_seconds", ctypes.c_double),
        ("away_seconds", ctypes.c_double),
        ("input_share", ctypes.c_double),
        ("step_seconds", ctypes.c_double),
        ("io_busy_share", ctypes.c_double),
        ("io_read_share", ctypes.c_double),
        ("io_stall_share", ctypes.c_double),
        ("io_held_share", ctypes.c_double),
        ("io_full_share", ctypes.c_double),
        ("io_idle_share", ctypes.c_double),
        ("workers_busy_share", ctypes.c_double),
        ("workers_io_share", ctypes.c_double),
        ("workers_idle_share", ctypes.c_double),
        ("workers_cpu_share", ctypes.c_double),
        ("sample_seconds", ctypes.c_double),
        ("major_faults", ctypes.c_uint64),
        ("copy_busy_share", ctypes.c_double),
        ("copy_idle_share", ctypes.c_double),
        ("stall_seconds", ctypes.c_double),
        ("bytes_read", ctypes.c_uint64),
        ("reason", ctypes.c_char * 256),
        ("advice", ctypes.c_char * 256),
    ]


class LoaderPlanInfo(ctypes.Structure):
    """dlc_loader_plan_info: what a shard-window run would need and do; struct_size is set by
    the caller."""
    _fields_ = [
        ("struct_size", ctypes.c_uint32),
        ("shards", ctypes.c_uint32),
        ("streams", ctypes.c_uint32),
        ("nodes", ctypes.c_uint32),
        ("set_bytes", ctypes.c_uint64),
        ("largest_shard_bytes", ctypes.c_uint64),
        ("epoch_samples", ctypes.c_uint64),
        ("samples_per_rank", ctypes.c_uint64),
        ("batches_per_rank", ctypes.c_uint64),
        ("cache_needed_bytes", ctypes.c_uint64),
        ("egress_bytes", ctypes.c_uint64),
        ("batch_same_shard", ctypes.c_double),
        ("neighbour_same_shard", ctypes.c_double),
    ]


# ---- Mixtures (loader.h, "Mixtures") ----
class MixSource(ctypes.Structure):
    """dlc_mix_source: one source of a mixture (dlc_mix_source_init() sets the defaults)."""
    _fields_ = [
        ("struct_size", ctypes.c_uint32),
        ("path", ctypes.c_char_p),
        ("weight", ctypes.c_double),
        ("label_offset", ctypes.c_int64),
    ]


class MixOptions(ctypes.Structure):
    """dlc_mix_options: a mixture's options beside the loader's."""
    _fields_ = [
        ("struct_size", ctypes.c_uint32),
        ("samples_per_epoch", ctypes.c_uint64),
    ]


class MixSourceInfo(ctypes.Structure):
    """dlc_mix_source_info: a mixture's source as the loader has it; struct_size is set by the
    caller."""
    _fields_ = [
        ("struct_size", ctypes.c_uint32),
        ("quota", ctypes.c_uint32),
        ("period", ctypes.c_uint32),
        ("first", ctypes.c_uint64),
        ("count", ctypes.c_uint64),
        ("epoch_samples", ctypes.c_uint64),
        ("drawn", ctypes.c_uint64),
        ("content_digest", ctypes.c_uint64),
        ("label_offset", ctypes.c_int64),
        ("cache_needed_bytes", ctypes.c_uint64),
    ]


LOADER_MIX_STATE_MAX = 80 + 40 * 64 + 8


class DeviceDst(ctypes.Structure):
    """dlc_device_dst: where dlc_loader_device_emit() writes one output (device memory)."""
    _fields_ = [
        ("data", ctypes.c_void_p),
        ("lengths", ctypes.c_void_p),
        ("offsets", ctypes.c_void_p),
    ]


# Constants from the headers.
DLC_OK = 0
DLC_END = 1
DLC_AGAIN = 2  # dlc_loader_next_wait(): no batch within the wait
LOADER_STATE_SIZE = 64
MAX_PREFETCH = 1024  # DLC_LOADER_MAX_PREFETCH
ENCODING_RAW, ENCODING_JPEG, ENCODING_PNG = 0, 1, 2
STORE_RANDOM, STORE_SEQUENTIAL = 0, 1
SAMPLER_SEQUENTIAL, SAMPLER_SHUFFLE, SAMPLER_SHARD_WINDOWS = 0, 1, 4
AUGMENT_CENTER_CROP, AUGMENT_RANDOM_CROP, AUGMENT_RANDOM_RESIZED_CROP = 0, 1, 2
AUTO_AUGMENT_NONE, AUTO_AUGMENT_TRIVIAL_WIDE, AUTO_AUGMENT_RAND, AUTO_AUGMENT_IMAGENET = 0, 1, 2, 3
AUTO_AUGMENT_TIMM_RAND = 4
ERASE_ZERO, ERASE_NOISE, ERASE_CONSTANT = 0, 1, 2
AUGMENT_MAX_OPS = 16  # DLC_AUGMENT_MAX_OPS
DTYPE_UINT8, DTYPE_FLOAT32, DTYPE_FLOAT16 = 0, 1, 2
DTYPE_INT8, DTYPE_UINT16, DTYPE_INT16, DTYPE_INT32, DTYPE_INT64, DTYPE_FLOAT64 = 3, 4, 5, 6, 7, 8
# numpy's names of the dlc_dtype values (dlc_dtype_name()).
DTYPE_NAMES = ("uint8", "float32", "float16", "int8", "uint16", "int16", "int32", "int64",
               "float64")
# After them: bfloat16, a loader output only (numpy has no bfloat16, stores cannot hold it).
DTYPE_BFLOAT16 = 9
FIELD_IMAGE, FIELD_NDARRAY, FIELD_INT, FIELD_FLOAT, FIELD_BYTES = 1, 2, 3, 4, 5
FIELD_VARIABLE, FIELD_MASK, FIELD_BOXES, FIELD_LABEL = 1, 2, 4, 8
LAYOUT_NHWC, LAYOUT_NCHW, LAYOUT_NONE = 0, 1, 2
VARIABLE_PAD, VARIABLE_PAD_TO, VARIABLE_OFFSETS = 0, 1, 2
VERIFY_OFF, VERIFY_FIRST, VERIFY_ALWAYS = 0, 1, 2
CORRUPT_FAIL, CORRUPT_REPLACE = 0, 1
IO_AUTO, IO_MMAP, IO_DIRECT = 0, 1, 2
BOUND_UNKNOWN, BOUND_MODEL, BOUND_CPU, BOUND_STORAGE = 0, 1, 2, 3
BOUND_NETWORK, BOUND_COPY, BOUND_CONSUMER = 4, 5, 6
BOUND_BATCH = 7

# name: (restype, argtypes). Declared once so that ctypes converts and checks
# every argument; a missing symbol (a part not built) is reported when the
# function is first used, not at import.
_P = ctypes.c_void_p
_PROTOTYPES = {
    "dlc_strerror": (ctypes.c_char_p, [c_status]),
    "dlc_errmsg": (ctypes.c_char_p, []),
    "dlc_version": (ctypes.c_char_p, []),
    "dlc_version_number": (ctypes.c_uint32, []),
    # store.h
    "dlc_store_open": (c_status, [ctypes.c_char_p, ctypes.c_uint32, ctypes.POINTER(_P)]),
    "dlc_store_close": (None, [_P]),
    "dlc_store_get_info": (ctypes.POINTER(StoreInfo), [_P]),
    "dlc_store_path": (ctypes.c_char_p, [_P]),
    "dlc_store_label_name": (ctypes.c_char_p, [_P, ctypes.c_uint32]),
    "dlc_store_label_counts": (ctypes.POINTER(ctypes.c_uint64), [_P]),
    "dlc_store_meta": (c_status, [_P, ctypes.c_char_p, ctypes.POINTER(_P),
                                  ctypes.POINTER(ctypes.c_size_t)]),
    "dlc_store_resident": (c_status, [_P, ctypes.POINTER(ctypes.c_uint64)]),
    "dlc_store_reader_open": (c_status, [_P, ctypes.POINTER(_P)]),
    "dlc_store_reader_close": (None, [_P]),
    "dlc_store_read": (c_status, [_P, ctypes.c_uint64, ctypes.POINTER(Record)]),
    "dlc_record_verify": (c_status, [_P, ctypes.POINTER(Record)]),
    "dlc_store_verify": (c_status, [_P, VERIFY_FN, _P, ctypes.POINTER(ctypes.c_uint64)]),
    "dlc_store_fields": (ctypes.POINTER(Field), [_P]),
    "dlc_store_find_field": (ctypes.c_int, [_P, ctypes.c_char_p]),
    "dlc_store_read_values": (c_status, [_P, ctypes.c_uint64, ctypes.POINTER(Value)]),
    "dlc_value_verify": (c_status, [_P, ctypes.c_uint64, ctypes.c_uint32,
                                    ctypes.POINTER(Value)]),
    "dlc_dtype_size": (ctypes.c_size_t, [ctypes.c_uint32]),
    "dlc_dtype_name": (ctypes.c_char_p, [ctypes.c_uint32]),
    # image.h
    "dlc_codec_create": (c_status, [ctypes.POINTER(_P)]),
    "dlc_codec_destroy": (None, [_P]),
    "dlc_jpeg_header": (c_status, [_P, _P, ctypes.c_size_t, ctypes.POINTER(ctypes.c_uint32),
                                   ctypes.POINTER(ctypes.c_uint32),
                                   ctypes.POINTER(ctypes.c_uint32)]),
    "dlc_jpeg_decode_as": (c_status, [_P, _P, ctypes.c_size_t, ctypes.c_uint32, ctypes.c_uint32,
                                      ctypes.c_uint32, ctypes.POINTER(Image)]),
    "dlc_png_info": (c_status, [_P, _P, ctypes.c_size_t, ctypes.POINTER(ctypes.c_uint32),
                                ctypes.POINTER(ctypes.c_uint32), ctypes.POINTER(ctypes.c_uint32)]),
    "dlc_png_decode": (c_status, [_P, _P, ctypes.c_size_t, ctypes.POINTER(Image)]),
    "dlc_op_params_init_sized": (None, [ctypes.POINTER(OpParams), ctypes.c_size_t]),
    "dlc_op_scratch_bound": (ctypes.c_size_t, [ctypes.c_uint32, ctypes.c_uint32, ctypes.c_uint32]),
    "dlc_op_apply": (c_status, [ctypes.POINTER(OpParams), ctypes.POINTER(Image),
                                ctypes.POINTER(Image), _P, ctypes.c_size_t]),
    "dlc_op_name": (ctypes.c_char_p, [ctypes.c_uint32]),
    # writer.h
    "dlc_writer_config_init_sized": (None, [ctypes.POINTER(WriterConfig), ctypes.c_size_t]),
    "dlc_writer_open": (c_status, [ctypes.c_char_p, ctypes.POINTER(WriterConfig),
                                   ctypes.POINTER(_P)]),
    "dlc_writer_find_field": (ctypes.c_int, [_P, ctypes.c_char_p]),
    "dlc_writer_count": (ctypes.c_uint64, [_P]),
    "dlc_writer_add_skipped": (None, [_P, ctypes.c_uint64]),
    "dlc_writer_append": (c_status, [_P, _P]),
    "dlc_writer_finish": (c_status, [_P]),
    "dlc_writer_abort": (None, [_P]),
    "dlc_record_builder_create": (c_status, [_P, ctypes.POINTER(_P)]),
    "dlc_record_builder_destroy": (None, [_P]),
    "dlc_record_builder_reset": (None, [_P]),
    "dlc_record_set_image": (c_status, [_P, ctypes.c_uint32, ctypes.POINTER(Image)]),
    "dlc_record_set_encoded": (c_status, [_P, ctypes.c_uint32, _P, ctypes.c_size_t,
                                          ctypes.c_uint32, ctypes.c_uint32]),
    "dlc_record_set_array": (c_status, [_P, ctypes.c_uint32, _P, ctypes.c_size_t,
                                        ctypes.c_uint32]),
    "dlc_record_set_int": (c_status, [_P, ctypes.c_uint32, ctypes.c_int64]),
    "dlc_record_set_float": (c_status, [_P, ctypes.c_uint32, ctypes.c_double]),
    "dlc_record_set_bytes": (c_status, [_P, ctypes.c_uint32, _P, ctypes.c_size_t]),
    "dlc_record_seal": (c_status, [_P]),
    # build.h
    "dlc_build_options_init_sized": (None, [ctypes.POINTER(BuildOptions), ctypes.c_size_t]),
    "dlc_build": (c_status, [ctypes.POINTER(ctypes.c_char_p), ctypes.c_size_t, ctypes.c_char_p,
                             ctypes.POINTER(BuildOptions),
                             ctypes.POINTER(ctypes.POINTER(BuildReport))]),
    "dlc_build_report_free": (None, [ctypes.POINTER(BuildReport)]),
    "dlc_set_join": (c_status, [ctypes.c_char_p, ctypes.POINTER(SetJoinReport)]),
    # warm.h
    "dlc_warm_options_init_sized": (None, [ctypes.POINTER(WarmOptions), ctypes.c_size_t]),
    "dlc_warm_redact_text": (ctypes.c_char_p, [ctypes.c_char_p, ctypes.c_char_p,
                                               ctypes.c_size_t]),
    # loader.h
    "dlc_loader_config_init_sized": (None, [ctypes.POINTER(LoaderConfig), ctypes.c_size_t]),
    "dlc_augment_spec_init_sized": (None, [ctypes.POINTER(AugmentSpec), ctypes.c_size_t]),
    "dlc_loader_open": (c_status, [ctypes.c_char_p, ctypes.POINTER(LoaderConfig),
                                   ctypes.POINTER(_P)]),
    "dlc_loader_next": (c_status, [_P, ctypes.POINTER(Batch)]),
    "dlc_loader_next_wait": (c_status, [_P, ctypes.POINTER(Batch), ctypes.c_uint32]),
    "dlc_loader_release": (c_status, [_P, ctypes.POINTER(Batch)]),
    "dlc_loader_put_back": (c_status, [_P, ctypes.POINTER(Batch)]),
    "dlc_loader_keep": (c_status, [_P, ctypes.POINTER(Batch), ctypes.POINTER(_P)]),
    "dlc_loader_kept_free": (None, [_P]),
    "dlc_loader_batches_per_epoch": (ctypes.c_uint64, [_P]),
    "dlc_loader_store_count": (ctypes.c_uint64, [_P]),
    "dlc_loader_set_epoch": (c_status, [_P, ctypes.c_uint64]),
    "dlc_loader_mixup_params": (c_status, [_P, ctypes.c_uint64, ctypes.c_uint64, ctypes.c_uint32,
                                           ctypes.c_uint32, ctypes.POINTER(MixupParams)]),
    "dlc_loader_set_resolution": (c_status, [_P, ctypes.c_uint32, ctypes.c_uint32]),
    "dlc_mixup_draw": (c_status, [ctypes.c_float, ctypes.c_float, ctypes.c_float, ctypes.c_float,
                                  ctypes.c_uint64, ctypes.c_uint64, ctypes.c_uint32,
                                  ctypes.c_uint32, ctypes.c_uint64, ctypes.c_uint32,
                                  ctypes.c_uint32, ctypes.POINTER(MixupParams)]),
    "dlc_loader_state_save": (c_status, [_P, ctypes.c_char_p]),
    "dlc_loader_state_restore": (c_status, [_P, ctypes.c_char_p, ctypes.c_size_t]),
    "dlc_loader_get_stats": (None, [_P, ctypes.POINTER(LoaderStats)]),
    "dlc_loader_get_stream_stats": (c_status, [_P, ctypes.POINTER(LoaderStreamStats)]),
    "dlc_loader_get_report": (c_status, [_P, ctypes.c_uint32, ctypes.POINTER(LoaderReport)]),
    "dlc_bound_name": (ctypes.c_char_p, [ctypes.c_uint32]),
    "dlc_loader_report_text": (ctypes.c_size_t, [ctypes.POINTER(LoaderReport), ctypes.c_char_p,
                                                 ctypes.c_size_t]),
    "dlc_loader_store": (_P, [_P]),
    "dlc_loader_open_store": (c_status, [ctypes.c_char_p, ctypes.POINTER(LoaderConfig),
                                         ctypes.POINTER(_P)]),
    "dlc_loader_plan": (c_status, [ctypes.c_char_p, ctypes.POINTER(LoaderConfig),
                                   ctypes.POINTER(LoaderPlanInfo)]),
    "dlc_loader_close": (None, [_P]),
    # loader.h: mixtures
    "dlc_mix_source_init_sized": (None, [ctypes.POINTER(MixSource), ctypes.c_size_t]),
    "dlc_mix_options_init_sized": (None, [ctypes.POINTER(MixOptions), ctypes.c_size_t]),
    "dlc_loader_open_mix": (c_status, [ctypes.POINTER(MixSource), ctypes.c_uint32,
                                       ctypes.POINTER(MixOptions), ctypes.POINTER(LoaderConfig),
                                       ctypes.POINTER(_P)]),
    "dlc_loader_num_sources": (ctypes.c_uint32, [_P]),
    "dlc_loader_source_info": (c_status, [_P, ctypes.c_uint32, ctypes.POINTER(MixSourceInfo)]),
    "dlc_loader_mix_state_save": (c_status, [_P, ctypes.c_char_p, ctypes.c_size_t,
                                             ctypes.POINTER(ctypes.c_size_t)]),
    "dlc_loader_mix_state_restore": (c_status, [_P, ctypes.c_char_p, ctypes.c_size_t]),
    # loader.h: the device path
    "dlc_loader_device": (ctypes.c_int, [_P, ctypes.POINTER(ctypes.c_char_p)]),
    "dlc_loader_device_copy_event_seconds": (ctypes.c_double, [_P]),
    "dlc_loader_next_device": (c_status, [_P, ctypes.POINTER(DeviceBatch)]),
    "dlc_loader_next_device_wait": (c_status, [_P, ctypes.POINTER(DeviceBatch),
                                                ctypes.c_uint32]),
    "dlc_loader_device_emit": (c_status, [_P, ctypes.POINTER(DeviceBatch), _P,
                                          ctypes.POINTER(DeviceDst), _P]),
    "dlc_loader_device_wait": (c_status, [_P, ctypes.POINTER(DeviceBatch), _P]),
    "dlc_loader_device_release": (c_status, [_P, ctypes.POINTER(DeviceBatch), _P]),
    "dlc_loader_host_slots": (ctypes.c_uint32, [_P, ctypes.POINTER(_P),
                                                ctypes.POINTER(ctypes.c_size_t),
                                                ctypes.c_uint32]),
    "dlc_cuda_probe": (c_status, [ctypes.c_int, ctypes.c_char_p, ctypes.c_size_t]),
    "dlc_cuda_copy_ceiling": (c_status, [ctypes.c_int, ctypes.c_size_t, ctypes.c_uint32,
                                         ctypes.POINTER(ctypes.c_double)]),
}

_SONAMES = ("libdlcache.so", "libdlcache.so.1")


def _candidates():
    """Where libdlcache may be, most specific first (see find_library)."""
    here = os.path.dirname(os.path.abspath(__file__))
    env = os.environ.get("DLCACHE_LIB")
    if env:
        # An explicit choice wins, and is not second-guessed: a wrong value is
        # an error rather than a silent fallback to some other build.
        if os.path.isdir(env):
            return [os.path.join(env, _SONAMES[0])], True
        return [env], True
    out = []
    # Shipped inside the package: `pip install .` puts the library it was
    # built with into the wheel, as libdlcache.so.1 next to this file.
    out += [os.path.join(here, n) for n in reversed(_SONAMES)]
    # Installed by `make install`: the install step writes the library
    # directory it used into _install.py next to this file.
    try:
        from . import _install  # type: ignore[attr-defined]
        out += [os.path.join(_install.LIBDIR, n) for n in _SONAMES]
    except ImportError:
        pass
    # The source tree: python/dlcache -> build/lib.
    out.append(os.path.join(here, "..", "..", "build", "lib", _SONAMES[0]))
    # An installed prefix without _install.py (copied trees):
    # PREFIX/lib/python3/dist-packages/dlcache -> PREFIX/lib[/<multiarch>].
    prefix_lib = os.path.normpath(os.path.join(here, "..", "..", ".."))
    out.append(os.path.join(prefix_lib, _SONAMES[0]))
    multiarch = getattr(__import__("sys").implementation, "_multiarch", None)
    if multiarch:
        out.append(os.path.join(prefix_lib, multiarch, _SONAMES[0]))
    return out, False


def find_library():
    """Return the path of the libdlcache shared library that will be loaded.

    Order: $DLCACHE_LIB (a file or a directory; when set it must be right),
    a copy inside the package (what `pip install .` ships), the prefix
    recorded by `make install`, the source tree's build/lib, an installed
    prefix relative to this package, then the system's library search path
    (ldconfig).
    """
    paths, explicit = _candidates()
    for p in paths:
        if os.path.isfile(p):
            return os.path.normpath(p)
    if explicit:
        raise OSError("DLCACHE_LIB=%s: no such file; unset it or point it at libdlcache.so"
                      % os.environ.get("DLCACHE_LIB"))
    sys_path = ctypes.util.find_library("dlcache")
    if sys_path:
        return sys_path
    raise OSError("libdlcache.so not found; looked in: %s and the system library path. "
                  "Build it (make build), install it (make install), or set DLCACHE_LIB."
                  % ", ".join(os.path.normpath(p) for p in paths))


class _Lib:
    """The loaded library with prototypes applied lazily per symbol."""

    def __init__(self, path):
        self.path = path
        self._dll = ctypes.CDLL(path)

    def __getattr__(self, name):
        if name.endswith("_init") and name + "_sized" in _PROTOTYPES:
            # The headers' _init() macros: the _sized function with the mirror's size
            # (status.h, "How structs grow"), called with ctypes.byref(struct).
            sized = getattr(self, name + "_sized")

            def init(ref, _sized=sized):
                _sized(ref, ctypes.sizeof(ref._obj))
            setattr(self, name, init)
            return init
        try:
            restype, argtypes = _PROTOTYPES[name]
        except KeyError:
            raise AttributeError(name) from None
        try:
            fn = getattr(self._dll, name)
        except AttributeError:
            raise NotImplementedError(
                "%s: %s is not exported (that part of dlcache is not in this build)"
                % (self.path, name)) from None
        fn.restype = restype
        fn.argtypes = argtypes
        setattr(self, name, fn)
        return fn

    def has(self, name):
        return hasattr(self._dll, name)


def check_version(loaded):
    """Refuse a library whose version is not this package's: the struct mirrors above were
    written for one version of the headers, so another library's layouts may differ."""
    from ._version import __version__
    here = os.path.dirname(os.path.abspath(__file__))
    if not loaded.has("dlc_version_number"):
        got = "older than 1.0 (no dlc_version_number())"
    else:
        n = loaded.dlc_version_number()
        got = "%d.%d.%d" % (n // 10000, n // 100 % 100, n % 100)
    if got != __version__:
        raise OSError("%s is libdlcache %s, but the dlcache package at %s is %s and works only "
                      "with its own version: point DLCACHE_LIB at a libdlcache %s, or use the "
                      "package that matches the library" % (loaded.path, got, here, __version__,
                                                            __version__))


lib_path = find_library()
lib = _Lib(lib_path)
check_version(lib)
