"""CUDA runs the same code as the CPU's plain forward (fast kernels are CPU-only): only where a GPU exists."""

import pytest
import torch

from clinicode.batching import pad_batch
from clinicode.config import LEAMConfig
from clinicode.model import LEAM

pytestmark = pytest.mark.gpu


def _pair():
    torch.manual_seed(0)
    cfg = LEAMConfig(vocab_size=300, n_labels=40, embed_dim=16, radius=3, hidden_dim=32)
    cpu = LEAM(cfg, fast=False).eval()
    gpu = LEAM(cfg).eval()
    gpu.load_state_dict(cpu.state_dict())
    return cpu, gpu.cuda()


def test_cuda_forward_equals_the_cpu_reference_with_and_without_the_table():
    cpu, gpu = _pair()
    ids, mask = pad_batch([torch.randint(1, 300, (n,)).tolist() for n in (50, 17, 33)])
    want = cpu(ids, mask, return_attention=True)
    for kw in ({}, {"table": gpu.word_code_table()}):
        got = gpu(ids.cuda(), mask.cuda(), return_attention=True, **kw)
        for name in ("logits", "beta", "phrase", "doc"):
            torch.testing.assert_close(getattr(got, name).cpu(), getattr(want, name), rtol=1e-4, atol=1e-5, msg=name)


def test_a_mixed_precision_training_step_on_cuda_lowers_the_loss():
    from clinicode.config import TrainConfig
    from clinicode.train import make_optimizer

    _, model = _pair()
    model.train()
    ids, mask = pad_batch([torch.randint(1, 300, (60,)).tolist() for _ in range(8)])
    ids, mask = ids.cuda(), mask.cuda()
    y = (torch.rand(8, 40) < 0.2).float().cuda()
    opt, scaler = make_optimizer(model, TrainConfig()), torch.amp.GradScaler("cuda")
    losses = []
    for _ in range(20):
        with torch.autocast("cuda"):
            loss, _ = model.loss(model(ids, mask).logits.float(), y)
        opt.zero_grad()
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
        losses.append(loss.item())
    assert losses[-1] < 0.8 * losses[0]
