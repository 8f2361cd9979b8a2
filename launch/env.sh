# Sourced by launch/quickstart and launch/test: create (once) and activate the virtual environment.
#
# Re-running is cheap: the install is skipped while pyproject.toml is unchanged (a stamp file in the
# venv records its hash). GTSCALE_VENV chooses another location.
#
# torch: any torch already importable in the venv is kept (on a GPU cluster, install your CUDA build
# first; see README). Otherwise torch==2.13.0 is installed from pip's configured index; PyPI's Linux
# wheel of it is the CUDA build, so on a stock CPU-only machine set GTSCALE_TORCH_INDEX to PyTorch's
# CPU wheel index (README) to get the CPU build.
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="${GTSCALE_VENV:-$repo/.venv}"
python="${PYTHON:-python3}"

if [ ! -x "$venv/bin/python" ]; then
  echo "[gtscale] creating virtual environment in $venv"
  "$python" -m venv "$venv"
fi
# shellcheck disable=SC1091
. "$venv/bin/activate"

stamp="$venv/.gtscale-installed"
want="$(sha256sum "$repo/pyproject.toml" | cut -d' ' -f1)"
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
  echo "[gtscale] installing dependencies (once; a few minutes)"
  python -m pip install -q --upgrade pip
  if ! python -c "import torch" 2>/dev/null; then
    python -m pip install -q "torch==2.13.0" ${GTSCALE_TORCH_INDEX:+--index-url "$GTSCALE_TORCH_INDEX"}
  fi
  python -m pip install -q -e "$repo[test]"
  # the moleculeace extra without its dependencies: gtscale reads only the package's CSVs
  python -m pip install -q --no-deps "moleculeace>=3.0,<4"
  # the moses extra the same way: gtscale reads only the CSVs molsets ships (MOSES)
  python -m pip install -q --no-deps "molsets==0.3.1"
  echo "$want" > "$stamp"
fi
cd "$repo"
