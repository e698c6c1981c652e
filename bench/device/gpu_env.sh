# Source on the GPU machine: install the carried packages once, point Python and Vulkan at them.
if [ ! -d /tmp/site/mani_skill ]; then bash bench/device/unpack_carry.sh; fi
export PYTHONPATH="/tmp/site:$PWD" PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
export __EGL_VENDOR_LIBRARY_FILENAMES=/usr/local/nvidia/share/glvnd/egl_vendor.d/10_nvidia.json
