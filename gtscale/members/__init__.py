"""The members of an ensemble and the ensemble itself, below predict and fit, which read, fit and
average them, and the tables of experiments/, which score them.

- load.py: the member protocol and the loaders that read any export folder as a member (a
  fine-tuned model is inference.LoadedExport; the others are defined here);
- ensemble.py: the one weighted mean and spread of several members' outputs;
- fingerprints.py: ECFP4 of molecules and the similarities of fingerprints (Tanimoto, MinMax);
- svr.py: the ECFP4 + Tanimoto SVR (SVC) member: fitted, exported, read back;
- kernel_svr.py: the SVR (SVC) on a fingerprint similarity and a backbone's representation;
- landmark.py: the same kernel on m landmark molecules, with ridge: linear in molecules, one model
  of every target column.

Each member kind is a module of its own beside these.
"""
