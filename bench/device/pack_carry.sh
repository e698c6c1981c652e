#!/usr/bin/env bash
# Pack what a GPU-machine run needs into .carry/ (git-ignored, ~44 MB), for the `device` tool.
# The GPU machine has torch/numpy/scipy/tensorboard/safetensors but no registry: ManiSkill,
# SAPIEN and their small pure-Python needs travel here. SAPIEN is carried as a trimmed tar.xz
# (no C++ headers, no CUDA denoiser, no stereo pattern: 30 MB instead of 51 MB).
# On the device: bash bench/device/unpack_carry.sh && export PYTHONPATH=/tmp/site:$PWD
# A device call carries the work tree and the carry, 64 MiB in all: the tracked tree is ~36 MB
# (the default checkpoint 17.8 MB, the default actor 9.8 MB, bench/figures ~6 MB), .carry
# 44 MB. Move bench/figures, docs/images and rpent_agents/stage2/default_actor/weights.pt out of
# the tree for the call (Stage 1/2 jobs read none of them); a job that acts with the default
# actor (flywheel_gain.sh) does not fit beside .carry: give it STAGE2_RUN, an actor's
# weights.pt already on the machine (a Stage 2 run of the same lease).
#   bash bench/device/pack_carry.sh      # .carry/: ManiSkill, SAPIEN, GL loaders (Stage 1/2 jobs)
#   bash bench/device/pack_carry.sh pi   # .carry_pi/: LeRobot's PI05 stack (featurize.sh,
#                                        # pi05_fast_path.sh)
#   bash bench/device/pack_carry.sh ray  # .carry_ray/: Ray core, trimmed (ray_vs_vector.sh)
set -euo pipefail
cd "$(dirname "$0")/../.."
download() {
  .venv/bin/python -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
    --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux2014_x86_64 -d "$1" "${@:2}"
}
if [ "${1:-}" = pi ]; then
  # The GPU machine has transformers 5.17 and tokenizers 0.23.2; lerobot 0.6.1 wants < 5.6.
  # av and datasets are optional imports of the policy code: left out (~120 MB). openpi-client,
  # websockets and tyro: the feature server path of bench/featurize.py (1 MB).
  rm -rf .carry_pi && mkdir -p .carry_pi
  download .carry_pi lerobot==0.6.1 transformers==5.5.4 tokenizers==0.22.2 draccus==0.11.6 \
    mergedeep toml termcolor gymnasium==1.4.0 farama-notifications openpi-client==0.1.2 \
    websockets==17.4 msgpack==1.2.4 tyro==1.0.17 docstring_parser typeguard
  du -sh .carry_pi
  exit 0
fi
if [ "${1:-}" = ray ]; then
  # The ray wheel (79 MB) is more than one call carries: keep Ray core (the raylet, the GCS
  # server, _raylet.so) and drop its Java jar, its libraries (RLlib, Data, Serve, Train, Tune,
  # LLM, workflows) and the dashboard's web build: 28 MB as tar.xz. Its dependencies travel as
  # wheels; unpack_carry.sh installs those the machine lacks.
  rm -rf .carry_ray && mkdir -p .carry_ray/wheels
  tmp=$(mktemp -d)
  download "$tmp" "ray==$(.venv/bin/python -c 'import ray; print(ray.__version__)')"
  (cd "$tmp" && unzip -q ray-*.whl && rm ray-*.whl)
  rm -rf "$tmp"/ray/{jars,rllib,data,serve,train,tune,llm,workflow,dashboard/client/build}
  find "$tmp/ray" -name "*.map" -delete
  tar -cf - -C "$tmp" . | xz -T2 -6 > .carry_ray/ray.tar.xz
  download .carry_ray/wheels click filelock jsonschema jsonschema-specifications referencing \
    rpds-py attrs msgpack packaging protobuf pyyaml requests urllib3 idna charset-normalizer certifi
  rm -rf "$tmp"
  du -sh .carry_ray
  exit 0
fi
out=.carry
rm -rf "$out" && mkdir -p "$out/gl"
tmp=$(mktemp -d)
mkdir "$tmp/wheels"
download "$tmp/wheels" gymnasium==1.4.0 farama-notifications dacite transforms3d trimesh==5.2.0 \
  pytorch_kinematics==0.7.6 arm_pytorch_utilities pytorch_seed defusedxml tyro==1.0.17 \
  docstring_parser typeguard pyperclip stable-baselines3==2.9.2
download "$tmp" sapien==3.0.3 mani-skill==3.0.1
python3 ../shared/tools/slim_maniskill_wheel.py "$tmp"/mani_skill-*.whl "$tmp/wheels" >/dev/null
# The pure-Python wheels travel installed and xz-packed (1.8 MB less than the wheels: the tree
# and .carry must fit in one call's 64 MiB with the embedded checkpoint and actor).
.venv/bin/python -m pip install -q --no-deps --no-compile --target "$tmp/site" "$tmp"/wheels/*.whl
tar -cf - -C "$tmp/site" . | xz -T2 -6 > "$out/site.tar.xz"
mkdir "$tmp/sapien" && (cd "$tmp/sapien" && unzip -q "$tmp"/sapien-*.whl)
rm -rf "$tmp"/sapien/sapien/include "$tmp"/sapien/sapien/oidn_library/libOpenImageDenoise_device* \
  "$tmp"/sapien/sapien/sensor/assets/patterns/d415.png "$tmp"/sapien/sapien/vulkan_library/*.dylib
tar -cf - -C "$tmp/sapien" . | xz -T2 -6 > "$out/sapien.tar.xz"
o='-oAPT::Architecture=amd64 -oAPT::Architectures=amd64 -oDir::State::Lists=/tmp/amd64'
mkdir -p /tmp/amd64/partial && apt-get $o update -q >/dev/null
(cd "$out/gl" && apt-get $o download -q libvulkan1 libegl1 libglvnd0 libopengl0 libgl1 libglx0 libgles2 2>/dev/null)
rm -rf "$tmp"
du -sh "$out"
