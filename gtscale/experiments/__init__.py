"""Experiments on top of train/ and prep/: seed sweeps with result tables (sweep.py), the ECFP
baselines (ecfp.py) and MoleculeACE's activity-cliff metric (moleculeace.py). Like bench/, this
package sits above the data path: it may import every other package, none imports it."""
