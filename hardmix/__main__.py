import sys

from hardmix.cli import main

sys.exit(main())
