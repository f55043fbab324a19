"""The offline evaluator's fitted weights: a logistic regression over `features.NAMES`.

The weights ship as `evaluator.json` beside this module, written by
`python -m crag.evaluation.fit` (scikit-learn, a development tool) and applied here with numpy
alone, so grading needs no new dependency. The file also carries the thresholds fitted with the
weights and the cross-validated figures that justify them, so a reader of the file knows what
it is worth.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np

from crag.steps.grading.features import NAMES

SHIPPED = "evaluator.json"


@dataclass(frozen=True)
class LogisticModel:
    """P(relevant) = 1 / (1 + exp(-(bias + weights · features))), rounded as grades are.

    Args:
        features: the feature names, in the order of `weights` (must be `features.NAMES`).
        weights, bias: on the raw features (any standardising is folded in at fit time).
        upper, lower: the thresholds fitted with the weights.
        about: provenance and measured figures, kept as the fitting script wrote them.
    """

    features: tuple[str, ...]
    weights: tuple[float, ...]
    bias: float
    upper: float
    lower: float
    about: dict[str, Any] = field(default_factory=dict, compare=False)

    def __post_init__(self) -> None:
        if tuple(self.features) != NAMES:
            raise ValueError(
                f"the evaluator weights are for features {list(self.features)}, but this crag computes "
                f"{list(NAMES)}; refit them with `python -m crag.evaluation.fit --write`"
            )

    def predict(self, x: np.ndarray) -> np.ndarray:
        z = np.asarray(x, dtype=float) @ np.asarray(self.weights) + self.bias
        return 1.0 / (1.0 + np.exp(-z))

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> LogisticModel:
        return cls(
            features=tuple(data["features"]), weights=tuple(float(w) for w in data["weights"]),
            bias=float(data["bias"]), upper=float(data["upper"]), lower=float(data["lower"]),
            about=dict(data.get("about", {})),
        )

    def to_dict(self) -> dict[str, Any]:
        return {"features": list(self.features), "weights": list(self.weights), "bias": self.bias,
                "upper": self.upper, "lower": self.lower, "about": self.about}

    @classmethod
    def load(cls, path: Path) -> LogisticModel:
        return cls.from_dict(json.loads(Path(path).read_text(encoding="utf-8")))


@lru_cache(maxsize=1)
def shipped_model() -> LogisticModel:
    """The weights shipped in the package (read once a process)."""
    text = resources.files("crag.steps.grading").joinpath(SHIPPED).read_text(encoding="utf-8")
    return LogisticModel.from_dict(json.loads(text))
