"""``python -m grpo_lab.bench``: the command line of :mod:`grpo_lab.perf.bench`.

Imported, this name is that module itself (``gl.bench``), not a copy of it.
"""

import sys

from grpo_lab.perf import bench as _module

if __name__ == "__main__":
    sys.exit(_module.main())
sys.modules[__name__] = _module
