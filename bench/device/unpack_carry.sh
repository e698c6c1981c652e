#!/usr/bin/env bash
# On the GPU machine: install what pack_carry.sh packed into /tmp/site and the GL/Vulkan loaders.
set -euo pipefail
cd "$(dirname "$0")/../.."
for deb in .carry/gl/*.deb; do dpkg -x "$deb" /; done
ldconfig
site=/tmp/site
mkdir -p "$site"
python3 -m pip install -q --no-index --no-deps --no-compile --target "$site" .carry/wheels/*.whl
tar -xJf .carry/sapien.tar.xz -C "$site"
# mani_skill.utils.visualization imports IPython.display at import time; nothing here uses it.
mkdir -p "$site/IPython"
printf "version_info = (8, 24)  # matplotlib skips its IPython hooks from 8.24 on\n" > "$site/IPython/__init__.py"
printf 'def display(*args, **kwargs):\n    pass\n\n\nclass HTML(str):\n    pass\n' > "$site/IPython/display.py"
