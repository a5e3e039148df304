r"""The goals :mod:`grpo_lab.perf.bench` puts next to what it measured, and the labels of its rows.

Taught in chapter 7 (``chapters/07_performance.ipynb``). Each goal row says what was measured,
the goal, and whether it was met; lower is better, except for a speedup.
"""

from __future__ import annotations

import statistics

__all__ = ["COPY", "COPY_NEW", "FUSED_LOSS", "GOAL_KEYS", "MIRROR_ADV", "MIRROR_LOSS",
           "NUMPY_FAST", "NUMPY_FAST_OUT", "NUMPY_PLAIN", "NUMPY_REF", "TORCH_COPY", "TRITON_ADV",
           "TRITON_LOSS", "TRL_ADV", "TRL_LOSS", "summary"]

COPY, TORCH_COPY = "copy", "torch copy"       # np.copyto / copy_ into an array already there
COPY_NEW = "new-array copy"                   # np.copy: the output array is fresh memory
# The TRL baselines, named for what they are: the advantages as TRL composes them without the
# NaN handling 1.16.0 added (group mean and std repeat_interleave'd back to (B*G,); 1.16.0 uses
# nanmean, its own nanstd, isclose and nan_to_num, grpo_trainer.py:2765-2810); the loss as TRL's default
# was up to 0.16 (per-sequence "grpo" aggregation, beta 0.04, k3), eager. TRL 1.16.0's default
# is loss_type "dapo" with beta 0.0, and its log-probs come from its own fused LM head.
TRL_ADV = "TRL's mean/std core, no NaN handling (bench.trl_style_advantages)"
MIRROR_ADV = "torch mirror (grpo_lab.torch.group_advantages)"
TRL_LOSS = "TRL <=0.16 default, eager (bench.trl_style_loss)"
MIRROR_LOSS = "torch mirror (grpo_lab.torch.grpo_loss)"
FUSED_LOSS = "fused (loss_fused.grpo_loss_fused)"
TRITON_ADV = "triton (triton_kernels.group_advantages_triton)"       # on CUDA only
TRITON_LOSS = "triton (triton_kernels.grpo_loss_triton)"
NUMPY_PLAIN, NUMPY_REF = "numpy plain formula", "numpy reference (gl.group_advantages)"
NUMPY_FAST = "numpy fast (gl.group_advantages_fast)"
NUMPY_FAST_OUT = "numpy fast, out= (gl.group_advantages_fast)"

# The goals: the fast path's time as a multiple of the copy's (G >= 64, G < 64) and its peak
# as a multiple of the output; the fused loss's speedup over the TRL baseline loss and its
# fraction of that loss's peak; the torch mirror's loss time and peak, and its advantages'
# time, as multiples of the TRL baselines'; the fused linear loss's time and peak as
# multiples of Liger's and of TRL 1.16.0's fused LM head's.
FAST_GOAL_RATIO_LONG, FAST_GOAL_RATIO_SHORT, FAST_GOAL_PEAK = 2.0, 3.0, 1.1
FUSED_GOAL_SPEEDUP, FUSED_GOAL_PEAK = 3.0, 1 / 3
MIRROR_GOAL_TIME, MIRROR_GOAL_PEAK, MIRROR_GOAL_ADV_TIME = 1.2, 1.2, 1.0
LINEAR_GOAL_TIME, LINEAR_GOAL_PEAK = 1.0, 1.0       # fused linear loss / Liger's, / TRL's


#: measured value -> its goal's key; lower is better except for a speedup.
GOAL_KEYS = {"ratio_to_copy": "goal_ratio", "peak_vs_output": "goal_peak",
             "speedup": "goal_speedup", "peak_fraction_of_eager": "goal_peak_fraction",
             "time_vs_trl": "goal_time_vs_trl", "peak_vs_trl": "goal_peak_vs_trl",
             "time_vs_liger": "goal_time_vs_liger", "peak_vs_liger": "goal_peak_vs_liger",
             "time_vs_trl_head": "goal_time_vs_trl_head",
             "peak_vs_trl_head": "goal_peak_vs_trl_head"}


def _goal_row(what, **measured):
    """``{"what", <key>, <goal key>, ..., "goal_met"}`` from ``key=(value, goal)`` pairs."""
    row, met = {"what": what}, True
    for key, (value, goal) in measured.items():
        row[key], row[GOAL_KEYS[key]] = value, goal
        met = met and (value >= goal if key == "speedup" else value <= goal)
    row["goal_met"] = bool(met)
    return row


def _paired(rows, row, baseline, peaks=True):
    """Median over rounds of ``row``'s time / the baseline's, and the ratio of their peaks
    (None with ``peaks=False``: a copy's peak is not measured)."""
    base = next(r for r in rows if r["impl"] == baseline and r["bench"] == row["bench"]
                and r["shape"] == row["shape"])
    time_ratio = statistics.median(x / y for x, y in zip(row["times_s"], base["times_s"]))
    return time_ratio, row["peak_extra_bytes"] / base["peak_extra_bytes"] if peaks else None


def _cpu_ratio(goal, key, row, base):
    """``goal`` with ``key``: the ratio of the two processes' median CPU times per step, where
    both rows have them (a shared machine's load moves wall time, not a process's CPU time);
    reported beside the goal, not a goal itself."""
    if row.get("cpu_times_s") and base.get("cpu_times_s"):
        goal[key] = statistics.median(row["cpu_times_s"]) / statistics.median(base["cpu_times_s"])
    return goal


def summary(rows):
    """The issues' goals next to what was measured, one dict per goal (see the module)."""
    out = []
    liger = next((r for r in rows if r["impl"] == "liger" and "error" not in r), None)
    trl = next((r for r in rows if r["impl"] == "trl" and "error" not in r), None)
    for row in rows:
        shape, impl, at = row["shape"], row["impl"], tuple(row["shape"])
        if row["bench"].startswith("fused linear"):
            if impl == "fused" and liger is not None and "error" not in row:
                out.append(_cpu_ratio(_goal_row(
                    f"fused linear GRPO loss vs Liger {at} fwd+bwd, each in a fresh process",
                    time_vs_liger=(row["median_s"] / liger["median_s"], LINEAR_GOAL_TIME),
                    peak_vs_liger=(row["peak_extra_bytes"] / liger["peak_extra_bytes"],
                                   LINEAR_GOAL_PEAK)), "cpu_time_vs_liger", row, liger))
            if impl == "fused" and trl is not None and "error" not in row:
                out.append(_cpu_ratio(_goal_row(
                    f"fused linear GRPO loss vs TRL 1.16.0's fused LM head, its "
                    f"{'Triton' if trl.get('device') == 'cuda' else 'CPU (torch fold)'} path, {at} "
                    f"fwd+bwd, each in a fresh process",
                    time_vs_trl_head=(row["median_s"] / trl["median_s"], LINEAR_GOAL_TIME),
                    peak_vs_trl_head=(row["peak_extra_bytes"] / trl["peak_extra_bytes"],
                                      LINEAR_GOAL_PEAK)), "cpu_time_vs_trl_head", row, trl))
            continue
        if impl in (NUMPY_FAST, NUMPY_FAST_OUT):
            # Like against like: a new output array against a copy into a new array (both
            # pay for fresh pages), out= against a copy into an array already there.
            goal = FAST_GOAL_RATIO_LONG if shape[1] >= 64 else FAST_GOAL_RATIO_SHORT
            if impl == NUMPY_FAST:
                ratio, _ = _paired(rows, row, COPY_NEW, peaks=False)
                out.append(_goal_row(f"group_advantages_fast {at}, a new array, vs a "
                                     f"new-array copy", ratio_to_copy=(ratio, goal),
                                     peak_vs_output=(row["peak_extra_vs_output"],
                                                     FAST_GOAL_PEAK)))
            else:
                out.append(_goal_row(f"group_advantages_fast {at}, out=, vs a copy into an "
                                     f"existing array",
                                     ratio_to_copy=(row["ratio_to_copy"], goal)))
        elif impl == MIRROR_ADV:
            time_ratio, _ = _paired(rows, row, TRL_ADV)
            out.append(_goal_row(f"torch mirror advantages vs TRL's mean/std core {at}",
                                 time_vs_trl=(time_ratio, MIRROR_GOAL_ADV_TIME)))
        elif impl == MIRROR_LOSS:
            time_ratio, peak_ratio = _paired(rows, row, TRL_LOSS)
            out.append(_goal_row(f"torch mirror loss vs TRL <=0.16 eager {at} fwd+bwd",
                                 time_vs_trl=(time_ratio, MIRROR_GOAL_TIME),
                                 peak_vs_trl=(peak_ratio, MIRROR_GOAL_PEAK)))
        elif impl in (TRITON_ADV, TRITON_LOSS):
            base = TRL_ADV if impl == TRITON_ADV else TRL_LOSS
            time_ratio, _ = _paired(rows, row, base)
            out.append(_goal_row(f"{impl} vs TRL baseline {at} on {row['device']}",
                                 speedup=(1 / time_ratio, 1.0)))
        elif impl == FUSED_LOSS:
            time_ratio, peak_ratio = _paired(rows, row, TRL_LOSS)
            out.append(_goal_row(f"fused loss vs TRL <=0.16 eager {at} fwd+bwd",
                                 speedup=(1 / time_ratio, FUSED_GOAL_SPEEDUP),
                                 peak_fraction_of_eager=(peak_ratio, FUSED_GOAL_PEAK)))
    return out
