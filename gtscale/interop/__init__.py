"""Interoperability with the authors' code: `gtscale import-checkpoint` turns a checkpoint of
microsoft/Graphormer (fairseq) or shamim-hussain/egt_pytorch into a gtscale export (model.pt +
model.yaml, as `gtscale export` writes them) whose model computes the original model's outputs.

- unpickle.py: reads a foreign checkpoint without running any of its code;
- mapping.py: the key bookkeeping every importer shares (unknown and missing keys are errors);
- graphormer.py, egt.py: one importer per format, each naming the conventions it converts;
- import_checkpoint.py: a checkpoint → an export, for `gtscale import-checkpoint` (gtscale/cli/import_checkpoint.py;
  the export itself is gtscale.models.export's, shared with `gtscale export`).

May import models and format (tests/test_layout.py); train never imports this package.
"""
