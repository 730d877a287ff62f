"""The course's one training loop and what every run shares (transformer_course.training)."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from transformer_course.training import History, accuracy, fit, param_groups, warmup_decay


def toy_problem(seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(64, 3, generator=g)
    y = (x @ torch.tensor([1.0, -2.0, 0.5]) > 0).long()
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(3, 8), nn.LayerNorm(8), nn.Tanh(), nn.Linear(8, 2))
    return model, x, y


def run(eval_every: int = 5, eval_at_start: bool = False, steps: int = 20, **kwargs) -> tuple[nn.Module, History]:
    model, x, y = toy_problem()
    opt = torch.optim.SGD(model.parameters(), lr=0.5)
    seen_modes = []

    def step_loss(step: int) -> torch.Tensor:
        seen_modes.append(model.training)
        return nn.functional.cross_entropy(model(x), y)

    def evaluate() -> dict[str, float]:
        assert not model.training  # evaluation runs in eval mode
        with torch.no_grad():
            return {"accuracy": accuracy(model(x).argmax(-1), y)}

    history = fit(
        model,
        step_loss,
        steps,
        opt,
        evaluate=evaluate,
        eval_every=eval_every,
        eval_at_start=eval_at_start,
        show_progress=False,
        **kwargs,
    )
    assert all(seen_modes) and len(seen_modes) == steps  # every step in train mode
    return model, history


def test_fit_records_every_step_and_evaluates_on_schedule():
    model, h = run()
    assert len(h.loss) == len(h.lr) == 20 and h.lr == [0.5] * 20
    assert h.eval_steps == [5, 10, 15, 20] and len(h.evals["accuracy"]) == 4
    assert h.loss[-1] < h.loss[0] and h.evals["accuracy"][-1] > 0.9
    assert not model.training and h.wall_seconds > 0 and h.cpu_seconds > 0
    assert h.curve("accuracy") == list(zip([5, 10, 15, 20], h.evals["accuracy"], strict=True))
    with pytest.raises(KeyError, match="accuracy"):
        h.curve("val_loss")


def test_fit_evaluates_at_the_start_and_after_the_last_step_when_it_is_off_the_grid():
    _, h = run(eval_every=8, eval_at_start=True, steps=20)
    assert h.eval_steps == [0, 8, 16, 20]
    _, h = run(eval_every=0, steps=7)
    assert h.eval_steps == [7]


def test_fit_is_deterministic_and_follows_the_scheduler():
    model, x, y = toy_problem()
    opt = torch.optim.SGD(model.parameters(), lr=1.0)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: warmup_decay(s, 4, 12))
    h = fit(model, lambda k: nn.functional.cross_entropy(model(x), y), 12, opt, sched, show_progress=False)
    assert h.lr == pytest.approx([warmup_decay(s, 4, 12) for s in range(12)])
    assert run()[1].loss == run()[1].loss


def test_fit_clips_the_gradient():
    model, x, y = toy_problem()
    before = [p.detach().clone() for p in model.parameters()]
    opt = torch.optim.SGD(model.parameters(), lr=1.0)
    fit(model, lambda k: 1e6 * nn.functional.cross_entropy(model(x), y), 1, opt, clip_norm=0.01, show_progress=False)
    moved = torch.cat([(p.detach() - b).flatten() for p, b in zip(model.parameters(), before, strict=True)])
    assert moved.norm() == pytest.approx(0.01, rel=1e-4)  # one SGD step of a gradient clipped to norm 0.01


def test_fit_checks_its_arguments():
    model, x, y = toy_problem()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with pytest.raises(ValueError, match="steps"):
        fit(model, lambda k: model(x).sum(), 0, opt)
    with pytest.raises(ValueError, match="eval_every"):
        fit(model, lambda k: model(x).sum(), 3, opt, eval_every=-1)


def test_param_groups_decay_matrices_only_and_skip_frozen_parameters():
    model, _, _ = toy_problem()
    model[0].weight.requires_grad_(False)
    decay, no_decay = param_groups(model, 0.1)
    assert decay["weight_decay"] == 0.1 and no_decay["weight_decay"] == 0.0
    assert [p.shape for p in decay["params"]] == [torch.Size([2, 8])]
    assert sorted(p.numel() for p in no_decay["params"]) == [2, 8, 8, 8]
    tied = nn.Linear(4, 4)
    twice = nn.ModuleList([tied, tied])  # a tied weight is one parameter, listed once
    assert len(param_groups(twice, 0.1)[0]["params"]) == 1
    model.requires_grad_(False)
    with pytest.raises(ValueError, match="no trainable parameters"):
        param_groups(model, 0.1)


def test_warmup_cosine_warms_up_linearly_then_decays_to_the_floor():
    warm, total, floor = 50, 400, 0.05
    f = [warmup_decay(s, warm, total, floor) for s in range(total + 20)]
    assert f[0] == pytest.approx(1 / warm) and f[warm - 1] == pytest.approx(1.0)
    assert all(b > a for a, b in zip(f[: warm - 1], f[1:warm], strict=True))  # rising during warm-up
    assert max(f) == pytest.approx(1.0)
    assert all(b <= a for a, b in zip(f[warm:], f[warm + 1 :], strict=False))  # never rising afterwards
    assert f[(warm + total) // 2] == pytest.approx(floor + (1 - floor) / 2)
    assert f[total] == pytest.approx(floor) and f[-1] == pytest.approx(floor)


def test_warmup_linear_is_berts_fine_tuning_schedule():
    warm, total = 10, 110
    f = [warmup_decay(s, warm, total, 0.0, decay="linear") for s in range(total + 5)]
    assert f[warm - 1] == 1.0 and f[warm] == 1.0 and f[60] == pytest.approx(0.5) and f[total] == 0.0
    assert f[-1] == 0.0
    # exactly what the common `lambda s: (s + 1) / w if s < w else max(0.0, (T - s) / (T - w))` gives
    assert f == [(s + 1) / warm if s < warm else max(0.0, (total - s) / (total - warm)) for s in range(total + 5)]


@pytest.mark.parametrize("args", [(0, -1, 10), (0, 20, 10), (0, 0, 0)])
def test_warmup_decay_rejects_impossible_schedules(args):
    with pytest.raises(ValueError, match="warmup_steps"):
        warmup_decay(*args)
    with pytest.raises(ValueError, match="decay"):
        warmup_decay(0, 1, 10, decay="step")


def test_accuracy():
    assert accuracy([1, 0, 1, 1], [1, 1, 1, 0]) == 0.5
    assert accuracy(torch.tensor([2, 2]), torch.tensor([2, 2])) == 1.0
    with pytest.raises(ValueError, match="must be equal"):
        accuracy([1, 0], [1])
    with pytest.raises(ValueError, match="non-empty"):
        accuracy([], [])
