#!/usr/bin/env bash
# Everything a lent GPU can tell about the CUDA kernels, in one call, into one Markdown report (issue 64,
# item 6): GPUs are lent here rarely and for minutes, so whoever gets one runs this once, early, and again at
# the end.  Stages, each with its own time limit, each written to the report whether or not it passed:
#
#   1. the machine: GPU (nvidia-smi), torch, CUDA; stops here (exit 3) without a CUDA GPU;
#   2. the ops: a prebuilt library (PREBUILT=DIR holding libwavepe_ops.so + libwavepe_ops.json, built on a
#      CPU machine with `WAVEPE_BUILD_CUDA=1 WAVEPE_CUDA_ARCHS=90 make build` and carried along) dropped into
#      python/wavepe/, with only the NumPy extension compiled here; or, without PREBUILT, the whole build
#      with this GPU's arch (minutes);
#   3. benchmarks/bench_attention.py --device cuda: flash, cuDNN, FlexAttention reading q.T^T, wavepe nope,
#      ALiBi, wavelet, window, soft-cap, forward and forward+backward, decoding (GQA) at 32k and 128k keys,
#      with TFLOP/s and GB/s (benchmarks/_attention_cuda.py);
#   4. benchmarks/bench_hf.py --device cuda: Hugging Face Llama's train step (4 layers, hidden 2048, L=4096),
#      prefill and decoding, wavepe's wavelet against the stock model;
#   5. `pytest -m cuda` on the CUDA test files;
#   6. Nsight Compute (when `ncu` is there) on one launch of the bf16 forward (without and with the wavelet's
#      table) and of the backward's dK/dV and dQ kernels at L=8192, of decoding's partials and combine (32k keys)
#      and of RoPE: occupancy, issue slots, the tensor and shared-memory pipes' utilisation, shared-memory bank
#      conflicts, the instruction mix.
#
#   OUT=DIR PREBUILT=DIR bash benchmarks/gpu_report.sh [--quick]
#
# OUT (default ./gpu-report) receives report.md, each stage's full log and the benchmark's JSON.  --quick:
# small lengths (a smoke run of the script itself).  Compilers: /usr/bin/gcc and g++ (a lent machine's conda
# compilers may not build against its Python).
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
OUT=${OUT:-$ROOT/gpu-report}
mkdir -p "$OUT"
report=$OUT/report.md
quick=0
for a in "$@"; do
  case $a in
    --quick) quick=1 ;;
    *) echo "gpu_report.sh: unknown argument $a (only --quick)" >&2; exit 2 ;;
  esac
done
PY=${PYTHON:-python3}
export PYTHONPATH=$ROOT/python${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
t0=$(date +%s)

# stage TITLE LIMIT_S COMMAND...: run COMMAND with a time limit, its output to OUT/<n>.log; the report gets
# the title, the exit status, the seconds and the log's last lines
n=0
stage() {
  local title=$1 limit=$2 rc=0 s
  shift 2
  n=$((n + 1))
  s=$(date +%s)
  echo "[+$((s - t0))s] $title" >&2
  timeout "$limit" "$@" > "$OUT/$n.log" 2>&1 || rc=$?
  {
    echo "## $n. $title"
    echo
    echo "exit $rc$([ $rc -eq 124 ] && echo " (past its $limit s)"), $(( $(date +%s) - s )) s; full log: $n.log"
    echo
    echo '```'
    tail -n "${TAIL:-60}" "$OUT/$n.log"
    echo '```'
    echo
  } >> "$report"
  return $rc
}

{
  echo "# wavepe GPU report"
  echo
  echo "$(date -u '+%Y-%m-%d %H:%M UTC'), tree $(git rev-parse --short HEAD 2>/dev/null || echo '(not a git checkout)')"
  echo
} > "$report"

stage "the machine" 60 bash -c "nvidia-smi --query-gpu=name,memory.total,clocks.max.sm,clocks.max.mem --format=csv; \
  $PY -c 'import torch; print(\"torch\", torch.__version__, \"cuda\", torch.version.cuda, \"available\", torch.cuda.is_available()); \
  print(torch.cuda.get_device_name(0), \"sm_%d%d\" % torch.cuda.get_device_capability(0))'"
if ! $PY -c 'import sys, torch; sys.exit(not torch.cuda.is_available())' 2>/dev/null; then
  echo "no CUDA GPU here: nothing more to measure (report: $report)" >&2
  exit 3
fi

export CC=/usr/bin/gcc CXX=/usr/bin/g++ LDSHARED="/usr/bin/gcc -shared" WAVEPE_WERROR=0
export WAVEPE_BUILD_JOBS=${WAVEPE_BUILD_JOBS:-$(nproc)}
if [ -n "${PREBUILT:-}" ]; then
  [ -f "$PREBUILT/libwavepe_ops.so" ] && [ -f "$PREBUILT/libwavepe_ops.json" ] || {
    echo "PREBUILT=$PREBUILT holds no libwavepe_ops.so + libwavepe_ops.json" >&2; exit 2; }
  stage "the ops: prebuilt library from $PREBUILT, the NumPy extension built here" 300 bash -c \
    "WAVEPE_BUILD_TORCH=0 $PY setup.py -q build_ext --inplace && cp '$PREBUILT'/libwavepe_ops.so '$PREBUILT'/libwavepe_ops.json python/wavepe/ && $PY -m wavepe info" \
    || { echo "the build failed (report: $report)" >&2; exit 4; }
else
  arch=$($PY -c 'import torch; print("%d%d" % torch.cuda.get_device_capability(0))')
  stage "the ops: built here for sm_$arch (no PREBUILT)" 900 bash -c \
    "WAVEPE_BUILD_CUDA=1 WAVEPE_CUDA_ARCHS=$arch $PY setup.py -q build_ext --inplace && $PY -m wavepe info" \
    || { echo "the build failed (report: $report)" >&2; exit 4; }
fi

bench=(benchmarks/bench_attention.py --device cuda)
[ $quick = 1 ] && bench+=(--quick)
stage "benchmarks/bench_attention.py --device cuda$([ $quick = 1 ] && echo ' --quick')" 480 $PY "${bench[@]}"
cp benchmarks/results/bench_attention_cuda.json "$OUT/" 2>/dev/null

# Hugging Face Llama's train step at the issue's shape (4 layers, hidden 2048, L=4096), wavepe's wavelet against
# the stock model (its RoPE, SDPA)
hf=(benchmarks/bench_hf.py --device cuda --families llama --modes wavelet --length 4096 --hidden 2048 --new-tokens 8)
[ $quick = 1 ] && hf=(benchmarks/bench_hf.py --device cuda --quick --families llama --modes wavelet)
stage "${hf[*]}" 240 $PY "${hf[@]}"

# (after the benchmarks, whose own start checks every fused method against the eager one: a lent machine
# that runs out of time still reports the figures the targets are stated in)
stage "pytest -m cuda" 300 $PY -m pytest -q -p no:cacheprovider -m cuda tests/test_cuda.py tests/test_hf.py


if command -v ncu > /dev/null; then
  L=$([ $quick = 1 ] && echo 1024 || echo 8192)
  # pos_enc: the wavelet's (a table: the tensor-core kernels' table instances) or none (their others)
  target() { echo "import torch, wavepe.ops as wo
g = torch.Generator(device='cuda').manual_seed(0)
q, k, v = (torch.randn(1, 32, $L, 128, device='cuda', dtype=torch.bfloat16, generator=g).requires_grad_() for _ in range(3))
out = wo.wavelet_attention(q, k, v, pos_enc='$1')
out.backward(torch.ones_like(out))
torch.cuda.synchronize()"; }
  # (ComputeWorkloadAnalysis: the tensor pipe's and the shared-memory (LSU) pipe's utilisation, the static model's
  # claim to test -- the 16-row main loops move 326-405 bytes of shared memory per HMMA, over the 256 an sm_90 SM
  # serves at the tensor rate, the wide ones 230-256: docs/CUDA.md, "Shared-memory traffic")
  sections=(--section SpeedOfLight --section Occupancy --section LaunchStats --section SchedulerStats
            --section WarpStateStats --section InstructionStats --section ComputeWorkloadAnalysis
            --section MemoryWorkloadAnalysis --section MemoryWorkloadAnalysis_Tables)
  # (the nope forward, dK/dV and dQ at head_dim 128: the wide instances, 32 rows / keys a warp; with the wavelet's
  # table: 16)
  for run in "nope attn_fwd_tc_wide_kernel" "wavelet attn_fwd_tc_kernel" "wavelet attn_bwd_dkdv_tc_kernel" \
             "wavelet attn_bwd_dq_tc_kernel" "nope attn_bwd_dkdv_tc_wide_kernel" "nope attn_bwd_dq_tc_wide_kernel"; do
    set -- $run
    TAIL=120 stage "ncu: $2 (bf16, L=$L, H=32, d=128, causal, $1)" 120 \
      ncu --kernel-name "regex:$2" --launch-count 1 "${sections[@]}" $PY -c "$(target $1)"
  done
  # decoding one token (GQA 32/8, the wavelet's table: its split-KV partials and their combine) and RoPE -- the two
  # memory-bound targets
  N=$([ $quick = 1 ] && echo 4096 || echo 32768)
  decode="import torch, wavepe, wavepe.ops as wo
g = torch.Generator(device='cuda').manual_seed(0)
q = torch.randn(1, 32, 1, 128, device='cuda', dtype=torch.bfloat16, generator=g)
k, v = (torch.randn(1, 8, $N, 128, device='cuda', dtype=torch.bfloat16, generator=g) for _ in range(2))
for _ in range(2): wo.wavelet_attention(q, k, v, wavepe.WaveletConfig.grid(128), q_offset=$N - 1)
torch.cuda.synchronize()"
  rope="import torch, wavepe, wavepe.ops as wo
q, k = (torch.randn(1, 32, $L, 128, device='cuda', dtype=torch.bfloat16) for _ in range(2))
for _ in range(2): wo.rope(q, k, 0, wavepe.RopeConfig())
torch.cuda.synchronize()"
  for run in "decode attn_fwd_tc_kernel" "decode attn_combine_kernel" "rope rope_kernel"; do
    set -- $run
    TAIL=120 stage "ncu: $2 ($1: $([ $1 = rope ] && echo "q and k, bf16, L=$L, H=32, d=128" ||
                                   echo "one query, GQA 32/8, $N keys, bf16, d=128, the wavelet"))" 120 \
      ncu --kernel-name "regex:$2" --launch-skip 1 --launch-count 1 "${sections[@]}" $PY -c "${!1}"
  done
else
  echo "## ncu: not on this machine (Nsight Compute): no per-kernel profile" >> "$report"
fi

echo "[+$(( $(date +%s) - t0 ))s] done: $report" >&2
