"""lz.utils.data: batching, seeded shuffling, drop_last, collation, samplers and splits."""
from __future__ import annotations

import numpy as np
import pytest

import lezero as lz
from lezero.utils.data import DataLoader, Dataset, TensorDataset, random_split


def _dataset(n=10):
    return TensorDataset(lz.arange(n * 2, dtype=lz.float32).reshape(n, 2), lz.arange(n))


def test_batches_in_order():
    batches = list(DataLoader(_dataset(), batch_size=4))
    assert [tuple(x.shape) for x, _ in batches] == [(4, 2), (4, 2), (2, 2)]
    assert [y.tolist() for _, y in batches] == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]
    assert batches[0][0].dtype is lz.float32 and batches[0][1].dtype is lz.int64
    assert isinstance(batches[0][0], lz.Tensor) and len(DataLoader(_dataset(), batch_size=4)) == 3


def test_drop_last():
    loader = DataLoader(_dataset(), batch_size=4, drop_last=True)
    assert len(loader) == 2 and [len(y) for _, y in loader] == [4, 4]


def test_shuffle_is_seeded_and_a_permutation_each_epoch():
    def epoch_orders(seed):
        loader = DataLoader(_dataset(), batch_size=3, shuffle=True, generator=lz.Generator().manual_seed(seed))
        return [np.concatenate([y.numpy() for _, y in loader]).tolist() for _ in range(2)]
    first, again, other = epoch_orders(0), epoch_orders(0), epoch_orders(1)
    assert first == again and first != other
    assert sorted(first[0]) == list(range(10)) and first[0] != first[1]
    lz.manual_seed(5)
    a = [y.tolist() for _, y in DataLoader(_dataset(), batch_size=10, shuffle=True)]
    lz.manual_seed(5)
    assert a == [y.tolist() for _, y in DataLoader(_dataset(), batch_size=10, shuffle=True)]
    x, y = next(iter(DataLoader(_dataset(), batch_size=10, shuffle=True)))
    np.testing.assert_array_equal(x.numpy()[:, 0], 2 * y.numpy())  # rows stay paired


def test_default_collate_of_a_custom_dataset():
    class Squares(Dataset):
        def __len__(self):
            return 5

        def __getitem__(self, i):
            return {"x": np.full(3, i, np.float32), "y": i * i, "w": 0.5, "name": f"s{i}"}

    batch = next(iter(DataLoader(Squares(), batch_size=5)))
    assert batch["x"].shape == (5, 3) and batch["x"].dtype is lz.float32
    assert batch["y"].tolist() == [0, 1, 4, 9, 16] and batch["y"].dtype is lz.int64
    assert batch["w"].dtype is lz.float64 and batch["name"] == ["s0", "s1", "s2", "s3", "s4"]
    custom = DataLoader(_dataset(4), batch_size=2, collate_fn=lambda samples: len(samples))
    assert list(custom) == [2, 2]
    assert [x.shape for x, _ in DataLoader(_dataset(3), batch_size=None)] == [(2,), (2,), (2,)]


def test_random_split_and_errors():
    parts = random_split(_dataset(), [7, 3], generator=lz.Generator().manual_seed(0))
    assert [len(p) for p in parts] == [7, 3]
    seen = sorted(int(p[i][1].item()) for p in parts for i in range(len(p)))
    assert seen == list(range(10))
    with pytest.raises(ValueError, match="batch_size"):
        DataLoader(_dataset(), batch_size=0)
    with pytest.raises(ValueError, match="Size mismatch"):
        TensorDataset(lz.zeros(3), lz.zeros(4))
