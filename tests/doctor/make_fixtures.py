"""Write the doctor's fixtures from the clinic's real TRL runs (run once; the tests read the
files and need no TRL): ``python tests/doctor/make_fixtures.py``.

Each staged failure's log (and its healed run's) is stored as TRL wrote it, every float
rounded to 5 significant digits and only TRL's metric keys kept, so the files stay small.
"""

import json
import math
import os
import sys
import warnings
from pathlib import Path

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
HERE = Path(__file__).resolve().parent / "fixtures"


def small(value):
    if isinstance(value, float) and math.isfinite(value):
        return float(f"{value:.5g}")
    return value


def keep(key):
    from grpo_lab.doctor import TRL_METRICS
    return key in TRL_METRICS or key.startswith("rewards/") or key in (
        "step", "epoch", "learning_rate", "train_runtime", "train_loss")


def main(names=None):
    import torch
    import transformers

    import grpo_lab.clinic as clinic

    torch.set_num_threads(1)
    transformers.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()
    warnings.filterwarnings("ignore")
    HERE.mkdir(exist_ok=True)
    for name in names or clinic.STAGES:
        for healthy in (False, True):
            log = clinic.stage(name, healthy=healthy, seed=0)
            if isinstance(log, str):
                continue
            rows = [{k: small(v) for k, v in row.items() if keep(k)} for row in log]
            path = HERE / f"{name}{'_healthy' if healthy else ''}.json"
            path.write_text(json.dumps(rows) + "\n")       # json writes NaN and Infinity as TRL
            print(path.name, len(rows), "rows", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
