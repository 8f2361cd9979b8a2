"""Which model's graph representation `gtscale fingerprint` writes for the export it is named: a
model export's own, a kernel SVR's or landmark kernel export's backbone's, a shipped backbone's by name (`moses-egt`, as
`--init-from` takes it), or of an export of several (`gtscale fit`'s DIR/export and
DIR/members/*: ensemble.json or targets.json) the one representation its members have: the kernel
members of one fit all carry the same backbone. Members with different representations (fine-tuned
seeds) are refused in one line listing them, to name one; members without one (ECFP + SVR) are
passed over, and an export of those alone is refused.
"""

from __future__ import annotations


import torch

from gtscale.errors import UserError
from gtscale.inference import LoadedExport


def representation_model(value: str) -> LoadedExport:
    """The model whose representation is written for the export `value` names (module docstring)."""
    from gtscale.members.load import FingerprintMember, KernelMember, load_members
    from gtscale.models.pretrained import export_path
    from gtscale.predict import not_a_fit_folder

    path = not_a_fit_folder(export_path(value))
    members, _ = load_members(path)
    found = [member for top in members for member in leaves(top)]
    models = [m.backbone if isinstance(m, KernelMember) else m for m in found if not isinstance(m, FingerprintMember)]
    if not models:
        if len(found) == 1:
            raise UserError(f"{found[0].path}: an ECFP + SVR (SVC) export has no graph representation; name a model export "
                            "(or a kernel SVR export: its backbone's)")
        raise UserError(f"{path}: none of its members has a graph representation (ECFP + SVR alone); name a model export or a kernel SVR export")
    different = [m for m in models[1:] if not same_representation(models[0], m)]
    if different:
        names = ", ".join(str(m.path) for m in [models[0], *different][:4])
        raise UserError(f"{path}: its members have different graph representations ({names}); name the one export folder to read")
    return models[0]


def leaves(member) -> list:
    """The members a targets export is made of (each part's), or the member itself."""
    parts = getattr(member, "parts", None)
    if parts is None:
        return [member]
    return [leaf for members, _ in parts for m in members for leaf in leaves(m)]


def same_representation(a: LoadedExport, b: LoadedExport) -> bool:
    """The same molecules give the same representation: the same featurisation and backbone weights."""
    if a.options != b.options or a.keys != b.keys or a.path_dist != b.path_dist:
        return False
    state_a, state_b = backbone_state(a), backbone_state(b)
    return state_a.keys() == state_b.keys() and all(torch.equal(state_a[k], state_b[k]) for k in state_a)


def backbone_state(model: LoadedExport) -> dict[str, torch.Tensor]:
    backbone = getattr(model.model, "backbone", model.model)
    return backbone.state_dict()
