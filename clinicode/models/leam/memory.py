"""The memory plan of a LEAM run: what one batch needs, which computation order fits a budget, and what to report.

`train` and `predict --memory-budget MB` bound one batch's scratch memory through `plan` (docs/training.md)."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from clinicode.errors import ConfigError

MB = 1 << 20
CODE_CELLS = 1 << 22       # code_attention: [B, L or H, codes] cells per block of codes (16 MB of float32 a tensor)
CPU_BLOCK = (256, 2048)   # rows x codes of one score block on the CPU: 2 MB, cache-sized (bigger blocks were slower)
TABLE_MAX_CODES_PER_DIM = 4  # the table pays up to K = 4P at inference (measured: beyond it, the product is faster)


@dataclass(frozen=True)
class MemoryPlan:
    """How one batch is computed within the budget, with the estimated sizes (MB)."""

    budget_mb: int
    order: str               # "plain" (the reference), "few codes" (G, then the window), "many codes" (window on
                             # the word vectors, scores by blocks), "table" (inference: G gathered from the table)
    batch_mb: float          # scratch of one batch of `batch_size` notes of `max_len` tokens
    weights_mb: float        # parameters (training: plus gradients, Adam's moments and the moving average)
    table_mb: float          # the stored [V, K] cosine table; 0 when G is computed instead
    block: tuple[int, int]   # (rows, codes) per score block of kernels.code_max
    training: bool = False

    @property
    def use_table(self) -> bool:
        return self.order == "table"

    def summary(self) -> str:
        parts = [f"memory plan: {self.order}",
                 f"one batch ~{_mb(self.batch_mb)} of --memory-budget {self.budget_mb:,} MB"]
        if self.use_table:
            parts.append(f"word-code table {_mb(self.table_mb)}")
        if self.order == "many codes":
            parts.append(f"codes scored in blocks of {self.block[0]:,} positions x {self.block[1]:,} codes")
        parts.append(f"weights{' and optimiser state' if self.training else ''} ~{_mb(self.weights_mb)}")
        return "; ".join(parts)

    def to_dict(self) -> dict:
        return {k: (round(v, 1) if isinstance(v, float) else v) for k, v in asdict(self).items()}


ORDERS = ("plain", "table", "few codes", "many codes")


def order(cfg: Any, *, device: str = "cpu", fast: bool = True, table: bool = False) -> str:
    """Which computation order a forward runs: the one decision, made here (`plan` adds the budget's say on the table;
    `clinicode.models.leam.model.LEAM.forward` follows what it is given, or asks this).

    "plain": the reference expressions (`fast=False`), every [B, L, K] tensor stored; "table": G gathered from the
    stored [V, K] word-code table (inference); "few codes": G computed (K <= P, on the CPU, cosine), window, bias, ReLU
    and max fused by `kernels.phrase_max`; "many codes": the window on the word vectors, codes scored by blocks
    (`kernels.code_max`; also every CUDA run and the linear ablation). With `code_evidence`, each order computes the
    evidence in the same pass (see `clinicode.models.leam.model`).
    """
    if table:
        return "table"
    if not fast:
        return "plain"
    if device == "cpu" and cfg.compat == "cosine" and cfg.n_labels <= cfg.embed_dim:
        return "few codes"
    return "many codes"


def code_block(n_codes: int, *, batch: int, length: int, hidden: int) -> int:
    """Codes per block of `code_attention` (LEAM.code_logits): as many as keep its [B, L, codes] and [B, codes, H]
    tensors within CODE_CELLS cells each, one at least."""
    return max(1, min(n_codes, CODE_CELLS // max(1, batch * length, batch * hidden)))


def plan(cfg: Any, *, batch_size: int, max_len: int, budget_mb: int, device: str = "cpu", training: bool,
         fast: bool = True) -> MemoryPlan:
    """The computation order and block sizes for batches of `batch_size` notes of up to `max_len` tokens.

    The budget bounds one batch's scratch memory (its word tensors [B, L, P], one block of code scores, with
    `code_evidence` each code's best score per note [B, K], and in training a windowed copy of the words and its
    gradient) and the stored [V, K] word-code table; not the weights, nor the caller's [N, K] score matrices
    (docs/training.md, "Memory and many codes"). An estimate from shapes (float32), checked against measured peak
    RSS in benchmarks/bench_train.py and bench_predict.py.

    Raises:
        ConfigError: one batch cannot fit the budget whatever the blocks (with the options that would fix it).
    """
    B, L, P, K, V, H = batch_size, max_len, cfg.embed_dim, cfg.n_labels, cfg.vocab_size, cfg.hidden_dim
    N, f = B * L, 4 / MB                                                  # positions per batch; MB per float32
    cpu, cosine = device == "cpu", cfg.compat == "cosine"
    n_params = V * P + K * P + 2 * cfg.radius + 1 + K + P * H + H + H * K + K + (K if cfg.code_evidence else 0)
    weights = n_params * f * (5 if training else 1)
    reg = min(K, cfg.label_reg_codes) * (H + K) * f * 3 if training else 0.0  # f(c_k) for the regulariser's codes
    table = V * K * f
    block = (N, K)
    path = order(cfg, device=device, fast=fast)
    if path == "plain":
        scratch = ((6 * N * K + 4 * N * P) if training else (3 * N * K + N * P)) * f + reg
    elif not training and cpu and cosine and K <= TABLE_MAX_CODES_PER_DIM * P and table <= budget_mb / 2 \
            and not cfg.code_attention:  # code attention's logits never read the table: it would cost for nothing
        path = "table"
        scratch = (8 * (L + 2 * cfg.radius) * K + 2 * N) * f              # a few notes' gathered G at a time
    elif path == "few codes":
        scratch = ((5 * N * K + 4 * N * P) if training else (2 * N * K + N * P)) * f + reg
    else:
        word = (8 if training else 3) * N * P * f + 3 * N * f + reg       # v, v^, S (and gradients); m, its code
        if cpu:
            block = (min(CPU_BLOCK[0], N), min(CPU_BLOCK[1], K))
        else:  # a GPU: all positions at once, as many codes per block as the budget leaves room for
            room = budget_mb - word
            block = (N, max(1, min(K, int(room / (2 * N * f))) if room > 0 else 1))
        scratch = word + 2 * block[0] * block[1] * f
    if cfg.code_evidence:  # best score and position per note and code; many codes, training: S with W1 detached
        windowed = 2 * N * P if path == "many codes" and training else 0
        plain = (3 if training else 2) * N * K if path == "plain" else 0  # window(G) with W1 detached, masked copy
        scratch += (4 * B * K + 2 * K * P + windowed + plain) * f
    if cfg.code_attention:  # a block of codes at a time: u, alpha and their gradients [B, L, n]; z, h [B, n, P/H]
        n = code_block(K, batch=B, length=L, hidden=H)
        scratch += (6 * N * n + B * n * (P + 3 * H) + 2 * N * P) * f
    if scratch > budget_mb:
        raise ConfigError(
            f"one batch of {B} notes of up to {L:,} tokens needs about {scratch:,.0f} MB with {K:,} codes, over "
            f"--memory-budget {budget_mb:,} MB; lower --batch-size or --max-len, or raise --memory-budget.")
    return MemoryPlan(budget_mb=budget_mb, order=path, batch_mb=scratch, weights_mb=weights,
                      table_mb=table if path == "table" else 0.0, block=block, training=training)


def _mb(x: float) -> str:
    return f"{x:,.0f} MB" if x >= 1 else "<1 MB"
