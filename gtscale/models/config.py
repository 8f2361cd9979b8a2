"""Typed model and head configurations, built from the YAML files in configs/models/.

A model YAML holds ``name`` (which architecture), that architecture's fields below, and optionally
a ``head`` section: the task head whose parameters the papers count with the model (PCQM4Mv2's
single regression target). `gtscale.models.build_model` reads the first two, `build_head` the
third. Feature vocabularies default to the molecular ones of schema.py; see embeddings.py for how a
column's vocabulary becomes rows of one flat embedding table.

Every model names the width of its node states `node_width` (the papers' d_h, d or D) and the
dropout on its attention weights `attention_dropout`. Model configs on disk may call them otherwise
(`hidden_dim` for Graphormer and MNA-GT, `width` for ET, EGT's authors' `attn_dropout`); the
readers of model configs on disk take them through `current_field_names` (RENAMED_FIELDS), so that
an export's model.yaml or a run's recorded config under either name builds the same model.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Literal, Optional

from gtscale.config import check_field_ranges, ranged
from gtscale.errors import UserError
from gtscale.format.schema import ATOM_FEATURE_DIMS, BOND_FEATURE_DIMS, SPD_MAX

# Upper bounds of the sizes a config may name: far beyond any published model, and low enough that
# building one from a tampered file (an export's model.yaml) is bounded work, not an hour or an
# out-of-memory kill. Ranges sit on the fields below; gtscale.config.from_dict checks them.
MAX_LAYERS = 1024
MAX_WIDTH = 65536  # channels, FFN widths, continuous input features
MAX_HEADS = 1024
MAX_VOCAB = 2**20  # rows of one feature column's (or a degree / distance) table
#: Hop counts live in uint8 with SPD_UNREACHABLE above SPD_MAX: a hop bucket past it would share
#: the unreachable pairs' row.
MAX_HOPS = SPD_MAX


def _atom_vocab() -> list[int]:
    return list(ATOM_FEATURE_DIMS)


def _bond_vocab() -> list[int]:
    return list(BOND_FEATURE_DIMS)


def _vocab(default: Callable[[], list[int]]) -> Any:
    """A field of one vocabulary size per feature column (a table of that many rows each), `default` giving them."""
    return ranged(default_factory=default, low=1, high=MAX_VOCAB)


def _check_vocab(name: str, vocab: list[int]) -> None:
    if not vocab or any(v < 1 for v in vocab):
        raise ValueError(f"{name} must list one positive vocabulary size per feature column, got {vocab}")


def _check_vocabs(cfg, optional: tuple[str, ...] = ()) -> None:
    """Each of the config's node_vocab and edge_vocab lists positive sizes, one per column; one named
    in `optional` may instead be empty (no such features: continuous ones give the node input)."""
    for name in ("node_vocab", "edge_vocab"):
        vocab = getattr(cfg, name, None)
        if vocab is not None and (vocab or name not in optional):
            _check_vocab(name, vocab)


def _check_heads(cfg) -> None:
    """The heads split node_width evenly: each is node_width / num_heads wide."""
    if cfg.node_width % cfg.num_heads:
        raise ValueError(f"node_width {cfg.node_width} is not a multiple of num_heads {cfg.num_heads}")


@dataclass
class EGTConfig:
    """Edge-augmented Graph Transformer (Hussain, Zaki, Subramanian, KDD'22).

    Field names follow the paper: L layers, node width d_h, edge width d_e, heads. The defaults are
    the authors' PCQM4Mv2 settings except for the sizes, which every size's YAML sets."""

    num_layers: int = ranged(6, low=1, high=MAX_LAYERS)  # L, number of EGT layers
    node_width: int = ranged(512, low=1, high=MAX_WIDTH)  # d_h, node channel width
    edge_width: int = ranged(64, low=1, high=MAX_WIDTH)  # d_e, edge channel width
    num_heads: int = ranged(32, low=1, high=MAX_HEADS)  # attention heads; node_width must be a multiple
    node_ffn_multiplier: float = ranged(1.0, low=0, high=64, low_open=True)  # node FFN hidden width = round(d_h * this)
    edge_ffn_multiplier: float = ranged(1.0, low=0, high=64, low_open=True)  # edge FFN hidden width = round(d_e * this)
    activation: Literal["elu", "relu", "gelu"] = "elu"  # FFN activation (the paper's ELU)
    clip_logits: list[float] = ranged(default_factory=lambda: [-5.0, 5.0])  # clip range of QKᵀ/√d (eq. 3)
    node_dropout: float = ranged(0.0, low=0, high=1, high_open=True)  # dropout after the node MHA output and node FFN
    edge_dropout: float = ranged(0.0, low=0, high=1, high_open=True)  # dropout after the edge update and edge FFN
    attention_dropout: float = ranged(0.0, low=0, high=1, high_open=True)  # dropout on the gated attention weights (the authors' attn_dropout)
    attn_maskout: float = ranged(0.0, low=0, high=1, high_open=True)  # probability of masking each attention pair while training
    scale_degree: bool = True  # dynamic centrality scalers ln(1 + Σ σ(G)) (eq. 8-9); needs gated
    gated: bool = True  # σ(G(ê)) gates on the attention weights; false = the "ungated" ablation
    simple: bool = False  # EGT-Simple ablation: edge channels are input only, never updated
    constrained: bool = False  # EGT-Constrained ablation: attend only to self and 1-hop neighbours
    output_edges: bool = False  # update edges in the last layer and layer-norm them for edge heads
    num_virtual_nodes: int = ranged(4, low=0, high=MAX_HEADS)  # virtual nodes; 0 = global average pooling for the graph output
    upto_hop: int = ranged(16, low=1, high=MAX_HOPS)  # k: hop matrix clipped to k (k+1 = farther or unreachable); 1 = adjacency
    svd_rank: int = ranged(8, low=0, high=MAX_WIDTH)  # r: SVD encodings U√Σ ‖ V√Σ projected into d_h; 0 switches them off
    node_vocab: list[int] = _vocab(_atom_vocab)  # vocabulary per node feature column
    edge_vocab: list[int] = _vocab(_bond_vocab)  # vocabulary per edge feature column (sampled subgraphs: [1], "an edge")
    node_float_dim: int = ranged(0, low=0, high=MAX_WIDTH)  # F > 0: F continuous node features (node_feat_float) by a linear map instead of node_vocab's tables
    activation_checkpointing: bool = False  # recompute each layer in backward instead of storing

    def __post_init__(self):
        check_field_ranges(self)
        _check_heads(self)
        if len(self.clip_logits) != 2 or self.clip_logits[0] >= self.clip_logits[1]:
            raise ValueError(f"clip_logits must be [low, high] with low < high, got {self.clip_logits}")
        if self.scale_degree and not self.gated:
            raise ValueError("scale_degree sums the attention gates, so it needs gated: true")
        if self.simple and self.output_edges:
            raise ValueError("simple (EGT-Simple) never updates the edge channels, so it has no edge output")
        _check_vocabs(self)


@dataclass
class GraphormerConfig:
    """Graphormer (Ying et al., NeurIPS'21), by default with the layer order of the paper (Pre-LN,
    eq. 8-9) and a final LayerNorm, as the paper-era v1.0 code.

    The current microsoft/Graphormer code, which produced the released PCQM4Mv2 checkpoints, is
    Post-LN with a LayerNorm on the input embeddings and no final LayerNorm: post_ln: true,
    embedding_ln: true, final_ln: false (configs/models/graphormer-base-pcqm4mv2.yaml).
    The vocabulary defaults are PCQM4Mv2's as in microsoft/Graphormer (num_in_degree 512,
    num_spatial 512, num_edge_dis 128, multi_hop_max_dist 5)."""

    num_layers: int = ranged(12, low=1, high=MAX_LAYERS)  # encoder layers
    node_width: int = ranged(768, low=1, high=MAX_WIDTH)  # d, node embedding width (fairseq's encoder_embed_dim)
    ffn_dim: int = ranged(768, low=1, high=MAX_WIDTH)  # FFN hidden width
    num_heads: int = ranged(32, low=1, high=MAX_HEADS)  # attention heads; node_width must be a multiple
    dropout: float = ranged(0.0, low=0, high=1, high_open=True)  # dropout on the input embedding, attention output and FFN output
    attention_dropout: float = ranged(0.1, low=0, high=1, high_open=True)  # dropout on attention weights
    activation_dropout: float = ranged(0.1, low=0, high=1, high_open=True)  # dropout after the FFN's GELU
    num_in_degree: int = ranged(512, low=2, high=MAX_VOCAB)  # rows of the in-degree table (degree + 1; row 0 = padding)
    num_out_degree: int = ranged(512, low=2, high=MAX_VOCAB)  # rows of the out-degree table
    num_spatial: int = ranged(512, low=3, high=MAX_VOCAB)  # rows of the spatial (hop) bias table; last row = unreachable
    num_edge_dis: int = ranged(128, low=1, high=MAX_LAYERS)  # per-hop weight matrices available to the edge encoding
    multi_hop_max_dist: int = ranged(5, low=1, high=MAX_HOPS)  # edges of each shortest path used by the edge encoding
    # the authors' collator option: no attention between nodes this many hops apart or more, an
    # unreachable pair counting as UNREACHABLE_HOPS (510); null = every pair attends (their default, 1024)
    spatial_pos_max: Optional[int] = ranged(None, low=0)
    post_ln: bool = False  # LayerNorm after each residual sum (fairseq Graphormer) instead of before each block
    embedding_ln: bool = False  # LayerNorm on the input tokens before the first layer (encoder_normalize_before)
    final_ln: bool = True  # LayerNorm on the last layer's output (the paper's Pre-LN code; absent in fairseq's)
    node_vocab: list[int] = _vocab(_atom_vocab)  # vocabulary per node feature column
    edge_vocab: list[int] = _vocab(_bond_vocab)  # vocabulary per edge feature column (sampled subgraphs: [1], "an edge")
    node_float_dim: int = ranged(0, low=0, high=MAX_WIDTH)  # F > 0: F continuous node features (node_feat_float) by a linear map instead of node_vocab's tables
    activation_checkpointing: bool = False  # recompute each layer in backward instead of storing

    def __post_init__(self):
        check_field_ranges(self)
        _check_heads(self)
        if not 1 <= self.multi_hop_max_dist <= self.num_edge_dis:
            raise ValueError(f"multi_hop_max_dist {self.multi_hop_max_dist} must be between 1 and num_edge_dis {self.num_edge_dis}")
        _check_vocabs(self)


@dataclass
class HeadConfig:
    """A task head on one of the model's outputs (see heads.py)."""

    kind: Literal["graph", "node", "edge", "distance"] = "graph"  # which output it reads
    # "mlp": the widths of `hidden`; "graphormer": fairseq Graphormer's output head,
    # LayerNorm(act(Linear d→d)) → Linear d→T without bias + one learned scalar bias
    form: Literal["mlp", "graphormer"] = "mlp"
    num_outputs: int = ranged(1, low=1, high=MAX_WIDTH)  # T targets or C classes (ignored by "distance": max_hops + 1 classes)
    hidden: list[int] = ranged(default_factory=list, low=1, high=MAX_WIDTH)  # widths of the hidden MLP layers
    activation: Literal["elu", "relu", "gelu"] = "elu"  # between MLP layers
    max_hops: int = ranged(8, low=1, high=MAX_HOPS)  # distance head: ν, predict hops 0..ν; pairs farther apart are not scored
    weight: float = ranged(0.1, low=0)  # distance head: κ, weight of the auxiliary loss
    # G, width of Batch.graph_feat (molecule-level features, `gtscale shard --graph-features`), read
    # beside the model output; set from the shards' manifest, 0 = none
    graph_features: int = ranged(0, low=0, high=MAX_VOCAB)
    # "mlp": dropout on the input of every linear layer (chemprop's FFN dropout), the first one
    # included: on small fine-tuning sets a 2,048-bit fingerprint beside the graph invites overfitting
    dropout: float = ranged(0.0, low=0, high=1, high_open=True)
    # "mlp" with graph_features: the first layer's dropout on the molecule features alone (null: `dropout`),
    # so that a 2,048-bit fingerprint can be thinned harder than the graph representation beside it
    feature_dropout: Optional[float] = ranged(None, low=0, high=1, high_open=True)

    def __post_init__(self):
        check_field_ranges(self)
        if (self.dropout or self.feature_dropout) and self.form == "graphormer":
            raise ValueError("head dropout belongs to the mlp form; fairseq's graphormer head has none")
        if self.kind == "distance" and self.graph_features:
            raise ValueError("the distance head reads pair embeddings only; it takes no graph_features")
        if self.form == "graphormer" and (self.hidden or self.kind == "distance"):
            raise ValueError("form: graphormer is a fixed d→d transform then d→T; it takes no hidden widths and no distance kind")


@dataclass
class ETConfig:
    """Energy Transformer for graphs (Hoover et al., NeurIPS'23, App. C and D); see models/et/.

    Names follow the paper: token width D, H heads of width Y, K Hopfield memories, T steps of
    size α. `form` picks the dense App. D model (CLS token, learned adjacency, Batch in) or the
    sparse App. C model (edges only, EdgeBatch or Batch in, g¹ ‖ gᵀ per node)."""

    form: Literal["dense", "sparse"] = "dense"
    node_width: int = ranged(128, low=1, high=MAX_WIDTH)  # D, token width
    num_heads: int = ranged(4, low=1, high=MAX_HEADS)  # H
    head_dim: int = ranged(128, low=1, high=MAX_WIDTH)  # Y, width of each head's queries and keys (authors' App. C code: Y = D; App. D code: 64)
    num_memories: int = ranged(512, low=1, high=MAX_VOCAB)  # K, Hopfield memories ξ_μ
    num_steps: int = ranged(4, low=1, high=MAX_LAYERS)  # T, descent steps of the one shared block
    step_size: float = ranged(1.0, low=0, low_open=True)  # α (authors' App. C code: 1, the residual of the gradient; App. D code: 0.1 or 0.25)
    noise_std: float = ranged(0.0, low=0)  # σ of the training-only noise √α·ε, ε ~ N(0, σ²)
    self_loops: bool = False  # every token also attends to itself (B ∈ N(C) for B = C)
    cls_token: bool = True  # dense: a CLS token attending to every node; its final state is the graph output
    learned_adjacency: bool = True  # dense: Â = Conv1×1(X ⊙ X) ⊙ A′ (App. D); false: Â = 1 on edges
    lap_k: int = ranged(10, low=0, high=MAX_WIDTH)  # dense: Laplacian eigenvectors embedded (the authors' App. D code: 15); 0 = none
    node_float_dim: int = ranged(0, low=0, high=MAX_WIDTH)  # continuous node features node_feat_float embedded by a linear map (0 = none)
    node_vocab: list[int] = _vocab(_atom_vocab)  # categorical node features ([] = none)
    edge_vocab: list[int] = _vocab(_bond_vocab)  # categorical edge features (dense A′)
    activation_checkpointing: bool = False  # recompute each step in backward instead of storing

    def __post_init__(self):
        check_field_ranges(self)
        if not self.node_vocab and not self.node_float_dim:
            raise ValueError("ET needs node_vocab or node_float_dim (some node input)")
        _check_vocabs(self, optional=("node_vocab",))


@dataclass
class MNAGTConfig:
    """MNA-GT (Li et al., adaptive multi-neighbourhood attention); see models/mnagt.py."""

    num_layers: int = ranged(3, low=1, high=MAX_LAYERS)  # L (the paper's range 2-5)
    node_width: int = ranged(128, low=1, high=MAX_WIDTH)  # d (128-300)
    num_kernels: int = ranged(3, low=1, high=MAX_HOPS)  # c + 1 attention kernels, hops k = 0..c (2-4)
    num_heads: int = ranged(4, low=1, high=MAX_HEADS)  # m heads per kernel; node_width must be a multiple
    ffn_dim: int = ranged(256, low=1, high=MAX_WIDTH)  # FFN hidden width
    normalization: Literal["sym", "rw"] = "sym"  # Â = D^-½(A+I)D^-½ or D^-1(A+I)
    aggregation: Literal["adaptive", "mean", "sum", "concat"] = "adaptive"  # kernel combination (ablations)
    readout: Literal["mean", "sum", "virtual"] = "mean"
    dropout: float = ranged(0.0, low=0, high=1, high_open=True)  # after attention and FFN
    attention_dropout: float = ranged(0.0, low=0, high=1, high_open=True)
    node_float_dim: int = ranged(0, low=0, high=MAX_WIDTH)  # continuous node features node_feat_float (0 = none)
    node_vocab: list[int] = _vocab(_atom_vocab)  # categorical node features ([] = none)
    activation_checkpointing: bool = False

    def __post_init__(self):
        check_field_ranges(self)
        _check_heads(self)
        if not self.node_vocab and not self.node_float_dim:
            raise ValueError("MNA-GT needs node_vocab or node_float_dim (some node input)")
        _check_vocabs(self, optional=("node_vocab",))


#: Fields that model configs on disk may call by another name (the width before every model named
#: it node_width; EGT's attention dropout by its authors' name, as the configs of its import and
#: exports kept it): model name → {other name: current name}. Read by current_field_names alone.
RENAMED_FIELDS = {
    "graphormer": {"hidden_dim": "node_width"},
    "mnagt": {"hidden_dim": "node_width"},
    "et": {"width": "node_width"},
    "egt": {"attn_dropout": "attention_dropout"},
}


def current_field_names(cfg: dict, where: str, name: str | None = None) -> dict:
    """A copy of the model config `cfg` (or, with `name`, of overrides of a `name` model config)
    whose fields of RENAMED_FIELDS carry their current names; other keys, and configs of unknown
    models, as they are. The readers of model configs on disk (models.load_model_config,
    models.export.read_export, train.config.resolve_model_config, train.resolve.read_resolved,
    train.checkpoint.model_changes) pass what they read through it; nothing else knows the old names.

    Both names at once is a UserError naming `where` and the key: which one holds the width would
    be a guess."""
    name = cfg.get("name") if name is None else name
    renamed = RENAMED_FIELDS.get(name, {}) if isinstance(name, str) else {}
    for old, new in renamed.items():
        if old in cfg and new in cfg:
            raise UserError(f"{where}: {old} and {new} are both set; {old} is the former name of {new}: keep {new} alone")
    return {renamed.get(key, key): value for key, value in cfg.items()}  # in place: a file written back keeps its order
