"""Importing gtscale and the parts of ogb it uses reaches no network: ogb's import-time version
check (a thread asking the package index for a newer ogb) never starts, and ogb's functions work."""

from __future__ import annotations

import subprocess
import sys

PROBE = """
import socket, sys, threading, time
attempts = []
def refuse(*args, **kwargs):
    attempts.append(args)
    raise OSError("network refused by the test")
socket.socket.connect = refuse
socket.create_connection = refuse
socket.getaddrinfo = refuse
import gtscale
from ogb.utils import smiles2graph
from ogb.graphproppred import Evaluator
from gtscale.prep.featurize import parse_smiles
time.sleep(0.5)  # a version check's thread would have tried by now
graph = smiles2graph("CCO")
print(len(attempts), "outdated" in sys.modules, threading.active_count(), graph["num_nodes"])
"""


def test_importing_gtscale_and_ogb_asks_no_one_for_anything():
    result = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    attempts, outdated_imported, threads, atoms = result.stdout.split()
    assert attempts == "0" and outdated_imported == "False" and atoms == "3", result.stdout + result.stderr
