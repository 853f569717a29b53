"""rezip.py SRC.whl DST.whl [EXCLUDE_PREFIX ...]: copy a wheel with every entry STORED (uncompressed, so
that a solid xz over many wheels compresses them together), dropping entries under the given prefixes and
their RECORD lines. Entry names, contents, timestamps and permission bits are kept."""

import csv
import sys
import zipfile

src, dst, excl = sys.argv[1], sys.argv[2], tuple(sys.argv[3:])
dropped = 0
with zipfile.ZipFile(src) as zin, zipfile.ZipFile(dst, "w", zipfile.ZIP_STORED) as zout:
    for info in zin.infolist():
        if excl and info.filename.startswith(excl):
            dropped += info.file_size
            continue
        data = zin.read(info)
        if excl and info.filename.count("/") == 1 and info.filename.endswith(".dist-info/RECORD"):
            # the wheel's own RECORD: drop the removed files' lines, keep every other line byte for byte
            lines = data.decode().splitlines(keepends=True)
            data = "".join(row for row in lines if not next(csv.reader([row]), [""])[0].startswith(excl)).encode()
        info.compress_type = zipfile.ZIP_STORED
        zout.writestr(info, data)
print(f"{dst}: dropped {dropped} bytes")
