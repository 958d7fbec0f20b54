import sys

from cory.cli import main

sys.exit(main())
