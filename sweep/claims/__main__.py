import sys

from sweep.claims.cli import main

sys.exit(main())
