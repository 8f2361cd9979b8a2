"""Typed model and head configurations, built from the YAML files in configs/models/.

A model YAML holds ``name`` (which architecture), that architecture's fields below, and optionally
a ``head`` section: the task head whose parameters the papers count with the model (PCQM4Mv2's
single regression target). `gtscale.models.build_model` reads the first two, `build_head` the
third. Feature vocabularies default to the molecular ones of schema.py; see embeddings.py for how a
column's vocabulary becomes rows of one flat embedding table.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from gtscale.format.schema import ATOM_FEATURE_DIMS, BOND_FEATURE_DIMS


def _atom_vocab() -> list[int]:
    return list(ATOM_FEATURE_DIMS)


def _bond_vocab() -> list[int]:
    return list(BOND_FEATURE_DIMS)


def _check_vocab(name: str, vocab: list[int]) -> None:
    if not vocab or any(v < 1 for v in vocab):
        raise ValueError(f"{name} must list one positive vocabulary size per feature column, got {vocab}")


@dataclass
class EGTConfig:
    """Edge-augmented Graph Transformer (Hussain, Zaki, Subramanian, KDD'22).

    Field names follow the paper: L layers, node width d_h, edge width d_e, heads. The defaults are
    the authors' PCQM4Mv2 settings except for the sizes, which every size's YAML sets."""

    num_layers: int = 6  # L, number of EGT layers
    node_width: int = 512  # d_h, node channel width
    edge_width: int = 64  # d_e, edge channel width
    num_heads: int = 32  # attention heads; node_width must be a multiple
    node_ffn_multiplier: float = 1.0  # node FFN hidden width = round(d_h * this)
    edge_ffn_multiplier: float = 1.0  # edge FFN hidden width = round(d_e * this)
    activation: Literal["elu", "relu", "gelu"] = "elu"  # FFN activation (the paper's ELU)
    clip_logits: list[float] = field(default_factory=lambda: [-5.0, 5.0])  # clip range of QKᵀ/√d (eq. 3)
    node_dropout: float = 0.0  # dropout after the node MHA output and node FFN
    edge_dropout: float = 0.0  # dropout after the edge update and edge FFN
    attn_dropout: float = 0.0  # dropout on the gated attention weights
    attn_maskout: float = 0.0  # probability of masking each attention pair while training
    scale_degree: bool = True  # dynamic centrality scalers ln(1 + Σ σ(G)) (eq. 8-9); needs gated
    gated: bool = True  # σ(G(ê)) gates on the attention weights; false = the "ungated" ablation
    simple: bool = False  # EGT-Simple ablation: edge channels are input only, never updated
    constrained: bool = False  # EGT-Constrained ablation: attend only to self and 1-hop neighbours
    output_edges: bool = False  # update edges in the last layer and layer-norm them for edge heads
    num_virtual_nodes: int = 4  # virtual nodes; 0 = global average pooling for the graph output
    upto_hop: int = 16  # k: hop matrix clipped to k (k+1 = farther or unreachable); 1 = adjacency
    svd_rank: int = 8  # r: SVD encodings U√Σ ‖ V√Σ projected into d_h; 0 switches them off
    node_vocab: list[int] = field(default_factory=_atom_vocab)  # vocabulary per node feature column
    edge_vocab: list[int] = field(default_factory=_bond_vocab)  # vocabulary per edge feature column (sampled subgraphs: [1], "an edge")
    node_float_dim: int = 0  # F > 0: F continuous node features (node_feat_float) by a linear map instead of node_vocab's tables
    activation_checkpointing: bool = False  # recompute each layer in backward instead of storing

    def __post_init__(self):
        if self.node_float_dim < 0:
            raise ValueError("node_float_dim must be >= 0 (0 = categorical node features)")
        if self.node_width % self.num_heads:
            raise ValueError(f"node_width {self.node_width} is not a multiple of num_heads {self.num_heads}")
        if len(self.clip_logits) != 2 or self.clip_logits[0] >= self.clip_logits[1]:
            raise ValueError(f"clip_logits must be [low, high] with low < high, got {self.clip_logits}")
        if self.scale_degree and not self.gated:
            raise ValueError("scale_degree sums the attention gates, so it needs gated: true")
        if self.simple and self.output_edges:
            raise ValueError("simple (EGT-Simple) never updates the edge channels, so it has no edge output")
        if self.num_layers < 1 or self.upto_hop < 1 or self.num_virtual_nodes < 0 or self.svd_rank < 0:
            raise ValueError("num_layers and upto_hop must be >= 1, num_virtual_nodes and svd_rank >= 0")
        _check_vocab("node_vocab", self.node_vocab)
        _check_vocab("edge_vocab", self.edge_vocab)


@dataclass
class GraphormerConfig:
    """Graphormer (Ying et al., NeurIPS'21), by default with the layer order of the paper (Pre-LN,
    eq. 8-9) and a final LayerNorm, as the paper-era v1.0 code.

    The current microsoft/Graphormer code, which produced the released PCQM4Mv2 checkpoints, is
    Post-LN with a LayerNorm on the input embeddings and no final LayerNorm: post_ln: true,
    embedding_ln: true, final_ln: false (configs/models/graphormer-base-pcqm4mv2.yaml).
    The vocabulary defaults are PCQM4Mv2's as in microsoft/Graphormer (num_in_degree 512,
    num_spatial 512, num_edge_dis 128, multi_hop_max_dist 5)."""

    num_layers: int = 12  # encoder layers
    hidden_dim: int = 768  # d, node embedding width
    ffn_dim: int = 768  # FFN hidden width
    num_heads: int = 32  # attention heads; hidden_dim must be a multiple
    dropout: float = 0.0  # dropout on the input embedding, attention output and FFN output
    attention_dropout: float = 0.1  # dropout on attention weights
    activation_dropout: float = 0.1  # dropout after the FFN's GELU
    num_in_degree: int = 512  # rows of the in-degree table (degree + 1; row 0 = padding)
    num_out_degree: int = 512  # rows of the out-degree table
    num_spatial: int = 512  # rows of the spatial (hop) bias table; last row = unreachable
    num_edge_dis: int = 128  # per-hop weight matrices available to the edge encoding
    multi_hop_max_dist: int = 5  # edges of each shortest path used by the edge encoding
    post_ln: bool = False  # LayerNorm after each residual sum (fairseq Graphormer) instead of before each block
    embedding_ln: bool = False  # LayerNorm on the input tokens before the first layer (encoder_normalize_before)
    final_ln: bool = True  # LayerNorm on the last layer's output (the paper's Pre-LN code; absent in fairseq's)
    node_vocab: list[int] = field(default_factory=_atom_vocab)  # vocabulary per node feature column
    edge_vocab: list[int] = field(default_factory=_bond_vocab)  # vocabulary per edge feature column (sampled subgraphs: [1], "an edge")
    node_float_dim: int = 0  # F > 0: F continuous node features (node_feat_float) by a linear map instead of node_vocab's tables
    activation_checkpointing: bool = False  # recompute each layer in backward instead of storing

    def __post_init__(self):
        if self.node_float_dim < 0:
            raise ValueError("node_float_dim must be >= 0 (0 = categorical node features)")
        if self.hidden_dim % self.num_heads:
            raise ValueError(f"hidden_dim {self.hidden_dim} is not a multiple of num_heads {self.num_heads}")
        if not 1 <= self.multi_hop_max_dist <= self.num_edge_dis:
            raise ValueError("multi_hop_max_dist must be between 1 and num_edge_dis")
        if self.num_spatial < 3 or self.num_in_degree < 2 or self.num_out_degree < 2:
            raise ValueError("num_spatial must be >= 3 and the degree tables >= 2 rows")
        _check_vocab("node_vocab", self.node_vocab)
        _check_vocab("edge_vocab", self.edge_vocab)


@dataclass
class HeadConfig:
    """A task head on one of the model's outputs (see heads.py)."""

    kind: Literal["graph", "node", "edge", "distance"] = "graph"  # which output it reads
    # "mlp": the widths of `hidden`; "graphormer": fairseq Graphormer's output head,
    # LayerNorm(act(Linear d→d)) → Linear d→T without bias + one learned scalar bias
    form: Literal["mlp", "graphormer"] = "mlp"
    num_outputs: int = 1  # T targets or C classes (ignored by "distance": max_hops + 1 classes)
    hidden: list[int] = field(default_factory=list)  # widths of the hidden MLP layers
    activation: Literal["elu", "relu", "gelu"] = "elu"  # between MLP layers
    max_hops: int = 8  # distance head: ν, predict hops 0..ν; pairs farther apart are not scored
    weight: float = 0.1  # distance head: κ, weight of the auxiliary loss
    # G, width of Batch.graph_feat (molecule-level features, `gtscale shard --graph-features`), read
    # beside the model output; set from the shards' manifest, 0 = none
    graph_features: int = 0
    # "mlp": dropout on the input of every linear layer (chemprop's FFN dropout), the first one
    # included: on small fine-tuning sets a 2,048-bit fingerprint beside the graph invites overfitting
    dropout: float = 0.0

    def __post_init__(self):
        if self.num_outputs < 1 or self.max_hops < 1 or any(w < 1 for w in self.hidden) or self.graph_features < 0:
            raise ValueError("num_outputs, max_hops and hidden widths must be positive, graph_features >= 0")
        if not 0.0 <= self.dropout < 1.0:
            raise ValueError(f"head dropout must be in [0, 1), got {self.dropout}")
        if self.dropout and self.form == "graphormer":
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
    width: int = 128  # D, token width
    num_heads: int = 4  # H
    head_dim: int = 128  # Y, width of each head's queries and keys (authors' App. C code: Y = D; App. D code: 64)
    num_memories: int = 512  # K, Hopfield memories ξ_μ
    num_steps: int = 4  # T, descent steps of the one shared block
    step_size: float = 1.0  # α (authors' App. C code: 1, the residual of the gradient; App. D code: 0.1 or 0.25)
    noise_std: float = 0.0  # σ of the training-only noise √α·ε, ε ~ N(0, σ²)
    self_loops: bool = False  # every token also attends to itself (B ∈ N(C) for B = C)
    cls_token: bool = True  # dense: a CLS token attending to every node; its final state is the graph output
    learned_adjacency: bool = True  # dense: Â = Conv1×1(X ⊙ X) ⊙ A′ (App. D); false: Â = 1 on edges
    lap_k: int = 10  # dense: Laplacian eigenvectors embedded (the authors' App. D code: 15); 0 = none
    node_float_dim: int = 0  # continuous node features x_float embedded by a linear map (0 = none)
    node_vocab: list[int] = field(default_factory=_atom_vocab)  # categorical node features ([] = none)
    edge_vocab: list[int] = field(default_factory=_bond_vocab)  # categorical edge features (dense A′)
    activation_checkpointing: bool = False  # recompute each step in backward instead of storing

    def __post_init__(self):
        if min(self.width, self.num_heads, self.head_dim, self.num_memories, self.num_steps) < 1:
            raise ValueError("width, num_heads, head_dim, num_memories and num_steps must be >= 1")
        if self.step_size <= 0 or self.noise_std < 0 or self.lap_k < 0 or self.node_float_dim < 0:
            raise ValueError("step_size must be > 0; noise_std, lap_k and node_float_dim >= 0")
        if not self.node_vocab and not self.node_float_dim:
            raise ValueError("ET needs node_vocab or node_float_dim (some node input)")
        if self.node_vocab:
            _check_vocab("node_vocab", self.node_vocab)
        _check_vocab("edge_vocab", self.edge_vocab)


@dataclass
class MNAGTConfig:
    """MNA-GT (Li et al., adaptive multi-neighbourhood attention); see models/mnagt.py."""

    num_layers: int = 3  # L (the paper's range 2-5)
    hidden_dim: int = 128  # d (128-300)
    num_kernels: int = 3  # c + 1 attention kernels, hops k = 0..c (2-4)
    num_heads: int = 4  # m heads per kernel; hidden_dim must be a multiple
    ffn_dim: int = 256  # FFN hidden width
    normalization: Literal["sym", "rw"] = "sym"  # Â = D^-½(A+I)D^-½ or D^-1(A+I)
    aggregation: Literal["adaptive", "mean", "sum", "concat"] = "adaptive"  # kernel combination (ablations)
    readout: Literal["mean", "sum", "virtual"] = "mean"
    dropout: float = 0.0  # after attention and FFN
    attention_dropout: float = 0.0
    node_float_dim: int = 0  # continuous node features x_float (0 = none)
    node_vocab: list[int] = field(default_factory=_atom_vocab)  # categorical node features ([] = none)
    activation_checkpointing: bool = False

    def __post_init__(self):
        if self.hidden_dim % self.num_heads:
            raise ValueError(f"hidden_dim {self.hidden_dim} is not a multiple of num_heads {self.num_heads}")
        if self.num_layers < 1 or self.num_kernels < 1 or self.ffn_dim < 1:
            raise ValueError("num_layers, num_kernels and ffn_dim must be >= 1")
        if not self.node_vocab and not self.node_float_dim:
            raise ValueError("MNA-GT needs node_vocab or node_float_dim (some node input)")
        if self.node_vocab:
            _check_vocab("node_vocab", self.node_vocab)
