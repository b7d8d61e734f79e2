"""``badpoints validate MEDS_DIR --workers N --json REPORT`` as the benchmark measures it, plus what the report's
messages cannot hold (they name the first five): every code readiness predicts non-finite, and every code it finds
noise (all train values equal, a positive rounding residue for a std: finite z of noise here, NaN or inf where the
residue rounds the other way), with their rows (in all, and per noise code).

    python -m bench.meds_validate MEDS_DIR REPORT_JSON PREDICTED_JSON [--workers N] [--engine NAME]

It runs what the CLI runs on a MEDS folder (:func:`pipeline.meds.validate_meds` with the default config, on the
engine the registry opens: ``auto`` by default, which weighs the shards' bytes; the report written by
``Report.write_json``), without printing the findings to a terminal.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from pipeline.config import load_config
from pipeline.engines import AUTO, EngineOptions, meds_size, names, open_engine
from pipeline.meds import validate_meds


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("meds_dir", type=Path)
    parser.add_argument("report", type=Path)
    parser.add_argument("predicted", type=Path)
    parser.add_argument("--workers", type=int, default=EngineOptions.workers)
    parser.add_argument("--engine", choices=names(), default=AUTO)
    args = parser.parse_args(argv)
    options = EngineOptions(workers=args.workers)
    with open_engine(args.engine, options, size=meds_size(args.meds_dir)) as engine:
        result = validate_meds(args.meds_dir, load_config(None), engine=engine)
    result.report.write_json(args.report)
    ready = result.ready
    broken = ready[ready["non_finite"] > 0] if ready is not None else None
    noise = ready[ready["noise"]] if ready is not None else None
    args.predicted.write_text(json.dumps({
        "non_finite_codes": [] if broken is None else sorted(broken.index.astype(str)),
        "non_finite_rows": 0 if broken is None else int(broken["non_finite"].sum()),
        "noise_codes": [] if noise is None else sorted(noise.index.astype(str)),
        "noise_rows": 0 if noise is None else int(noise["numeric"].sum()),
        "noise_rows_by_code": {} if noise is None else {str(code): int(rows)
                                                        for code, rows in noise["numeric"].sort_index().items()},
    }, indent=2) + "\n")
    return result.exit_code


if __name__ == "__main__":
    sys.exit(main())
