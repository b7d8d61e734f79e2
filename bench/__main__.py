"""``python -m bench``: the benchmark (:func:`bench.run.main`)."""

import sys

from bench.run import main

if __name__ == "__main__":
    sys.exit(main())
