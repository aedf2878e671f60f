"""CUDA runs the same code as the CPU: the many-codes path (window on the word vectors, codes scored by blocks sized
by the memory plan) for any K, in float32 even under autocast. Only where a GPU exists."""

import pytest
import torch

from clinicode.batching import pad_batch
from clinicode.models.leam.model import LEAM
from clinicode.models.leam.options import LEAMConfig

pytestmark = pytest.mark.gpu


def _pair():
    torch.manual_seed(0)
    cfg = LEAMConfig(vocab_size=300, n_labels=40, embed_dim=16, radius=3, hidden_dim=32)
    cpu = LEAM(cfg, fast=False).eval()
    gpu = LEAM(cfg).eval()
    gpu.load_state_dict(cpu.state_dict())
    return cpu, gpu.cuda()


def test_cuda_forward_equals_the_cpu_reference_with_and_without_the_table():
    from clinicode.models.leam.memory import plan

    cpu, gpu = _pair()
    ids, mask = pad_batch([torch.randint(1, 300, (n,)).tolist() for n in (50, 17, 33)])
    want = cpu(ids, mask, return_attention=True)
    block = plan(gpu.config, batch_size=3, max_len=50, budget_mb=64, device="cuda", training=False).block
    for kw in ({}, {"block": block}, {"block": (7, 5)}, {"table": gpu.word_code_table()}):
        got = gpu(ids.cuda(), mask.cuda(), return_attention=True, **kw)
        for name in ("logits", "beta", "doc"):
            torch.testing.assert_close(getattr(got, name).cpu(), getattr(want, name), rtol=1e-4, atol=1e-5, msg=name)
    torch.testing.assert_close(gpu.phrase(ids.cuda(), mask.cuda()).cpu(), cpu.phrase(ids, mask), rtol=1e-4, atol=1e-5)


def test_cuda_backward_equals_the_cpu_reference():
    cpu, gpu = _pair()
    cpu.train(), gpu.train()
    ids, mask = pad_batch([torch.randint(1, 300, (n,)).tolist() for n in (50, 17, 33)])
    y = (torch.rand(3, 40) < 0.2).float()
    for model, dev in ((cpu, "cpu"), (gpu, "cuda")):
        torch.manual_seed(0)
        model.head[0].p = model.head[3].p = 0.0                          # no dropout: the same numbers on both
        model.loss(model(ids.to(dev), mask.to(dev), block=(16, 7)).logits, y.to(dev))[0].backward()
    for (name, a), b in zip(gpu.named_parameters(), cpu.parameters()):
        torch.testing.assert_close(a.grad.cpu(), b.grad, rtol=1e-3, atol=1e-5, msg=name)


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
