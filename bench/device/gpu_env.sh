# Source on the GPU machine: install the carried packages once, point Python and Vulkan at them.
# RPENT_DRY_RUN=1 (a CPU machine with a venv at RPENT_VENV, default .venv): run the same job
# small, on the CPU, as a check (this checkout's code first on the path).
# RPENT_INSTALLED=1 (a GPU machine of your own, RPent and its extras installed): the python3 on
# the PATH, GPU rendering and features, nothing unpacked.
if [ "${RPENT_DRY_RUN:-0}" = 1 ]; then
  venv="${RPENT_VENV:-$PWD/.venv}"
  export PATH="$venv/bin:$PATH" PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1
  export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
  python3() { "$venv/bin/python" "$@"; }
  RENDER=cpu DEVICE=cpu
elif [ "${RPENT_INSTALLED:-0}" = 1 ]; then
  export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1
  RENDER=gpu DEVICE=cuda
else
  if [ ! -d /tmp/site/mani_skill ]; then bash bench/device/unpack_carry.sh; fi
  export PYTHONPATH="/tmp/site:$PWD" PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1
  export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
  export __EGL_VENDOR_LIBRARY_FILENAMES=/usr/local/nvidia/share/glvnd/egl_vendor.d/10_nvidia.json
  RENDER=gpu DEVICE=cuda
fi
# Run one CUDA test file into LOG (appended); print FLAG, the option that turns its CUDA graphs
# off in the runs after it, when the file fails.
cuda_check() {  # test file, flag, log
  python3 -m pytest -q -rs -p no:cacheprovider "$1" >> "$3" 2>&1 || printf '%s ' "$2"
}
progress_free() { tr '\r' '\n' | grep -v -e "it/s\]$" -e "s/it\]$" -e "it/s, .*\]$"; }
# The Stage 1 checkpoint a Stage 2 job uses: stage1_peg.sh's on a still-warm machine, else the
# embedded default.
stage1_checkpoint() {
  if [ -f /tmp/ckpt/model.safetensors ]; then echo /tmp/ckpt; else echo rpent_agents/features/default_checkpoint; fi
}
