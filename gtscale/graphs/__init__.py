"""Huge graphs (issue 10): sources, an on-disk CSR store built out of core, and samplers.

Imports gtscale.format and gtscale.prep's structure functions only; the CLI and bench import it.
"""
