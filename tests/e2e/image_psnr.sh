#!/usr/bin/env bash
# dlcache's decode + Resize(256) + CenterCrop(256) against torchvision on PIL,
# on the 12 MATE nature photographs and on 50 mkdemo images, plus fractional
# resize boxes against PIL's Image.resize(box=...). Fails when the mean PSNR
# is below 35 dB (expected: about 50 dB; full decodes and boxes are exact).
set -euo pipefail
: "${DLC_BIN:?DLC_BIN must name the build's bin directory}"
: "${DLC_LIB:?DLC_LIB must name the build's lib directory}"
: "${DLC_SRC:?DLC_SRC must name the source tree}"

photos=/usr/share/backgrounds/mate/nature
if ! compgen -G "$photos/*.jpg" >/dev/null; then
    echo "image_psnr: no photos in $photos (install mate-backgrounds)" >&2
    exit 1
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

"$DLC_BIN/mkdemo" "$tmp/demo" --count 50 --seed 7
/usr/bin/python3 "$DLC_SRC/tests/e2e/image_psnr.py" "$DLC_LIB/libdlcache.so" \
    "$photos"/*.jpg "$tmp"/demo/train/*/*.jpg --min-mean 35
