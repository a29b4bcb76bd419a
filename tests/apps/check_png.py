#!/usr/bin/env python3
"""check_png.py FILE WIDTH HEIGHT: passes when FILE is a PNG image (the 8-byte signature,
then the IHDR chunk first, as the PNG specification requires) of WIDTH x HEIGHT pixels."""
import struct
import sys

path, width, height = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
try:
    with open(path, "rb") as f:
        head = f.read(33)
except OSError as e:
    sys.exit("FAILED: cannot read %s: %s" % (path, e))
if head[:8] != b"\x89PNG\r\n\x1a\n":
    sys.exit("FAILED: %s does not start with the PNG signature" % path)
length, kind = struct.unpack(">I4s", head[8:16])
if kind != b"IHDR" or length != 13:
    sys.exit("FAILED: %s: the first chunk is %r of %d bytes, not IHDR of 13" % (path, kind, length))
w, h = struct.unpack(">II", head[16:24])
if (w, h) != (width, height):
    sys.exit("FAILED: %s is %dx%d, expected %dx%d" % (path, w, h, width, height))
print("OK: %s is a %dx%d PNG" % (path, w, h))
