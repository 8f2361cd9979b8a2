"""`python -m gtscale.cli …` (what torchrun, launch/train and the sweep's subprocesses start)."""

import gc
import sys

from gtscale.cli import main

status = main()
# The interpreter's last garbage collection at exit walks every object torch, DeepSpeed and the
# run left behind: ~3 s per training rank on 2 busy cores, after all work is done and flushed.
# Frozen objects are skipped by it; the OS reclaims the memory. (Process entry only: an
# in-process main() keeps the caller's collector as it was.)
gc.freeze()
sys.exit(status)
