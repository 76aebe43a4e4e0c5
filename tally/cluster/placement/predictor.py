"""The speed predictor: a best-effort job's normalized throughput next to an
online job at a given load and SM share, from the two jobs' profiles.

MuxFlow's design: a multi-layer perceptron with 4 hidden layers of 64 units,
trained per GPU type on profiled pairs. Here: scikit-learn's MLPRegressor behind
a StandardScaler, trained on pairs measured on tally's sim backend (pairs.py).

The saved file (joblib) holds a format version, the GPU type, the feature names
and the fitted pipeline; loading a file of another format version is refused with
a message saying how to retrain, and predicting for another GPU type than the
one it was trained on is refused too. The file is a pickle: load only files you
made or trust, as with any joblib file.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from tally.cluster.placement.pairs import PairResult, online_activity
from tally.cluster.placement.profile import ProfileRecord

FORMAT_VERSION = 1
HIDDEN_LAYERS = (64, 64, 64, 64)
FEATURES = ("load", "online_sm_activity_now", "online_sm_activity", "online_mean_kernel_ms",
            "online_mean_block_us", "be_sm_activity", "be_gpu_util", "be_mean_kernel_ms", "be_mean_block_us",
            "be_untransformable_share", "sm_share")


class PredictorVersionError(RuntimeError):
    pass


def _one_blas_thread():
    """The MLP's matrices are 64 wide: BLAS threads only add contention (measured on the
    2-core VM with other load: a 200-iteration fit took 67 s threaded, 1 s on one thread)."""
    from threadpoolctl import threadpool_limits
    return threadpool_limits(limits=1, user_api="blas")


def features(online: ProfileRecord, load: float, be: ProfileRecord, sm_percent: float) -> list[float]:
    return [load, online_activity(online, load), online.sm_activity, np.log1p(online.mean_kernel_ms),
            np.log1p(online.mean_block_us), be.sm_activity, be.gpu_util, np.log1p(be.mean_kernel_ms),
            np.log1p(be.mean_block_us), be.untransformable_share, sm_percent / 100.0]


def pair_matrix(pairs: list[PairResult], profiles: dict[str, ProfileRecord]) -> tuple[np.ndarray, np.ndarray]:
    x = np.array([features(profiles[p.online], p.load, profiles[p.best_effort], p.sm_percent) for p in pairs])
    y = np.array([p.be_normalized for p in pairs])
    return x, y


@dataclass
class SpeedPredictor:
    gpu: str
    model: object                  # sklearn Pipeline
    trained_pairs: int = 0

    @classmethod
    def train(cls, gpu: str, pairs: list[PairResult], profiles: dict[str, ProfileRecord], seed: int = 0,
              max_iter: int = 2000) -> "SpeedPredictor":
        from sklearn.neural_network import MLPRegressor
        from sklearn.pipeline import make_pipeline
        from sklearn.preprocessing import StandardScaler
        if len(pairs) < 4:
            raise ValueError(f"training the speed predictor needs at least 4 profiled pairs, got {len(pairs)}")
        x, y = pair_matrix(pairs, profiles)
        model = make_pipeline(StandardScaler(), MLPRegressor(hidden_layer_sizes=HIDDEN_LAYERS, solver="lbfgs",
                                                             alpha=1e-3, max_iter=max_iter, random_state=seed))
        with _one_blas_thread():
            model.fit(x, y)
        return cls(gpu, model, len(pairs))

    def predict_rows(self, x: np.ndarray) -> np.ndarray:
        with _one_blas_thread():
            return np.clip(self.model.predict(np.asarray(x, dtype=float)), 0.0, 1.0)

    def predict(self, online: ProfileRecord, load: float, be: ProfileRecord, sm_percent: float,
                gpu: str | None = None) -> float:
        if gpu is not None and gpu != self.gpu:
            raise PredictorVersionError(f"this speed predictor was trained for {self.gpu!r}, not {gpu!r}: "
                                        f"train one per GPU type (tally-bench cluster --predictor-out)")
        return float(self.predict_rows(np.array([features(online, load, be, sm_percent)]))[0])

    def errors(self, pairs: list[PairResult], profiles: dict[str, ProfileRecord]) -> dict:
        """Mean absolute error, its relative form and R^2 on `pairs` (normally held out)."""
        x, y = pair_matrix(pairs, profiles)
        p = self.predict_rows(x)
        err = np.abs(p - y)
        ss = float(((y - y.mean()) ** 2).sum())
        return {"pairs": len(pairs), "mae": float(err.mean()), "max_abs_error": float(err.max()),
                "mape": float((err / np.maximum(y, 1e-3)).mean()),
                "r2": 1.0 - float(((p - y) ** 2).sum()) / ss if ss > 0 else None}

    # files ---------------------------------------------------------------------------------------
    def save(self, path: Path) -> None:
        import joblib
        joblib.dump({"format_version": FORMAT_VERSION, "gpu": self.gpu, "features": list(FEATURES),
                     "hidden_layers": list(HIDDEN_LAYERS), "trained_pairs": self.trained_pairs,
                     "model": self.model}, path)

    @classmethod
    def load(cls, path: Path) -> "SpeedPredictor":
        import joblib
        try:
            data = joblib.load(path)
        except FileNotFoundError:
            raise
        except Exception as e:  # noqa: BLE001 - whatever unpickling a foreign file raises
            raise PredictorVersionError(f"{path} is not a speed predictor file ({type(e).__name__}: {e}); "
                                        f"train one with tally-bench cluster --predictor-out {path}") from None
        version = data.get("format_version") if isinstance(data, dict) else None
        if version != FORMAT_VERSION:
            raise PredictorVersionError(f"{path} is a speed predictor of format version {version}, this tally "
                                        f"reads version {FORMAT_VERSION}; train a new one "
                                        f"(tally-bench cluster --predictor-out {path})")
        if data.get("features") != list(FEATURES):
            raise PredictorVersionError(f"{path} was trained on features {data.get('features')}, this tally "
                                        f"computes {list(FEATURES)}; train a new one")
        return cls(data["gpu"], data["model"], int(data.get("trained_pairs", 0)))
