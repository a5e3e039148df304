#!/usr/bin/env bash
# The GPU check of chapter 7, for a session that is lent a GPU machine (one run, a few minutes).
#
# Run from the repository root on the GPU machine, whose python3 already holds PyTorch (CUDA),
# Triton, Numba and NumPy; Liger-Kernel is pure Python and comes as a wheel, because that
# machine cannot reach a package registry. From a session here, first:
#
#     mkdir -p .device_wheels && pip download --no-deps -d .device_wheels liger-kernel==0.8.5
#
# (an untracked folder, so it travels with the working tree), then through the device tool,
# with a timeout of about 500 s:
#
#     bash scripts/device_check.sh          # or: ... ch7 / ... trl (one part, ~1 min for trl)
#
# It writes into $OUT (or ./device_out): device.txt (GPU, driver, versions, date), tests.txt
# (the Triton kernels and the fused linear loss tested on the GPU, not under the interpreter)
# and bench.json / bench.txt (python -m grpo_lab.bench --device cuda: the Triton kernels, the
# fused losses, eager code and Liger's, each against a copy on the GPU). Chapter 7's section
# "On a GPU" then quotes bench.txt as measured data, with the date and the device.
#
# Chapter 6b's TRL run (python -m grpo_lab.hf --device cuda) needs the Hugging Face stack,
# which that machine lacks: add its pinned wheels, resolved for the device's Python, e.g.
#
#     pip download -d .device_wheels --only-binary=:all: --platform manylinux_2_28_x86_64 \
#         --python-version 3.11 transformers==5.24.0 trl==1.16.0 accelerate==1.15.0 \
#         datasets==5.2.0 tokenizers==0.23.3 safetensors==0.8.0 huggingface_hub==2.4.0
#
# (pyarrow, which datasets pulls in, is most of the 64 MiB a run may carry). Without them the
# TRL step writes "trl: not installed" and the rest of the check still runs. It writes
# trl.json (versions, device, wall times, TRL's metrics, the cross-check's largest
# differences) and trl.txt.
set -u
OUT="${OUT:-device_out}"
mkdir -p "$OUT"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
unset TRITON_INTERPRET
PY=python3
if ls .device_wheels/*.whl >/dev/null 2>&1; then
  $PY -m pip install --quiet --no-deps --no-index .device_wheels/*.whl || true
fi
{
  date -u +"%Y-%m-%dT%H:%M:%SZ"
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || true
  $PY -c "import torch, triton, numpy; print('torch', torch.__version__, 'triton', triton.__version__, 'numpy', numpy.__version__, 'cuda', torch.cuda.get_device_name())"
  $PY -c "import liger_kernel, importlib.metadata as m; print('liger-kernel', m.version('liger-kernel'))" || echo "liger-kernel: not installed"
} > "$OUT/device.txt" 2>&1
PART="${1:-all}"          # all | ch7 | trl: one part alone fits a shorter device call
if [ "$PART" = all ] || [ "$PART" = ch7 ]; then
# the kernels on the GPU: the same tests CI runs under the interpreter
timeout 240 $PY -m pytest tests/torch/test_triton_kernels.py tests/torch/test_fused_linear.py \
  -q -p no:randomly -p no:cacheprovider -o addopts="" > "$OUT/tests.txt" 2>&1
echo "tests exit $?" >> "$OUT/tests.txt"
# the bench on the GPU (NumPy parts stay on the CPU)
timeout 420 $PY -m grpo_lab.bench --device cuda --repeats 7 --out "$OUT/bench.json" \
  > "$OUT/bench.txt" 2>&1
echo "bench exit $?" >> "$OUT/bench.txt"
tail -n 25 "$OUT/bench.txt"
fi
if [ "$PART" = all ] || [ "$PART" = trl ]; then
# chapter 6b: TRL's GRPOTrainer on the GPU, every step recomputed by grpo_lab (cross_check)
if $PY -c "import trl, transformers, datasets" >/dev/null 2>&1; then
  timeout 300 $PY -m grpo_lab.hf --device cuda --steps 10 --out "$OUT/trl.json" \
    > "$OUT/trl.txt" 2>&1
  echo "trl exit $?" >> "$OUT/trl.txt"
else
  echo "trl: not installed (see the wheels above)" > "$OUT/trl.txt"
fi
tail -n 20 "$OUT/trl.txt"
fi
