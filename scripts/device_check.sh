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
#     bash scripts/device_check.sh          # or: ... ch7 / ... trl / ... linear (one part)
#
# It writes into $OUT (or ./device_out): device.txt (GPU, driver, versions, date), model.txt
# (chapter 7's cost model for this GPU's datasheet record: what the measurements should be
# compared with), tests.txt (the Triton kernels and the fused linear loss tested on the GPU,
# not under the interpreter) and bench.json / bench.txt (python -m grpo_lab.bench --device
# cuda: the Triton kernels and fused losses against a copy on the GPU, and the loss from hidden
# states four ways at (8, 1024, 512, 65536): this package's, Liger's, TRL 1.16.0's fused LM head
# on its Triton path (only the valid positions scored, as add_fused_lm_head does on a Triton
# device), and eager; the trl row needs the TRL and transformers wheels below, and says
# "error" without them). `linear` runs that last comparison alone (linear.json / linear.txt),
# the one measurement of TRL's Triton path; chapter 7 states its lead over TRL only for the CPU
# path it measured until this has run. Chapter 7's section "On a GPU" then quotes bench.txt as
# measured data, with the date and the device.
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
PART="${1:-all}"          # all | ch7 | trl | linear: one part alone fits a shorter device call
if [ "$PART" = linear ]; then
# the loss from hidden states, each peer in a fresh process, TRL on its Triton tiles
timeout 300 $PY -m grpo_lab.bench --device cuda --only linear --out "$OUT/linear.json" \
  > "$OUT/linear.txt" 2>&1
echo "linear exit $?" >> "$OUT/linear.txt"
tail -n 12 "$OUT/linear.txt"
fi
if [ "$PART" = all ] || [ "$PART" = ch7 ]; then
# the cost model's predictions, to read the measurements against
$PY - > "$OUT/model.txt" 2>&1 <<'PYEOF'
import torch
import grpo_lab as gl
cm, name = gl.cost_model, torch.cuda.get_device_name() if torch.cuda.is_available() else "none"
gpu = gl.roofline.H200_SXM if "H200" in name else gl.roofline.H100_SXM
print(f"device {name}; datasheet record {gpu.name}; ridge {cm.ridge_point(gpu, cm.EFFICIENCY):.0f} flop/byte at the assumed efficiencies ({cm.ridge_point(gpu):.0f} at the peaks)")
for gpus, T in ((8, 1024), (1, 1024), (8, 4096)):
    cost = cm.grpo_step_cost(cm.QWEN25_7B, gpu, prompts=64, G=8, T=T, gpus=gpus)
    print(gpus, T, {k: round(v, 3) for k, v in cost.items()})
PYEOF
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
