"""``python -m grpo_lab.sweep``: the command line of :mod:`grpo_lab.rl.sweep`."""

import sys

from grpo_lab.rl import sweep as _module

if __name__ == "__main__":
    sys.exit(_module.main())
sys.modules[__name__] = _module
