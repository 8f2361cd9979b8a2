"""The MoleculeACE benchmark as one table, every arm on the same shards of each set (`gtscale
moleculeace-table --out DIR [--sets …] [--arms …] [key=value …]`).

    gtscale moleculeace-table --out runs/ace --arms ecfp                         # ECFP + SVR, all 30 sets
    gtscale moleculeace-table --out runs/ace --sets CHEMBL214_Ki CHEMBL234_Ki \\
        --init-from runs/pretrain-descriptors/export/model.pt schedule.total_steps=600

Per set: `gtscale shard moleculeace` (DIR/shards/<set>; an arm with shard options of its own, such
as the features arm's --graph-features, gets DIR/shards/<set>-<arm>), then each arm into
DIR/<set>/<arm>/ as a sweep folder (sweep.json, sweep.md; `gtscale sweep --compare` reads them):

- ecfp: ECFP4 + Tanimoto SVR (members/svr.py), deterministic, so one seed;
- kernel: an SVR on an ECFP4 similarity (Tanimoto or MinMax) plus an RBF kernel on the pretrained
  export's (--init-from) graph representation, the backbone frozen, the similarity, kernel weight
  and C chosen like the SVR's C
  (members/kernel_svr.py), deterministic, one seed; both SVRs choose by 5-fold CV over train
  and valid together and fit on both (svr.SELECTION, the MoleculeACE paper's protocol);
- landmark: the kernel arm's kernel on m landmark molecules with ridge (members/landmark.py, what
  `gtscale fit` runs on large sets), chosen by its own 5-fold CV over train and valid, one seed;
- scratch, finetune, finetune-features: `gtscale sweep` of a training config over --seeds, each
  seed's test metrics at its best-validation checkpoint (configs/tasks/moleculeace-egt-*.yaml;
  --config ARM=YAML replaces one; key=value overrides go to every trained arm, --override
  ARM:key=value to one); with --refit each seed, its step chosen on validation, trains again on
  train ∪ valid for that many steps and that refit is the seed's model (`gtscale sweep --refit`),
  as the SVR arms fit on train ∪ valid;
- ensemble: the mean prediction of the seeds of --ensemble-of (default: the last trained arm);
  with --resplit, seed S > 0 of every trained arm trains on shards of its own
  (DIR/shards/<set>[-<arm>]-split<K>, K = --split-seed + S): the validation split carved with split seed K, so that each seed
  chooses its checkpoint on other molecules and the ensemble has trained on nearly all of the train
  split; the test split is the set's own either way, and the two SVR arms, which cross-validate over
  train ∪ valid, read the shards of --split-seed itself;
- blend: the mean of that ensemble's prediction and ECFP + SVR's, equal weights fixed beforehand
  (nothing is tuned on test, nor on validation); with 3 seeds, `gtscale predict SEED0 SEED1 SEED2
  SVR --weights 1 1 1 3` on the seeds' exports (DIR/<set>/<arm>/seed-S/export) and the SVR's
  (DIR/<set>/ecfp/export) gives it;
- blend-kernel: the same with the kernel SVR in place of ECFP + SVR (DIR/<set>/kernel/export), a
  model of gtscale's own on both sides.

A cell is RMSE / cliff RMSE on the test split (mean over seeds); the last rows are the mean over
sets, the benchmark's headline, and each arm's mean RMSE over ECFP + SVR's. Writes DIR/table.md
and DIR/table.json (per set and arm: mean, std, n of both metrics), prints the Markdown (or the
JSON with --json). An arm whose sweep.json is already there with the same config, overrides and
seeds is read, not run again, so an interrupted table continues where it stopped; one with fewer of
the seeds trains only the seeds it lacks (`--seeds 0` then `--seeds 0 1 2` adds two); a sweep folder
with other settings is an error, never overwritten. The two SVR arms are fitted again (10-60 s a set)
when their folder holds a fit of another selection protocol.
"""

from __future__ import annotations

import contextlib
import json
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from gtscale.config import CONFIG_ROOT
from gtscale.errors import UserError
from gtscale.experiments.ecfp import PREDICTIONS
from gtscale.io import atomic_write_text

TABLE_MD, TABLE_JSON = "table.md", "table.json"
METRICS = ("rmse", "cliff_rmse")


@dataclass(frozen=True)
class Arm:
    """A trained arm: its training YAML and the shard options its shards need beyond the default."""

    config: str
    shard_args: tuple[str, ...] = ()


#: The trained arms. finetune-features takes --graph-features (the option is passed through to
#: `gtscale shard`; --graph-features replaces its value). Its default, the Morgan bits alone, was
#: chosen over Morgan + RDKit 2D by mean best-validation RMSE (docs/results/finetune-budget.md);
#: it also spares a prediction the descriptors, most of a molecule's feature time.
ARMS = {
    "scratch": Arm(str(CONFIG_ROOT / "tasks" / "moleculeace-egt-scratch.yaml")),
    "finetune": Arm(str(CONFIG_ROOT / "tasks" / "moleculeace-egt-finetune.yaml")),
    "finetune-features": Arm(str(CONFIG_ROOT / "tasks" / "moleculeace-egt-finetune.yaml"), ("--graph-features", "morgan2048")),
}
ECFP, KERNEL, LANDMARK, ENSEMBLE, BLEND, BLEND_KERNEL = "ecfp", "kernel", "landmark", "ensemble", "blend", "blend-kernel"
ALL_ARMS = (ECFP, KERNEL, LANDMARK, *ARMS, ENSEMBLE, BLEND, BLEND_KERNEL)
#: A blend column → the SVR arm whose test predictions it averages with the ensemble of seeds.
BLEND_PARTNERS = {BLEND: ECFP, BLEND_KERNEL: KERNEL}
#: A blend's weight on its SVR (the ensemble of seeds has the rest).
BLEND_SVR_WEIGHT = 0.5
FINETUNE_ARMS = ("finetune", "finetune-features")


# --- plan ------------------------------------------------------------------------------------------
def trained_arms(arms: list[str], overrides: list[str] = (), configs: list[str] = (), arm_overrides: list[str] = (),
                 init_from: str | None = None, graph_features: str | None = None) -> dict[str, tuple[Arm, list[str]]]:
    """arm → (Arm with this command's config and shard options, its overrides), for the trained
    arms among `arms`. `configs`: ARM=YAML items (--config); `arm_overrides`: ARM:key=value items
    (--override); `overrides` reach every trained arm, `init_from` the fine-tuned ones."""
    configs = dict(_pair(item, "=", "--config") for item in configs)
    per_arm: dict[str, list[str]] = {}
    for item in arm_overrides:
        arm, override = _pair(item, ":", "--override")
        per_arm.setdefault(arm, []).append(override)
    for arm in [*configs, *per_arm]:
        if arm not in ARMS:
            raise UserError(f"--config / --override: {arm!r} is not a trained arm (one of {', '.join(ARMS)})")
    out = {}
    for name in (a for a in arms if a in ARMS):
        arm = ARMS[name]
        shard_args = arm.shard_args
        if name == "finetune-features" and graph_features:
            shard_args = ("--graph-features", graph_features)
        config = configs.get(name, arm.config)
        if not Path(config).is_file():
            raise UserError(f"--config {name}: {config} not found")
        init = [f"init_from={init_from}"] if init_from and name in FINETUNE_ARMS else []
        out[name] = (Arm(config, shard_args), [*overrides, *init, *per_arm.get(name, [])])
    return out


def _pair(item: str, sep: str, option: str) -> tuple[str, str]:
    if sep not in item:
        raise UserError(f"{option}: {item!r} should look like ARM{sep}…")
    left, right = item.split(sep, 1)
    return left, right


# --- running -------------------------------------------------------------------------------------
def shard_set(name: str, out: Path, split_seed: int, shard_args: list[str]) -> Path:
    """`gtscale shard moleculeace --dataset name` into `out` (a subprocess, like the sweep's runs:
    the sharder resumes, keeping the shards it already verified)."""
    cmd = [sys.executable, "-m", "gtscale.cli", "shard", "moleculeace", "--dataset", name, "--split-seed", str(split_seed),
           "--out", str(out), "--no-progress", *shard_args]
    status = subprocess.run(cmd, stdout=2).returncode  # its report on stderr: stdout is the table
    if status != 0:
        raise UserError(f"moleculeace-table: `{shlex.join(cmd[2:])}` ended with exit status {status} (its message above)")
    return out


def cached_rows(folder: Path, config: str | None, overrides: list[str], seeds: list[int],
                seed_overrides: dict[int, list[str]] | None = None, refit: bool = False) -> list[dict] | None:
    """The rows of `folder`'s sweep.json when it holds this arm with these settings; None when there
    is none yet, or when it holds some of these seeds and not all (the sweep then trains the others,
    its finished runs resuming as finished); a UserError when it holds another (never overwritten).
    `seed_overrides`: run_sweep's, compared seed by seed over the seeds the folder holds; `refit`
    run_sweep's too."""
    from gtscale.sweep import read_rows

    if not (folder / "sweep.json").is_file():
        return None
    rows = read_rows(folder)
    first = rows[0]
    held = [r["seed"] for r in first["runs"]]
    held_own = first.get("seed_overrides", {})
    wanted_own = seed_overrides or {}
    same = (first.get("config") == config and first.get("overrides", []) == overrides and first.get("refit", False) == refit
            and all(held_own.get(str(seed), []) == wanted_own.get(seed, []) for seed in held))
    if same and held == list(seeds):
        return rows
    if same and set(held) < set(seeds):
        return None
    raise UserError(f"{folder}: holds a sweep with other settings (config, overrides, refit or seeds not among {list(seeds)}); "
                    "choose another --out or remove it")


def run_set(name: str, out: Path, columns: list[str], arms: dict[str, tuple[Arm, list[str]]], seeds: list[int], split_seed: int,
            shard_args: str, nproc: int, ensemble_of: str | None, init_from: str | None, resplit: bool = False,
            refit: bool = False) -> dict[str, dict]:
    """Shard one set and run its arms (`columns`: every arm asked for; `arms`: the trained ones,
    trained_arms; `resplit`, `refit`: the command's options); arm → its sweep rows."""
    from gtscale.experiments.ecfp import run_baseline
    from gtscale.sweep import run_sweep

    common = shlex.split(shard_args)
    shards = {(): out / "shards" / name}
    rows: dict[str, list[dict]] = {}
    if {ECFP, KERNEL, LANDMARK} & set(columns) or any(not arm.shard_args for arm, _ in arms.values()):
        shard_set(name, shards[()], split_seed, common)
    if ECFP in columns:
        folder = out / name / ECFP
        cached = cached_rows(folder, None, [], [0])
        # a table before the blend kept no predictions; one before svr.SELECTION chose on valid alone
        fresh = cached is not None and (folder / PREDICTIONS.format(split="test")).is_file() and selected_now(cached)
        rows[ECFP] = cached if fresh else run_baseline(shards[()], folder, [0], ["svr"])
    for kernel_arm in (KERNEL, LANDMARK):
        if kernel_arm in columns:
            rows[kernel_arm] = kernel_rows(shards[()], kernel_backbone(init_from), out / name / kernel_arm, kernel_arm)
    for arm_name, (arm, overrides) in arms.items():
        shard_options = [*common, *arm.shard_args]
        if arm.shard_args not in shards:
            shards[arm.shard_args] = shard_set(name, out / "shards" / f"{name}-{arm_name}", split_seed, shard_options)
        own = {}
        if resplit:  # seed S > 0 trains, and chooses its checkpoint, on the validation split of split seed + S
            for seed in (s for s in seeds if s > 0):
                resplit_shards = Path(f"{shards[arm.shard_args]}-split{split_seed + seed}")
                own[seed] = [f"data.shards={shard_set(name, resplit_shards, split_seed + seed, shard_options)}"]
        folder = out / name / arm_name
        overrides = [f"data.shards={shards[arm.shard_args]}", f"run_dir={folder}", *overrides]
        rows[arm_name] = cached_rows(folder, arm.config, overrides, seeds, own, refit)
        if rows[arm_name] is None:
            print(f"moleculeace-table: {name} {arm_name}", file=sys.stderr, flush=True)
            run_sweep(arm.config, overrides, seeds, nproc, "test", arm_name, seed_overrides=own, refit=refit)
            rows[arm_name] = cached_rows(folder, arm.config, overrides, seeds, own, refit)
    for blend, partner in BLEND_PARTNERS.items():
        if blend in columns:
            rows[blend] = [blend_row(rows[ensemble_of][0], out / name / partner, partner)]
    return rows


def kernel_backbone(init_from: str | None) -> Path:
    """The export the kernel arm reads: --init-from, else the finetune config's init_from."""
    from gtscale.config import load_yaml

    from gtscale.models.pretrained import export_path

    backbone = init_from or load_yaml(ARMS["finetune"].config).get("init_from")
    if not backbone:
        raise UserError("--arms kernel: reads a pretrained export; pass --init-from")
    try:
        return export_path(backbone)
    except UserError as err:
        raise UserError(f"--arms kernel: reads a pretrained export; {err}") from None


def kernel_rows(shards: Path, backbone: Path, folder: Path, arm: str = KERNEL) -> list[dict]:
    """The kernel (or landmark) arm's sweep rows: read back when `folder` holds them for this backbone, else fitted."""
    from gtscale.experiments.kernel_baseline import run_kernel_baseline
    from gtscale.sweep import read_rows

    if (folder / "sweep.json").is_file():
        rows = read_rows(folder)
        if rows[0].get("backbone") != str(backbone):
            raise UserError(f"{folder}: holds the {arm} arm of backbone {rows[0].get('backbone')!r}, not {backbone}; choose another --out or remove it")
        if selected_now(rows):
            return rows
    print(f"moleculeace-table: {shards.name} {arm}", file=sys.stderr, flush=True)
    return run_kernel_baseline(shards, backbone, folder, model=arm)


def selected_now(rows: list[dict]) -> bool:
    """Whether an SVR arm's cached rows were chosen by today's protocol (svr.SELECTION)."""
    from gtscale.members.svr import SELECTION

    return all(run.get("chosen", {}).get("selection") == SELECTION for run in rows[0]["runs"])


def blend_row(seeds_row: dict, svr_folder: Path, svr_arm: str) -> dict:
    """The blend as a sweep row: BLEND_SVR_WEIGHT × the test prediction of `svr_arm` (ECFP or
    KERNEL; its predictions in `svr_folder`) + the rest × the mean of the seeds' (each at its
    best-validation checkpoint), matched by record idx, scored like a run."""
    from gtscale.experiments import kernel_baseline
    from gtscale.members.ensemble import ensemble
    from gtscale.sweep import ensemble_prediction, summarize, with_cliff_rmse
    from gtscale.train.evaluate import run_config
    from gtscale.train.tasks import evaluate

    idx, y_seeds, y_true = ensemble_prediction(seeds_row)
    predictions = {ECFP: PREDICTIONS, KERNEL: kernel_baseline.PREDICTIONS}[svr_arm]
    svr = np.load(svr_folder / predictions.format(split="test"))
    order = np.argsort(svr["idx"])
    at = order[np.searchsorted(svr["idx"], idx, sorter=order)] if len(idx) == len(svr["idx"]) else None
    if at is None or not np.array_equal(svr["idx"][at], idx) or not np.allclose(svr["y_true"][at], y_true, atol=1e-4, equal_nan=True):
        raise UserError(f"{svr_folder}: its SVR scored other test molecules than {seeds_row['runs'][0]['run_dir']}; the blend needs the same set and split")
    y_pred = ensemble(np.stack([y_seeds, svr["y_pred"][at]]), [1.0 - BLEND_SVR_WEIGHT, BLEND_SVR_WEIGHT])[0]
    cfg = run_config(Path(seeds_row["runs"][0]["run_dir"]))
    metrics = with_cliff_rmse(evaluate(y_pred, y_true, cfg.task), cfg.data.shards, "test", idx, y_pred, y_true)
    run = {"seed": "blend", "seeds": [r["seed"] for r in seeds_row["runs"]], "svr_weight": BLEND_SVR_WEIGHT, "metrics": metrics}
    partner = {ECFP: "ECFP4 SVR", KERNEL: "gtscale kernel SVR"}[svr_arm]
    return {"label": f"{seeds_row['label']} ensemble + {partner}", "split": "test", "runs": [run], "summary": summarize([run])}


# --- the table -----------------------------------------------------------------------------------
def cell(rows: list[dict], ensemble: bool = False) -> dict | None:
    """{metric: {mean, std, n}} of an arm's row (the ensemble's: its second row, when there is one)."""
    wanted = [r for r in rows if ("ensemble_of" in r) == ensemble]
    if not wanted:
        return None
    summary = wanted[0]["summary"]
    return {m: summary[m] for m in METRICS if m in summary}


def build_table(per_set: dict[str, dict[str, list[dict]]], columns: list[str], ensemble_of: str | None) -> dict:
    """{"columns", "sets": {set: {column: cell}}, "mean": {column: {metric: mean over sets, sets: n}}}."""
    sets = {}
    for name, rows in per_set.items():
        sets[name] = {}
        for column in columns:
            if column == ENSEMBLE:
                value = cell(per_set[name].get(ensemble_of, []), ensemble=True) if ensemble_of else None
            else:
                value = cell(rows.get(column, []))
            if value:
                sets[name][column] = value
    mean = {}
    for column in columns:
        present = [sets[s][column] for s in sets if column in sets[s]]
        if present:
            mean[column] = {m: float(np.mean([c[m]["mean"] for c in present if m in c])) for m in METRICS if any(m in c for c in present)}
            mean[column]["sets"] = len(present)
    return {"columns": columns, "ensemble_of": ensemble_of, "sets": sets, "mean": mean}


def column_label(column: str, ensemble_of: str | None) -> str:
    return {ECFP: "ECFP4 + SVR", KERNEL: "ECFP4 + gtscale kernel SVR", LANDMARK: "ECFP4 + gtscale landmark kernel ridge",
            ENSEMBLE: f"ensemble ({ensemble_of})", BLEND: f"blend (ensemble of {ensemble_of} + SVR)",
            BLEND_KERNEL: f"blend (ensemble of {ensemble_of} + kernel SVR)"}.get(column, column)


def markdown(table: dict) -> str:
    columns = table["columns"]
    labels = [column_label(c, table["ensemble_of"]) for c in columns]
    each_split = (", each seed on its own validation split" if table.get("resplit") else "") + (
        ", each seed refitted on train ∪ valid for its best-validation step count" if table.get("refit") else "")
    lines = [f"RMSE / cliff RMSE on each set's test split (trained arms: mean over seeds{each_split})", "",
             "| set | " + " | ".join(labels) + " |", "|---|" + "---:|" * len(columns)]

    def fmt(c: dict | None) -> str:
        if not c:
            return "–"
        return " / ".join(f"{c[m]['mean']:.3f}" if isinstance(c[m], dict) else f"{c[m]:.3f}" for m in METRICS if m in c)

    for name, cells in table["sets"].items():
        lines.append(f"| {name} | " + " | ".join(fmt(cells.get(c)) for c in columns) + " |")
    mean = table["mean"]
    counts = sorted({m["sets"] for m in mean.values()})
    cells = (fmt({k: v for k, v in mean[c].items() if k in METRICS}) if c in mean else "–" for c in columns)
    lines.append(f"| **mean over {'/'.join(map(str, counts))} sets** | " + " | ".join(cells) + " |")
    if ECFP in mean and "rmse" in mean[ECFP]:
        base = mean[ECFP]["rmse"]
        lines.append("| mean RMSE ÷ ECFP4 + SVR's | " + " | ".join(f"{mean[c]['rmse'] / base:.3f}" if c in mean and "rmse" in mean[c] else "–" for c in columns) + " |")
    return "\n".join(lines) + "\n"


def moleculeace_table(out: Path, *, sets: list[str] | None = None, arms: list[str] = ALL_ARMS, seeds: list[int] = (0, 1, 2),
                      split_seed: int = 0, overrides: list[str] = (), configs: list[str] = (), arm_overrides: list[str] = (),
                      init_from: str | None = None, graph_features: str | None = None, ensemble_of: str | None = None,
                      shard_args: str = "", nproc: int = 1, resplit: bool = False, refit: bool = False) -> dict:
    """Every arm of `arms` on every MoleculeACE set of `sets` (default: all the package bundles),
    into `out`; the table (build_table), also written as TABLE_JSON and TABLE_MD. The options are
    the command's (module docstring; trained_arms)."""
    from gtscale.prep.sources.moleculeace import available

    arms, seeds = list(arms), list(seeds)
    if nproc < 1:
        raise UserError(f"--nproc must be >= 1, got {nproc}")
    if len(set(seeds)) != len(seeds) or any(s < 0 for s in seeds):
        raise UserError(f"--seeds: {seeds} must be distinct whole numbers >= 0")
    known = available()
    sets = sets or known
    unknown = [s for s in sets if s not in known]
    if unknown:
        raise UserError(f"--sets: {unknown[0]!r} is not a MoleculeACE set (one of: {', '.join(known)})")
    trained = trained_arms(arms, list(overrides), list(configs), list(arm_overrides), init_from, graph_features)
    ensemble_of = ensemble_of or (list(trained)[-1] if trained else None)
    for derived in (ENSEMBLE, *BLEND_PARTNERS):
        if derived in arms and ensemble_of not in trained:
            raise UserError(f"--arms {derived}: averages the seeds of a trained arm; add {ensemble_of or 'one'} to --arms (or choose --ensemble-of)")
    for blend, partner in BLEND_PARTNERS.items():
        if blend in arms and partner not in arms:
            raise UserError(f"--arms {blend}: averages the ensemble with {column_label(partner, None)}; add {partner} to --arms")
    if {KERNEL, LANDMARK} & set(arms):
        kernel_backbone(init_from)  # refused before any set is sharded
    with contextlib.redirect_stdout(sys.stderr):  # progress and the sweeps' reports: stdout is the table
        per_set = {name: run_set(name, out, arms, trained, seeds, split_seed, shard_args, nproc, ensemble_of, init_from, resplit, refit)
                   for name in sets}
    table = build_table(per_set, arms, ensemble_of if {ENSEMBLE, *BLEND_PARTNERS} & set(arms) else None) | {"resplit": resplit, "refit": refit}
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_text(out / TABLE_JSON, json.dumps(table, indent=1))
    atomic_write_text(out / TABLE_MD, markdown(table))
    return table
