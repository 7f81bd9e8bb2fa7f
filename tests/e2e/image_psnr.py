"""Compare dlcache's image path with torchvision on PIL images.

Usage: image_psnr.py LIBDLCACHE.so IMAGE.jpg... [--min-mean DB]

For each JPEG, dlc_jpeg_decode_resize(256, center crop) is compared with
torchvision's Resize(256) + CenterCrop(256) on PIL.Image.open(f).convert("RGB"),
and dlc_jpeg_decode at full size with PIL's decode. On a few of the images,
dlc_resize with fractional boxes is compared with PIL's
Image.resize(size, BILINEAR, box=...). Prints one line per image and the
means; exits 1 when the mean PSNR of decode_resize is below --min-mean.

PSNR of identical images is infinite; for the mean each value is capped at
CAP dB so that one exact match does not hide every other result.
"""
import ctypes
import math
import sys

import numpy as np
from PIL import Image
import torchvision.transforms as T

CAP = 100.0


class DlcImage(ctypes.Structure):
    _fields_ = [
        ("data", ctypes.c_void_p),
        ("width", ctypes.c_uint32),
        ("height", ctypes.c_uint32),
        ("channels", ctypes.c_uint32),
        ("stride", ctypes.c_size_t),
    ]


def load(path):
    lib = ctypes.CDLL(path)
    lib.dlc_codec_create.argtypes = [ctypes.POINTER(ctypes.c_void_p)]
    lib.dlc_codec_destroy.argtypes = [ctypes.c_void_p]
    lib.dlc_codec_destroy.restype = None
    lib.dlc_jpeg_decode.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_size_t,
                                    ctypes.c_uint32, ctypes.c_uint32,
                                    ctypes.POINTER(DlcImage)]
    lib.dlc_jpeg_decode_resize.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_size_t,
                                           ctypes.c_uint32, ctypes.c_int,
                                           ctypes.POINTER(DlcImage)]
    lib.dlc_resize_scratch_bound.argtypes = [ctypes.c_uint32] * 5
    lib.dlc_resize_scratch_bound.restype = ctypes.c_size_t
    lib.dlc_resize.argtypes = [ctypes.POINTER(DlcImage), ctypes.c_double, ctypes.c_double,
                               ctypes.c_double, ctypes.c_double, ctypes.POINTER(DlcImage),
                               ctypes.c_void_p, ctypes.c_size_t]
    lib.dlc_errmsg.restype = ctypes.c_char_p
    return lib


def check(lib, rc, what):
    if rc != 0:
        raise RuntimeError(f"{what}: status {rc}: {lib.dlc_errmsg().decode()}")


def as_array(img):
    """Copy a dlc_image (valid until the next codec call) into numpy."""
    buf = (ctypes.c_uint8 * (img.stride * img.height)).from_address(img.data)
    a = np.frombuffer(buf, dtype=np.uint8).reshape(img.height, img.stride)
    return a[:, : img.width * img.channels].reshape(img.height, img.width, img.channels).copy()


def sq_err(a, b):
    if a.shape != b.shape:
        raise AssertionError(f"shape {a.shape} != {b.shape}")
    return float(np.sum((a.astype(np.float64) - b.astype(np.float64)) ** 2))


def psnr_of(sse, n):
    return math.inf if sse == 0 else 10 * math.log10(255.0 ** 2 * n / sse)


def psnr(a, b):
    return psnr_of(sq_err(a, b), a.size)


def fmt(v):
    return "inf" if math.isinf(v) else f"{v:.2f}"


def resize_box(lib, src, box, size):
    """dlc_resize of src (numpy HxWx3) over box (x0, y0, x1, y1) to size (w, h)."""
    src = np.ascontiguousarray(src)
    h, w, _ = src.shape
    out = np.zeros((size[1], size[0], 3), dtype=np.uint8)
    si = DlcImage(src.ctypes.data, w, h, 3, w * 3)
    di = DlcImage(out.ctypes.data, size[0], size[1], 3, size[0] * 3)
    rw, rh = box[2] - box[0], box[3] - box[1]
    need = lib.dlc_resize_scratch_bound(math.ceil(rw), math.ceil(rh), size[0], size[1], 3)
    scratch = ctypes.create_string_buffer(need)
    check(lib, lib.dlc_resize(ctypes.byref(si), box[0], box[1], rw, rh, ctypes.byref(di),
                              scratch, need), f"dlc_resize box {box}")
    return out


def main():
    args = sys.argv[1:]
    min_mean = 35.0
    if "--min-mean" in args:
        i = args.index("--min-mean")
        min_mean = float(args[i + 1])
        del args[i : i + 2]
    lib = load(args[0])
    files = args[1:]
    codec = ctypes.c_void_p()
    check(lib, lib.dlc_codec_create(ctypes.byref(codec)), "dlc_codec_create")
    tv = T.Compose([T.Resize(256), T.CenterCrop(256)])

    resized, full, exact = [], [], 0
    pooled_sse, pooled_n = 0.0, 0
    boxes_done = 0
    box_psnr = []
    for path in files:
        data = open(path, "rb").read()
        pil = Image.open(path).convert("RGB")
        ref = np.asarray(tv(pil))
        img = DlcImage()
        check(lib, lib.dlc_jpeg_decode_resize(codec, data, len(data), 256, 1,
                                              ctypes.byref(img)), path)
        ours = as_array(img)
        sse = sq_err(ours, ref)
        pooled_sse += sse
        pooled_n += ref.size
        p = psnr_of(sse, ref.size)
        resized.append(min(p, CAP))
        exact += int(math.isinf(p))
        check(lib, lib.dlc_jpeg_decode(codec, data, len(data), 0, 0, ctypes.byref(img)), path)
        dec = as_array(img)
        q = psnr(dec, np.asarray(pil))
        full.append(min(q, CAP))
        print(f"{path}: {pil.size[0]}x{pil.size[1]} resize+crop {fmt(p)} dB, "
              f"full decode {fmt(q)} dB")
        if boxes_done < 4:
            # Fractional boxes through the same full-size pixels PIL uses, so
            # this isolates the resampler.
            w, h = pil.size
            for box, size in (
                ((10.25, 20.5, w * 0.6 + 0.3, h * 0.7 + 0.1), (224, 224)),
                ((w * 0.1, h * 0.2, w * 0.35, h * 0.33), (300, 180)),
                ((0.5, 0.5, w - 0.5, h - 0.5), (w // 7, h // 5)),
                ((3.0, 4.0, 3.0 + w / 3.0, 4.0 + h / 4.0), (97, 61)),
            ):
                ref_box = np.asarray(pil.resize(size, Image.BILINEAR, box=box))
                r = psnr(resize_box(lib, dec, box, size), ref_box)
                box_psnr.append(min(r, CAP))
                print(f"  box {tuple(round(v, 3) for v in box)} -> {size}: {fmt(r)} dB")
            boxes_done += 1
    lib.dlc_codec_destroy(codec)

    mean = sum(resized) / len(resized)
    print(f"images: {len(files)}, identical to torchvision: {exact}")
    print(f"mean PSNR decode_resize(256)+crop vs torchvision: {mean:.2f} dB "
          f"(min {min(resized):.2f}, values capped at {CAP:.0f})")
    differing = [v for v in resized if v < CAP]
    if differing:
        print(f"mean PSNR over the {len(differing)} images that differ: "
              f"{sum(differing) / len(differing):.2f} dB")
    print(f"PSNR of all pixels pooled: {fmt(psnr_of(pooled_sse, pooled_n))} dB")
    print(f"mean PSNR full decode vs PIL: {sum(full) / len(full):.2f} dB")
    if box_psnr:
        print(f"mean PSNR dlc_resize(box) vs PIL resize(box): "
              f"{sum(box_psnr) / len(box_psnr):.2f} dB (min {min(box_psnr):.2f})")
    if mean < min_mean:
        print(f"FAIL: mean PSNR {mean:.2f} dB is below {min_mean} dB")
        return 1
    if box_psnr and min(box_psnr) < min_mean:
        print(f"FAIL: a fractional box differs from PIL ({min(box_psnr):.2f} dB)")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
