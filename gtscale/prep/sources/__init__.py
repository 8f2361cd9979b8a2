"""Readers of molecule datasets in their real layouts, one module per source; prep/datasets.py
chooses one by name."""
