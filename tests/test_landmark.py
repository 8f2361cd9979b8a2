"""The landmark kernel model: ridge on Nyström features of the kernel SVR's kernel. With every
fitted molecule a landmark it is kernel ridge regression on that kernel (scikit-learn's Ridge on
any factor of it gives the same predictions); with fewer landmarks its kernel is exact wherever
one side is a landmark; several target columns with blank cells fit as each column alone; its
export predicts through `gtscale predict`'s members what the model predicts, and a tampered one is
one line."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from sklearn.linear_model import Ridge

from gtscale.errors import UserError
from gtscale.members.fingerprints import ecfp
from gtscale.members.kernel_svr import combined
from gtscale.inference import Molecules
from gtscale.members.landmark import Choice, LandmarkKernel, fit_landmark, read_landmark_export, write_landmark_export
from gtscale.members.load import KernelMember, load_members
from gtscale.models.export import MODEL_FILE, read_export
from gtscale.prep.sources.bundled import read_nci_tpsa


@pytest.fixture(scope="module")
def molecules():
    """(SMILES, ECFP4 counts, a 16-wide stand-in for a backbone's representation, TPSA and a second
    column standardised) of 260 NCI molecules."""
    table = read_nci_tpsa()
    smiles = table.smiles[:260]
    counts = ecfp(smiles, counts=True)
    rng = np.random.default_rng(0)
    tpsa = table.targets[:260, 0].astype(np.float64)
    z = np.c_[tpsa[:, None] + rng.normal(size=(260, 1)), rng.normal(size=(260, 15))]
    y = np.c_[(tpsa - tpsa.mean()) / tpsa.std(), counts[:, :64].sum(1) / 10.0]
    return smiles, counts, z, y


def test_with_every_molecule_a_landmark_it_is_kernel_ridge_on_the_kernel(molecules):
    _, counts, z, y = molecules
    fit_rows, new = slice(0, 200), slice(200, 260)
    choice = Choice("minmax", 0.5, np.array([0.3]), np.array([np.nan]), None)
    model = fit_landmark(counts[fit_rows], z[fit_rows], y[fit_rows, :1], choice=choice, landmarks=500)
    assert len(model.kernel.counts) == 200  # every fitted molecule
    kernel = model.kernel
    zs = (z - kernel.z_mean) / kernel.z_std
    k_train = combined(counts[fit_rows], zs[fit_rows], counts[fit_rows], zs[fit_rows], 0.5, kernel.gamma, "minmax")
    values, vectors = np.linalg.eigh(k_train)
    keep = values > 1e-9 * values[-1]
    factor = vectors[:, keep] / np.sqrt(values[keep])  # any Φ with Φ Φᵀ = K on the fitted molecules
    phi = k_train @ factor
    phi_new = combined(counts[new], zs[new], counts[fit_rows], zs[fit_rows], 0.5, kernel.gamma, "minmax") @ factor
    oracle = Ridge(alpha=0.3).fit(phi, y[fit_rows, 0]).predict(phi_new)
    np.testing.assert_allclose(model.predict(counts[new], z[new])[:, 0], oracle, rtol=1e-6, atol=1e-8)


def test_fewer_landmarks_keep_the_kernel_exact_where_one_side_is_a_landmark(molecules):
    _, counts, z, y = molecules
    model = fit_landmark(counts, z, y[:, :1], landmarks=40, search=120)
    kernel, projection = model.kernel, model.kernel.feature_map()
    phi_all, phi_landmarks = kernel(counts, z) @ projection, kernel(kernel.counts, kernel.z * kernel.z_std + kernel.z_mean) @ projection
    exact = combined(counts, (z - kernel.z_mean) / kernel.z_std, kernel.counts, kernel.z, kernel.weight, kernel.gamma, kernel.similarity)
    np.testing.assert_allclose(phi_all @ phi_landmarks.T, exact, atol=1e-6)
    assert model.coef.shape == (40, 1) and kernel.similarity in ("tanimoto", "minmax")


@pytest.mark.parametrize("blank", [0.3, 0.0], ids=["blank cells", "every cell labelled"])
def test_columns_with_blank_cells_fit_as_each_column_alone(molecules, blank):
    """Each column's fit reads its labelled molecules alone; columns labelled on the same
    molecules (no blank cell) share one Gram matrix and still fit as each alone."""
    _, counts, z, y = molecules
    both = y.copy()
    rng = np.random.default_rng(1)
    both[rng.random(len(y)) < blank, 0] = np.nan
    both[rng.random(len(y)) < blank, 1] = np.nan
    choice = Choice("tanimoto", 1.0, np.array([0.1, 1.0]), np.array([np.nan, np.nan]), None)
    together = fit_landmark(counts, z, both, choice=choice, landmarks=80)
    for t in range(2):
        alone = fit_landmark(counts, z, both[:, [t]], choice=Choice("tanimoto", 1.0, choice.alpha[[t]], choice.score[[t]], None), landmarks=80)
        np.testing.assert_allclose(together.predict(counts[:30], z[:30])[:, t], alone.predict(counts[:30], z[:30])[:, 0], rtol=1e-8, atol=1e-10)


def test_cross_validation_takes_the_representation_when_it_carries_the_target(molecules):
    _, counts, z, y = molecules
    carried = z[:, 0] - z[:, 0].mean()  # TPSA plus noise: the representation alone knows it
    model = fit_landmark(counts, z, carried[:, None], landmarks=120, search=260)
    assert model.kernel.weight > 0 and np.isfinite(model.cv_score).all()


@pytest.fixture(scope="module")
def backbone():
    from gtscale.models.pretrained import export_path

    return read_export(export_path("moses-egt"))


@pytest.fixture(scope="module")
def represented(molecules, backbone) -> np.ndarray:
    """The shipped backbone's representation of the molecules."""
    from gtscale.inference import graph_representation, load_model_export

    loaded = load_model_export(backbone.folder, backbone.config, backbone.state, backbone.meta)
    return graph_representation(loaded, molecules[0])[0]


@pytest.mark.parametrize("classifier", [False, True])
def test_its_export_predicts_through_predicts_members_what_the_model_predicts(molecules, backbone, represented, classifier, tmp_path):
    smiles, counts, _, y = molecules
    z = represented
    labels = (y > np.median(y, axis=0)).astype(float) if classifier else y
    model = fit_landmark(counts[:200], z[:200], labels[:200], classifier, landmarks=60, search=200)
    record = {"dataset": "nci", "task": {"type": "graph_regression", "num_targets": 2, "target_names": ["a", "b"]}}
    folder = write_landmark_export(tmp_path / "landmark", model, backbone, record)
    (member,), _ = load_members(folder)
    assert isinstance(member, KernelMember) and member.target_names == ["a", "b"]
    outputs, reasons = member.predict(Molecules(smiles[200:]), 64)
    expected = model.predict(counts[200:], z[200:])
    if classifier:
        expected = 1.0 / (1.0 + np.exp(-expected))
        assert ((outputs >= 0) & (outputs <= 1)).all()
    assert not any(reasons)
    np.testing.assert_allclose(outputs, expected, rtol=1e-4, atol=1e-5)


def test_a_tampered_landmark_export_is_one_line(molecules, backbone, tmp_path):
    _, counts, z, y = molecules
    model = fit_landmark(counts[:100], z[:100, :16], y[:100], landmarks=30, search=100)
    record = {"dataset": "nci", "task": {"type": "graph_regression", "num_targets": 2, "target_names": ["a", "b"]}}
    folder = write_landmark_export(tmp_path / "landmark", model, backbone, record)
    saved = read_export(folder)
    state = dict(saved.state)
    state["coef"] = state["coef"][:, :1]
    with pytest.raises(UserError, match=f"{MODEL_FILE}: its landmarks .* do not fit one landmark kernel model of 2 target"):
        read_landmark_export(saved.config, state, str(folder / MODEL_FILE))
    with pytest.raises(UserError, match="lacks tensor.*z_std"):
        read_landmark_export(saved.config, {k: v for k, v in saved.state.items() if k != "z_std"}, str(folder / MODEL_FILE))
    state = dict(saved.state) | {"z_std": -torch.ones_like(saved.state["z_std"])}
    with pytest.raises(UserError, match="z_std must be positive"):
        read_landmark_export(saved.config, state, str(folder / MODEL_FILE))


def test_the_kernel_of_a_landmark_is_one_with_itself(molecules):
    _, counts, z, _ = molecules
    mean, std = z.mean(0), z.std(0) + 1e-6
    kernel = LandmarkKernel(counts[:10], (z[:10] - mean) / std, mean, std, "tanimoto", 2.0, 0.05)
    np.testing.assert_allclose(np.diag(kernel(counts[:10], z[:10])), 1.0, atol=1e-12)
