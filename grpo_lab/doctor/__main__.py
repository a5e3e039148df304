"""``python -m grpo_lab.doctor PATH``: the doctor on a TRL log (see :mod:`grpo_lab.doctor`)."""

import sys

from grpo_lab.doctor import main

sys.exit(main())
