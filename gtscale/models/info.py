"""A model config's architecture summary and parameter count (`gtscale model-info CONFIG`).

CONFIG is a YAML path or the name of a file in configs/models/ (egt-small). The count is given per
top-level module of the model, for the head of the YAML's `head` section, and in total — the total
is the figure the papers report.
"""

from __future__ import annotations

from torch import nn

from gtscale.config import to_dict
from gtscale.models import build_head, build_model, load_model_config, parse_model_config


def _count(module: nn.Module) -> int:
    return sum(p.numel() for p in module.parameters())


def parameter_table(model: nn.Module, head: nn.Module | None) -> list[tuple[str, int]]:
    """(name, parameters) per top-level child of the model (and its own direct parameters), the
    head, and the total."""
    rows = [(name, _count(child)) for name, child in model.named_children() if _count(child)]
    rows += [(name, p.numel()) for name, p in model.named_parameters(recurse=False)]
    if head is not None:
        rows.append(("head", _count(head)))
    rows.append(("total", _count(model) + (_count(head) if head is not None else 0)))
    return rows


def print_model_info(config: str) -> None:
    """Print the architecture summary and parameter table of the model config `config` (a YAML
    path or a name in configs/models/)."""
    cfg = load_model_config(config)
    typed = parse_model_config(cfg)
    model = build_model(cfg)
    head = build_head(cfg["head"], model) if cfg.get("head") else None
    print(f"model: {cfg['name']} ({config})")
    for key, value in to_dict(typed).items():
        print(f"  {key}: {value}")
    if head is not None:
        print(f"head: {to_dict(head.cfg)}")
    print(f"outputs: node {model.node_dim}, edge {model.edge_dim or '-'}, graph {model.graph_dim}")
    print(f"batch fields read: {', '.join(model.batch_fields)}")
    first, last = model.layers[0], model.layers[-1]
    print(f"layer 1 of {len(model.layers)}, {_count(first):,} parameters:")
    print("  " + repr(first).replace("\n", "\n  "))
    if _count(last) != _count(first):
        print(f"last layer: {_count(last):,} parameters (no edge update: its output would be unused)")
    print(f"{'module':<24}{'parameters':>14}")
    for name, count in parameter_table(model, head):
        print(f"{name:<24}{count:>14,}")
