"""``python -m bench.synth OUT_DIR --rows N [--seed S] [--layout mimic3|mimic4] [--shape default|heavy]``: the data."""

import sys

from bench.synth.write import main

if __name__ == "__main__":
    sys.exit(main())
