#!/usr/bin/env bash
# Builds, on this machine, what a device call carries for the GPU image (benchmarks/device_env.sh
# reads it there): run once per checkout, from its root, then name `.whl` and `.sandbox-bin` in
# every device call's carry (each call sends the tree again; a path it does not carry is gone
# there, also under a job that an earlier call left running).
#   .whl/site312.tar.xz   requirements.txt's packages for the image's Python 3.12, less torch,
#                         triton, numpy, litellm and ncu-report (device_env.sh says why), plotly
#                         (the pages draw with the vendored plotly.js; no Python code imports it:
#                         3.8 MB that let the CUTLASS wheel fit one call's carry) and the packages
#                         the image already has; packed at the archive's root
#   .whl/nvidia_cutlass-4.2.0.0-py3-none-any.whl   the CUTLASS headers
#   .sandbox-bin/bwrap    Debian's bubblewrap (the image has none), from `make sandbox-deps`
set -euo pipefail
cd "$(dirname "$0")/.."
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
platforms=()
for p in manylinux_2_28_x86_64 manylinux_2_27_x86_64 manylinux_2_24_x86_64 manylinux_2_17_x86_64 \
    manylinux2014_x86_64 manylinux_2_5_x86_64 manylinux1_x86_64; do
    platforms+=(--platform "$p")
done
py312=(--python-version 3.12 --implementation cp --only-binary=:all: "${platforms[@]}")
grep -Ev '^(#|$|torch=|triton=|numpy=|litellm=|ncu-report=|plotly=)' requirements.txt >"$work/req.txt"
python3 -m pip download -q "${py312[@]}" -d "$work/dl" -r "$work/req.txt"
# What the image has (KINDS.md's package list) or does not need: cutlass travels as its wheel.
# (Each one left out keeps the tracked tree, .whl and a library archive under one call's 64 MiB.)
skip='^(numpy|scipy|cuda_|networkx|nvidia_cutlass|attrs|anyio|certifi|charset_normalizer|click-'
skip+='|h11|httpcore-|httpx-|idna|msgpack|narwhals|packaging|pyparsing|python_dateutil|requests-2'
skip+='|six|typing_extensions|urllib3|xxhash|pydot|treelib|ninja|pygments|pyyaml|markupsafe|jinja2'
skip+='|psutil|filelock|tqdm|regex-)'
mapfile -t wheels < <(cd "$work/dl" && ls -- *.whl | grep -Eiv "$skip")
(cd "$work/dl" && python3 -m pip install -q --no-index --no-deps --no-compile --target "$work/site" \
    "${py312[@]}" "${wheels[@]}")
mkdir -p .whl .sandbox-bin
cp "$work"/dl/nvidia_cutlass-4.2.0.0-py3-none-any.whl .whl/
tar -C "$work/site" -cf - . | xz -T0 -6 >.whl/site312.tar.xz
make -s sandbox-deps
cp "$(command -v bwrap)" .sandbox-bin/
du -sh .whl .sandbox-bin
