"""Writes tests/reference/reference.json.gz from this build. Run it only on
a commit whose results are the reference (see cases.py), or to add the case
of a new bundled scenario on a commit whose other results are unchanged
(check that only the new case was added):

    .venv/bin/python tests/reference/regen.py
"""

from __future__ import annotations

import gzip
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from cases import REFERENCE, cases, run_case  # noqa: E402


def main() -> None:
    out = {}
    for case, path, sets in cases():
        out[case] = run_case(path, sets)
        print(case, flush=True)
    data = json.dumps(out, sort_keys=True, separators=(",", ":")).encode()
    tmp = REFERENCE.with_suffix(".tmp")
    with gzip.GzipFile(tmp, "wb", mtime=0) as f:
        f.write(data)
    tmp.replace(REFERENCE)
    print(f"{len(out)} cases -> {REFERENCE} ({REFERENCE.stat().st_size} bytes)")


if __name__ == "__main__":
    main()
