#!/usr/bin/env python3
"""Writes COPIES copies of OTLP JSON lines files as one file, each copy under trace ids of its own.

A load of real instrumentation for `replay` benchmarks: the recordings in
tests/fixtures/instrumented are the spans SDKs send (no retry-spend attributes, so every trace
goes through inference), but far too few to time. The first 8 hex digits of every trace id
become the copy's number, so copies never share a trace and the rows of each copy are the
rows of the original.

    python3 tools/replicate_jsonl.py --copies 2000 --out /tmp/recorded.jsonl \\
        tests/fixtures/instrumented/*.jsonl
"""

import argparse
import re
import sys

TRACE_ID = re.compile(rb'("traceId"\s*:\s*")([0-9a-fA-F]{8})([0-9a-fA-F]{24}")')


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--copies", type=int, required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("inputs", nargs="+")
    args = parser.parse_args()
    lines = []
    for path in args.inputs:
        with open(path, "rb") as f:
            lines.extend(line.rstrip(b"\r\n") for line in f if line.strip())
    with open(args.out, "wb") as out:
        for copy in range(args.copies):
            prefix = b"%08x" % copy
            for line in lines:
                out.write(TRACE_ID.sub(lambda m: m.group(1) + prefix + m.group(3), line))
                out.write(b"\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
