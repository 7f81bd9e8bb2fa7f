"""Write a store of one field, "tokens" (int32 ids, a length that varies per record), with the
public writer through ctypes: a store without any image, for the tools that must work on one.

usage: write_tokens.py LIBDLCACHE STORE COUNT
Record i holds the ids 1000 * i + k for k in 0 .. i % 7 + 2."""
import ctypes as C
import sys


class FieldSpec(C.Structure):
    _fields_ = [("name", C.c_char_p), ("kind", C.c_uint32), ("dtype", C.c_uint32),
                ("encoding", C.c_uint32), ("flags", C.c_uint32), ("ndim", C.c_uint32),
                ("shape", C.c_uint32 * 6), ("link", C.c_char_p), ("quality", C.c_int)]


class WriterConfig(C.Structure):
    _fields_ = [("struct_size", C.c_uint32), ("fields", C.POINTER(FieldSpec)),
                ("num_fields", C.c_uint32),
                ("label_names", C.POINTER(C.c_char_p)), ("num_labels", C.c_uint32),
                ("force", C.c_int), ("size_hint", C.c_uint64), ("build_json", C.c_char_p),
                ("source_digest", C.c_uint64)]


NDARRAY, INT32, VARIABLE = 2, 6, 1


def main(libpath, store, count):
    lib = C.CDLL(libpath)
    lib.dlc_errmsg.restype = C.c_char_p

    def check(rc, what):
        if rc != 0:
            sys.exit(f"write_tokens.py: {what}: {lib.dlc_errmsg().decode()}")

    spec = FieldSpec(name=b"tokens", kind=NDARRAY, dtype=INT32, flags=VARIABLE, ndim=1)
    # dlc_writer_config_init() sets struct_size and the defaults, as a C caller does: the
    # header's macro is dlc_writer_config_init_sized() with the caller's sizeof.
    cfg = WriterConfig()
    lib.dlc_writer_config_init_sized(C.byref(cfg), C.c_size_t(C.sizeof(cfg)))
    cfg.fields, cfg.num_fields, cfg.force = C.pointer(spec), 1, 1
    w, b = C.c_void_p(), C.c_void_p()
    check(lib.dlc_writer_open(store.encode(), C.byref(cfg), C.byref(w)), "open")
    check(lib.dlc_record_builder_create(w, C.byref(b)), "builder")
    for i in range(int(count)):
        n = i % 7 + 2
        ids = (C.c_int32 * n)(*[1000 * i + k for k in range(n)])
        check(lib.dlc_record_set_array(b, 0, ids, C.sizeof(ids), n), f"record {i}")
        check(lib.dlc_record_seal(b), f"seal {i}")
        check(lib.dlc_writer_append(w, b), f"append {i}")
    lib.dlc_record_builder_destroy(b)
    check(lib.dlc_writer_finish(w), "finish")


if __name__ == "__main__":
    main(*sys.argv[1:])
