"""``python -m grpo_lab.train``: the command line of :mod:`grpo_lab.rl.train`.

Imported, this name is that module itself (``gl.train``), not a copy of it.
"""

import sys

from grpo_lab.rl import train as _module

if __name__ == "__main__":
    sys.exit(_module.main())
sys.modules[__name__] = _module
