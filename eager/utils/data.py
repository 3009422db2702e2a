"""``torch.utils.data``, minimal: ``Dataset``, ``TensorDataset``, ``Subset``,
``random_split``, ``default_collate`` and a single-process ``DataLoader`` (batch_size,
shuffle, drop_last, collate_fn, generator; ``num_workers`` and ``pin_memory`` accepted
and ignored: the loading runs in the caller's process)."""

from __future__ import annotations

import math
from typing import Any, Iterator, Optional, Sequence

import eager


class Dataset:
    """A map-style dataset: subclasses define ``__getitem__`` (and ``__len__``)."""

    def __getitem__(self, index):
        raise NotImplementedError("Subclasses of Dataset should implement __getitem__.")

    def __add__(self, other: "Dataset") -> "ConcatDataset":
        return ConcatDataset([self, other])


class TensorDataset(Dataset):
    """Samples are tuples of the tensors' rows at one index (the first dim is shared)."""

    def __init__(self, *tensors) -> None:
        assert all(tensors[0].size(0) == t.size(0) for t in tensors), (
            "Size mismatch between tensors"
        )
        self.tensors = tensors

    def __getitem__(self, index):
        return tuple(t[index] for t in self.tensors)

    def __len__(self) -> int:
        return self.tensors[0].size(0)


class Subset(Dataset):
    """The samples of ``dataset`` at ``indices``."""

    def __init__(self, dataset, indices: Sequence[int]) -> None:
        self.dataset = dataset
        self.indices = indices

    def __getitem__(self, idx):
        if isinstance(idx, list):
            return self.dataset[[self.indices[i] for i in idx]]
        return self.dataset[self.indices[idx]]

    def __len__(self) -> int:
        return len(self.indices)


class ConcatDataset(Dataset):
    """The datasets one after the other."""

    def __init__(self, datasets) -> None:
        self.datasets = list(datasets)
        assert len(self.datasets) > 0, "datasets should not be an empty iterable"
        self.cumulative_sizes = []
        total = 0
        for d in self.datasets:
            total += len(d)
            self.cumulative_sizes.append(total)

    def __len__(self) -> int:
        return self.cumulative_sizes[-1]

    def __getitem__(self, idx):
        if idx < 0:
            if -idx > len(self):
                raise ValueError("absolute value of index should not exceed dataset length")
            idx = len(self) + idx
        start = 0
        for d, end in zip(self.datasets, self.cumulative_sizes):
            if idx < end:
                return d[idx - start]
            start = end
        raise IndexError(f"index {idx} out of range")


def random_split(dataset, lengths: Sequence, generator=None) -> list:
    """Split ``dataset`` into random non-overlapping ``Subset``s of the given lengths
    (or fractions summing to 1, the remainder spread round-robin, as PyTorch)."""
    n = len(dataset)
    if math.isclose(sum(lengths), 1) and sum(lengths) <= 1:
        sizes = [int(math.floor(n * frac)) for frac in lengths]
        for i in range(n - sum(sizes)):
            sizes[i % len(sizes)] += 1
        lengths = sizes
    if sum(lengths) != n:
        raise ValueError("Sum of input lengths does not equal the length of the input dataset!")
    perm = eager.randperm(n, generator=generator).tolist()
    out, offset = [], 0
    for length in lengths:
        out.append(Subset(dataset, perm[offset : offset + length]))
        offset += length
    return out


def default_collate(batch: list) -> Any:
    """Stack a list of samples into a batch: tensors stacked along a new dim 0, numbers
    to a tensor, tuples and lists per field (as a list), dicts per key."""
    elem = batch[0]
    if isinstance(elem, eager.Tensor):
        return eager.stack(batch, 0)
    if type(elem).__module__ == "numpy" and hasattr(elem, "shape"):
        return eager.stack([eager.as_tensor(b) for b in batch], 0)
    if isinstance(elem, bool):
        return eager.tensor(batch)
    if isinstance(elem, float):
        return eager.tensor(batch, dtype=eager.float64)
    if isinstance(elem, int):
        return eager.tensor(batch)
    if isinstance(elem, (str, bytes)):
        return batch
    if isinstance(elem, dict):
        return {key: default_collate([d[key] for d in batch]) for key in elem}
    if isinstance(elem, tuple) and hasattr(elem, "_fields"):
        return type(elem)(*(default_collate(list(s)) for s in zip(*batch)))
    if isinstance(elem, (tuple, list)):
        if any(len(e) != len(elem) for e in batch):
            raise RuntimeError("each element in list of batch should be of equal size")
        return [default_collate(list(s)) for s in zip(*batch)]
    raise TypeError(
        "default_collate: batch must contain tensors, numpy arrays, numbers, dicts or "
        f"lists; found {type(elem)}"
    )


class DataLoader:
    """Batches of a dataset, in order or shuffled (a new permutation every epoch)."""

    def __init__(
        self,
        dataset,
        batch_size: Optional[int] = 1,
        shuffle: Optional[bool] = None,
        sampler=None,
        batch_sampler=None,
        num_workers: int = 0,
        collate_fn=None,
        pin_memory: bool = False,
        drop_last: bool = False,
        timeout: float = 0,
        worker_init_fn=None,
        generator=None,
        **_kw,
    ) -> None:
        if sampler is not None or batch_sampler is not None:
            raise NotImplementedError("DataLoader: sampler/batch_sampler are not supported")
        if batch_size is not None and (not isinstance(batch_size, int) or batch_size <= 0):
            raise ValueError(
                f"batch_size should be a positive integer value, but got batch_size={batch_size}"
            )
        self.dataset = dataset
        self.batch_size = batch_size
        self.shuffle = bool(shuffle)
        self.drop_last = drop_last
        self.num_workers = num_workers
        self.collate_fn = collate_fn if collate_fn is not None else default_collate
        self.generator = generator

    def _indices(self) -> list:
        n = len(self.dataset)
        if self.shuffle:
            return eager.randperm(n, generator=self.generator).tolist()
        return list(range(n))

    def __iter__(self) -> Iterator:
        idx = self._indices()
        if self.batch_size is None:
            for i in idx:
                yield self.dataset[i]
            return
        bs = self.batch_size
        for s in range(0, len(idx), bs):
            chunk = idx[s : s + bs]
            if len(chunk) < bs and self.drop_last:
                return
            yield self.collate_fn([self.dataset[i] for i in chunk])

    def __len__(self) -> int:
        n = len(self.dataset)
        if self.batch_size is None:
            return n
        return n // self.batch_size if self.drop_last else math.ceil(n / self.batch_size)
