"""`gtscale model-info CONFIG`: a model config's architecture summary and parameter count (models/info.py)."""

from __future__ import annotations

import argparse

from gtscale.models.info import print_model_info

def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("config", help="model YAML, or a name in configs/models/ such as egt-small")


def run(args: argparse.Namespace) -> int:
    print_model_info(args.config)
    return 0
