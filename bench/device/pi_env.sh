# Source on the GPU machine: install .carry_pi (bash bench/device/pack_carry.sh pi) once into
# /tmp/site_pi and point Python at it.
site=/tmp/site_pi
if [ ! -d "$site/openpi_client" ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --target "$site" .carry_pi/*.whl
fi
export PYTHONPATH="$site:$PWD" PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1
