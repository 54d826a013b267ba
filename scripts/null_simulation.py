"""The false-positive rate of adding seeds after looking, naive vs sequential
(pelab.analysis.null_simulation)."""

import sys

from pelab.analysis.null_simulation import main

if __name__ == "__main__":
    sys.exit(main())
