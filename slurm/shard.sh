#!/usr/bin/env bash
# Submit an array sharding run and its merge, chained: the merge starts once every part succeeded.
#
#   slurm/shard.sh PARTS DATASET ROOT|- OUT [gtscale shard options...]
#   slurm/shard.sh 16 pcqm4mv2 /data/ogb /scratch/pcqm
#   GTSCALE_SBATCH_ARGS="--partition=cpu --cpus-per-task=32 --time=2:00:00" slurm/shard.sh 16 ogbg-molpcba /data/ogb /scratch/molpcba
#
# GTSCALE_SBATCH_ARGS go to the array job only (the merge needs one CPU for a minute). Prints the
# two job ids; logs land in the current folder (gtscale-shard-<job>_<task>.out, gtscale-merge-<job>.out).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
if [ $# -lt 4 ]; then
  sed -n '2,9p' "$0" >&2
  exit 2
fi
parts="$1"; shift
[[ "$parts" =~ ^[1-9][0-9]*$ ]] || { echo "shard.sh: PARTS must be a positive integer, got '$parts'" >&2; exit 2; }
out="$3"
export GTSCALE_REPO="${GTSCALE_REPO:-$(dirname "$here")}"
read -r -a sbatch_args <<<"${GTSCALE_SBATCH_ARGS:-}"
array_id="$(sbatch --parsable --array="0-$((parts - 1))" "${sbatch_args[@]}" "$here/shard-array.sbatch" "$@")"
array_id="${array_id%%;*}"
merge_id="$(sbatch --parsable --dependency="afterok:$array_id" --kill-on-invalid-dep=yes "$here/shard-merge.sbatch" "$out")"
merge_id="${merge_id%%;*}"
echo "array job $array_id ($parts parts), merge job $merge_id (afterok:$array_id)"
echo "watch: squeue -j $array_id,$merge_id    manifest: $out/manifest.json"
