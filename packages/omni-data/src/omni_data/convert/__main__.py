import sys

from omni_data.convert.cli import main

sys.exit(main())
