#!/usr/bin/env python3
"""Writes the damaged perf.data inputs of the hostile-input cases (tests/hostile/<case>/input.data).

The files are kept in the tree so the cases do not depend on the perf or zstd of the machine that
runs them; this script is how they were made (perf 6.1, zstd 1.5, Debian 12). Usage:
  tests/hostile/make_fixtures.py SYSCALLER   (build/default/tests/tracer_test_syscaller)
"""
import os
import struct
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
PERF_SAMPLE_CPU = 1 << 7
BEFORE_CPU = (1 << 16) | 1 | 2 | 4 | 8 | 64 | 512  # IDENTIFIER IP TID TIME ADDR ID STREAM_ID
HEADER_COMPRESSED = 27
PERF_RECORD_COMPRESSED = 81


def record(syscaller, out, *extra, pipe=False):
    cmd = ["perf", "record", "-q", *extra, "-e", "syscalls:sys_enter_getppid", "-o",
           "-" if pipe else out, "--", syscaller, "getppid", "5"]
    if pipe:
        with open(out, "wb") as f:
            subprocess.run(cmd, check=True, stdout=f, stderr=subprocess.DEVNULL)
    else:
        subprocess.run(cmd, check=True, stderr=subprocess.DEVNULL)
    with open(out, "rb") as f:
        return bytearray(f.read())


def write(case, data):
    os.makedirs(os.path.join(HERE, case), exist_ok=True)
    with open(os.path.join(HERE, case, "input.data"), "wb") as f:
        f.write(data)


def u64(b, off):
    return struct.unpack_from("<Q", b, off)[0]


def records(b, off, end):
    while off + 8 <= end:
        typ, _, size = struct.unpack_from("<IHH", b, off)
        if size < 8:
            return
        yield off, typ, size
        extra = struct.unpack_from("<I", b, off + 8)[0] if typ == 66 else 0
        off += size + extra


def features(b):
    """(bit, table entry offset) of each feature section of a file-mode header."""
    flags = struct.unpack_from("<4Q", b, 72)
    table = u64(b, 40) + u64(b, 48)
    out = []
    for bit in range(256):
        if flags[bit // 64] >> (bit % 64) & 1:
            out.append((bit, table + 16 * len(out)))
    return out


def main(syscaller):
    tmp = tempfile.mkdtemp()
    base = record(syscaller, os.path.join(tmp, "base.data"))
    # Header fields that cannot be right.
    b = bytearray(base); struct.pack_into("<Q", b, 8, 12345); write("replay-header-size", b)
    b = bytearray(base); struct.pack_into("<Q", b, 16, 100000); write("replay-attr-size", b)
    b = bytearray(base); struct.pack_into("<Q", b, 32, 0); write("replay-no-attrs", b)
    # A sample naming a CPU the machine did not have.
    b = bytearray(base)
    sample_type = u64(b, u64(b, 24) + 24)
    assert sample_type & PERF_SAMPLE_CPU
    before = bin(sample_type & BEFORE_CPU).count("1")
    samples = [o for o, t, _ in records(b, u64(b, 40), u64(b, 40) + u64(b, 48)) if t == 9]
    struct.pack_into("<I", b, samples[2] + 8 + 8 * before, 13369345)
    write("replay-cpu-past-nrcpus", b)
    # A zeroed HEADER_ATTR in a pipe stream.
    pipe = record(syscaller, os.path.join(tmp, "pipe.data"), pipe=True)
    off, typ, size = next(records(pipe, 16, len(pipe)))
    assert typ == 64
    pipe[off + 8:off + size] = bytes(size - 8)
    write("replay-pipe-zero-attr", pipe)
    # A 14 KB stream whose TRACING_DATA record claims 4 GB.
    b = b"PERFILE2" + struct.pack("<Q", 16) + struct.pack("<IHHII", 66, 0, 16, 0xF0000000, 0)
    write("replay-pipe-claimed-size", b + bytes(14000))
    # Compressed: a feature that claims a 4 GB ring, then also a record that inflates to 1 GB.
    z = record(syscaller, os.path.join(tmp, "z.data"), "-z")
    bit_entry = dict(features(z))[HEADER_COMPRESSED]
    section = u64(z, bit_entry)
    b = bytearray(z); struct.pack_into("<I", b, section + 16, 0xFFFFFFFF)  # mmap_len
    write("replay-compressed-claimed-ring", b)
    bomb = subprocess.run("head -c 1G /dev/zero | zstd -19 -q -c --no-check", shell=True,
                          check=True, stdout=subprocess.PIPE).stdout
    rec = struct.pack("<IHH", PERF_RECORD_COMPRESSED, 0, 8 + len(bomb)) + bomb
    rec += bytes(-len(rec) % 8)
    rec = rec[:4] + struct.pack("<HH", 0, len(rec)) + rec[8:]
    assert len(rec) < 65536
    data = u64(z, 40)
    b = bytearray(z[:data]) + rec + bytearray(b[data:])  # with the 4 GB claim: the cap is ours
    struct.pack_into("<Q", b, 48, u64(z, 48) + len(rec))  # data size
    for _, entry in features(b):  # the table and its sections moved with the data's end
        struct.pack_into("<Q", b, entry, u64(b, entry) + len(rec))
    write("replay-compressed-bomb", b)


if __name__ == "__main__":
    main(sys.argv[1])
