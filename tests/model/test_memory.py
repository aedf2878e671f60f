"""The memory plan: which computation order fits, how big the score blocks are, and a clear refusal
when nothing fits."""

import pytest

from clinicode.errors import ConfigError
from clinicode.models.leam.memory import CPU_BLOCK, plan
from clinicode.models.leam.options import (  # these tests pin the paper's model (the default adds code evidence)
    PAPER_MODEL,
    LEAMConfig,
)


def _cfg(K, V=50_000, P=100, **kw):
    return LEAMConfig(vocab_size=V, n_labels=K, embed_dim=P, **{**PAPER_MODEL, **kw})


def test_few_codes_use_the_kernels_and_at_inference_the_stored_table():
    train = plan(_cfg(50), batch_size=16, max_len=2500, budget_mb=2048, training=True)
    infer = plan(_cfg(50), batch_size=64, max_len=2500, budget_mb=2048, training=False)
    assert train.order == "few codes" and not train.use_table
    assert infer.order == "table" and infer.table_mb == pytest.approx(50_000 * 50 * 4 / 2**20)
    assert "table" in infer.summary() and "--memory-budget 2,048 MB" in infer.summary()


def test_many_codes_never_store_batch_by_codes_and_the_budget_decides_the_table():
    for K in (1000, 9000, 30_000):
        p = plan(_cfg(K), batch_size=16, max_len=2500, budget_mb=1024, training=True)
        assert p.order == "many codes" and p.block == (CPU_BLOCK[0], min(CPU_BLOCK[1], K))
        assert p.batch_mb < 300 < 16 * 2500 * 9000 * 4 / 2**20         # [B, L, P] tensors, one block; never B*L*K
    assert plan(_cfg(300), batch_size=64, max_len=2500, budget_mb=2048, training=False).order == "table"
    small = plan(_cfg(300), batch_size=16, max_len=2500, budget_mb=100, training=False)  # the 57 MB table: over half
    assert small.order == "many codes" and small.table_mb == 0
    assert plan(_cfg(1000), batch_size=64, max_len=2500, budget_mb=8192, training=False).order == "many codes"  # K > 4P


def test_on_a_gpu_the_budget_sizes_the_code_blocks():
    N = 16 * 2500
    big = plan(_cfg(9000), batch_size=16, max_len=2500, budget_mb=8192, device="cuda", training=True)
    small = plan(_cfg(9000), batch_size=16, max_len=2500, budget_mb=512, device="cuda", training=True)
    assert big.block == (N, 9000) and small.block[0] == N and 1 <= small.block[1] < 9000
    assert small.batch_mb <= 512 and big.order == small.order == "many codes"
    assert plan(_cfg(50), batch_size=16, max_len=2500, budget_mb=1024, device="cuda",
                training=True).order == "many codes"


def test_a_batch_that_cannot_fit_is_refused_with_the_fix():
    with pytest.raises(ConfigError, match=r"one batch of 512 notes of up to 2,500 tokens needs about .* MB .* over "
                                          r"--memory-budget 64 MB; lower --batch-size or --max-len"):
        plan(_cfg(9000), batch_size=512, max_len=2500, budget_mb=64, training=True)


def test_the_plain_reference_is_planned_as_what_it_stores():
    p = plan(_cfg(1000), batch_size=16, max_len=2500, budget_mb=100_000, training=True, fast=False)
    assert p.order == "plain" and p.batch_mb > 6 * 16 * 2500 * 1000 * 4 / 2**20  # G, u and their gradients
