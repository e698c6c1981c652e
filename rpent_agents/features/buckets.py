"""Batch-size buckets: the fixed batch shapes of the feature models' fast paths.

A fast path pads each batch up to a bucket, so it compiles (pi0.5, `features.pi05`) or captures
(the built-in VLA's CUDA graphs, `features.graphed`) once per bucket instead of once per batch
size, and cuts the padded rows off its outputs.
"""

from __future__ import annotations

from collections.abc import Sequence

BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64)


def checked_buckets(batch_buckets: Sequence[int]) -> tuple[int, ...]:
    """The buckets sorted and without repeats.

    Raises:
        ValueError: When `batch_buckets` is empty or holds a size below 1.
    """
    buckets = tuple(sorted({int(size) for size in batch_buckets}))
    if not buckets or buckets[0] < 1:
        raise ValueError(
            f"batch_buckets={tuple(batch_buckets)}: give one batch size or more, each >= 1"
            " (e.g. (1, 8, 64))"
        )
    return buckets


def bucket_size(count: int, buckets: Sequence[int]) -> int:
    """The smallest bucket holding `count` rows, else the next multiple of the largest.

    Example:
        >>> bucket_size(3, BATCH_BUCKETS), bucket_size(65, BATCH_BUCKETS)
        (4, 128)
    """
    fitting = [bucket for bucket in buckets if bucket >= count]
    return fitting[0] if fitting else -(-count // buckets[-1]) * buckets[-1]


def batch_pieces(count: int, buckets: Sequence[int]) -> list[slice]:
    """`count` rows cut into pieces of at most the largest bucket, in order.

    Example:
        >>> batch_pieces(130, (1, 64))
        [slice(0, 64, None), slice(64, 128, None), slice(128, 130, None)]
    """
    largest = buckets[-1]
    return [slice(start, min(start + largest, count)) for start in range(0, count, largest)]
