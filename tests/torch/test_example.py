"""The Fashion-MNIST example runs a few steps on 2 real workers (and alone)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytestmark = pytest.mark.torch

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "train_fashion_mnist.py"
DATA = Path("/usr/share/datasets/fashion-mnist")


@pytest.mark.skipif(not (DATA / "train-images-idx3-ubyte.gz").exists(),
                    reason="dataset-fashion-mnist is not installed")
def test_example_two_workers_few_steps() -> None:
    cmd = [sys.executable, "-m", "terascale", "run", "-n", "2", "--timeout", "60",
           sys.executable, str(EXAMPLE), "--epochs", "2", "--limit", "512", "--test-limit", "500",
           "--batch-size", "32", "--compression", "onebit"]
    env = dict(os.environ, OMP_NUM_THREADS="1")
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=env, cwd=ROOT)
    assert out.returncode == 0, out.stdout + out.stderr
    text = out.stdout + out.stderr
    assert "2 worker(s), total batch 64" in text
    assert "epoch 2: test accuracy" in text


def test_example_datasets_error_names_the_file(tmp_path: Path) -> None:
    import terascale
    from terascale.torch.datasets import fashion_mnist

    (tmp_path / "train-images-idx3-ubyte.gz").write_bytes(b"not gzip")
    with pytest.raises(terascale.DataError, match="train-images-idx3-ubyte.gz"):
        fashion_mnist(True, tmp_path)


def test_missing_dataset_says_where_to_get_it(tmp_path: Path) -> None:
    import terascale
    from terascale.torch.datasets import fashion_mnist

    with pytest.raises(terascale.DataError, match=r"train-images-idx3-ubyte.gz: no such file;"
                       r".*dataset-fashion-mnist.*--data DIR"):
        fashion_mnist(True, tmp_path)


def test_example_model_is_the_benchmarked_model() -> None:
    import importlib.util

    import torch

    from terascale.bench._torch_models import make_model

    spec = importlib.util.spec_from_file_location("train_fashion_mnist", EXAMPLE)
    assert spec is not None and spec.loader is not None
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    ours, theirs = make_model("cnn"), example.small_cnn()
    assert [type(m) for m in ours.modules()] == [type(m) for m in theirs.modules()]
    assert [p.shape for p in ours.parameters()] == [p.shape for p in theirs.parameters()]
    torch.manual_seed(0)
    x = torch.randn(2, 1, 28, 28)
    theirs.load_state_dict(ours.state_dict())
    assert torch.equal(ours(x), theirs(x))
