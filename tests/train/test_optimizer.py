"""make_optimizer: on the CPU, torch's fused Adam/AdamW kernel called directly gives torch's numbers and state, and
training never imports torch._dynamo (its import was 1.3 s of every `train`)."""

import subprocess
import sys

import pytest
import torch

from clinicode.config import TrainConfig
from clinicode.training.state import make_optimizer


def _model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Embedding(50, 8), torch.nn.Linear(8, 3))


@pytest.mark.parametrize("name", ["adamw", "adam"])
def test_the_direct_fused_step_is_torchs_fused_step_bit_for_bit(name):
    cfg = TrainConfig(lr=1e-2, optimizer=name, weight_decay=0.3)
    ours_m, ref_m = _model(), _model()
    ours = make_optimizer(ours_m, cfg)
    assert type(ours).__module__ == "clinicode.training.state"
    by_id = {id(p): n for n, p in ours_m.named_parameters()}
    ref_params = dict(ref_m.named_parameters())
    groups = [{**{k: v for k, v in g.items() if k != "params"},
               "params": [ref_params[by_id[id(p)]] for p in g["params"]]}
              for g in ours.param_groups]
    ref = (torch.optim.AdamW if name == "adamw" else torch.optim.Adam)(groups)
    assert [g["weight_decay"] for g in ref.param_groups] == [g["weight_decay"] for g in ours.param_groups]
    g = torch.Generator().manual_seed(1)
    for step in range(6):
        x = torch.randint(0, 50, (4, 3), generator=g)
        for m, opt in ((ours_m, ours), (ref_m, ref)):
            opt.zero_grad()
            m(x).sum().backward()
            if step == 2:
                m[1].bias.grad = None                                   # a parameter without a gradient is skipped
            opt.step()
        for (n, a), b in zip(ours_m.named_parameters(), ref_m.parameters()):
            assert torch.equal(a, b), (step, n)
    sd, sd_ref = ours.state_dict(), ref.state_dict()
    for k in sd_ref["state"]:
        for key in ("step", "exp_avg", "exp_avg_sq"):
            assert torch.equal(sd["state"][k][key], sd_ref["state"][k][key])
    again = make_optimizer(_model(), cfg)
    again.load_state_dict(sd)                                            # RUN/state round trip
    assert torch.equal(again.state_dict()["state"][0]["exp_avg"], sd["state"][0]["exp_avg"])


def test_training_steps_never_import_the_compiler():
    code = ("import sys, torch\n"
            "from clinicode.config import TrainConfig\n"
            "from clinicode.training.state import make_optimizer\n"
            "m = torch.nn.Linear(3, 3)\n"
            "opt = make_optimizer(m, TrainConfig())\n"
            "for _ in range(2):\n"
            "    opt.zero_grad(); m(torch.ones(3)).sum().backward(); opt.step()\n"
            "opt.load_state_dict(opt.state_dict())\n"
            "print('torch._dynamo' in sys.modules)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert out == "False"
