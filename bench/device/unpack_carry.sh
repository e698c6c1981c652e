#!/usr/bin/env bash
# On the GPU machine: install what pack_carry.sh packed into /tmp/site and the GL/Vulkan loaders.
#   bash bench/device/unpack_carry.sh       # .carry
#   bash bench/device/unpack_carry.sh ray   # .carry_ray: Ray core, and those of its needs missing
set -euo pipefail
cd "$(dirname "$0")/../.."
site=/tmp/site
if [ "${1:-}" = ray ]; then
  mkdir -p "$site"
  tar -xJf .carry_ray/ray.tar.xz -C "$site"
  # wheel file prefix -> import name; a module the machine has already stays as it is
  for pair in click:click filelock:filelock jsonschema-:jsonschema \
    jsonschema_specifications:jsonschema_specifications referencing:referencing rpds_py:rpds \
    attrs:attrs msgpack:msgpack packaging:packaging protobuf:google.protobuf pyyaml:yaml \
    PyYAML:yaml requests:requests urllib3:urllib3 idna:idna charset_normalizer:charset_normalizer \
    certifi:certifi; do
    prefix=${pair%%:*} module=${pair#*:}
    for wheel in .carry_ray/wheels/"${prefix}"*.whl; do
      [ -f "$wheel" ] || continue
      python3 -c "import $module" 2>/dev/null \
        || python3 -m pip install -q --no-index --no-deps --no-compile --target "$site" "$wheel"
    done
  done
  exit 0
fi
for deb in .carry/gl/*.deb; do dpkg -x "$deb" /; done
ldconfig
mkdir -p "$site"
tar -xJf .carry/site.tar.xz -C "$site"
tar -xJf .carry/sapien.tar.xz -C "$site"
# mani_skill.utils.visualization imports IPython.display at import time; nothing here uses it.
mkdir -p "$site/IPython"
printf "version_info = (8, 24)  # matplotlib skips its IPython hooks from 8.24 on\n" > "$site/IPython/__init__.py"
printf 'def display(*args, **kwargs):\n    pass\n\n\nclass HTML(str):\n    pass\n' > "$site/IPython/display.py"
