"""The `cluster` fixture (cluster.py) for every test in this folder."""

from cluster import cluster  # noqa: F401  (a fixture: pytest finds it here)
