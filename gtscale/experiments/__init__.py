"""Experiments on top of the core: the ECFP baselines (ecfp.py) and the kernel SVR's
(kernel_baseline.py) on any shard folder, and the MoleculeACE table (moleculeace_table.py), as
rows of the sweep tables (gtscale/sweep.py). Their models are the members of members/. Like
bench/, this package sits above the data path and the prediction path: it may import them, none of
them imports it."""
