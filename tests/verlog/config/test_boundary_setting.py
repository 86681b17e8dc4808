"""algorithm.boundary: bootstrap (default) or cut; anything else is refused before launch with the choices."""

from __future__ import annotations

from verlog.config.checks import check_values
from verlog.config.schema import TrainConfig


def test_boundary_choices() -> None:
    cfg = TrainConfig()
    assert cfg.algorithm.boundary == "bootstrap" and not [p for p in check_values(cfg) if "boundary" in p.key]
    cfg.algorithm.boundary = "cut"
    assert not [p for p in check_values(cfg) if "boundary" in p.key]
    cfg.algorithm.boundary = "chop"
    (problem,) = [p for p in check_values(cfg) if p.key == "algorithm.boundary"]
    assert "'chop' is not one of bootstrap, cut" in problem.message
