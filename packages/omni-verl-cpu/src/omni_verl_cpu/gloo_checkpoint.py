"""A gloo weight-sync backend for verl's separated rollout: ``checkpoint_engine.backend=omni_gloo``.

When rollout and training run on their own ranks (verl's one-step-off trainer), verl moves
the actor's weights to the rollout replicas through a checkpoint engine
(``verl.checkpoint_engine``): actor rank 0 broadcasts them in buckets to one
``CheckpointEngineWorker`` per rollout rank, which hands them to its server. verl ships NCCL,
HCCL, NIXL and Mooncake engines, all for accelerators. This one broadcasts over gloo, so the
same trainer runs on the CPU (``omni_local`` replicas); it registers itself in verl's
``CheckpointEngineRegistry``, the documented place for a backend
(``checkpoint_engine.custom_backend_module`` names this module).

Each sync builds its own group (verl calls ``prepare``, ``build_topology``,
``init_process_group``, then the transfer, then ``finalize``): a TCP store served by actor
rank 0 on a free port, and a gloo process group on it, apart from the ranks' default group.
Actor ranks other than 0 stay out of the group but still walk the weight stream, since
producing each full tensor is collective over the actor's shards.

A bucket goes out as three broadcasts: its header's length, the pickled header (each
tensor's name, dtype, shape and place in the bucket, and whether it is the last bucket),
then the bucket's bytes. A tensor larger than a bucket travels in chunks (verl's
``split_weight_chunks`` / ``merge_weight_chunks``).
"""

from __future__ import annotations

import asyncio
import pickle
from collections.abc import AsyncGenerator, AsyncIterator, Generator, Iterable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist
from verl.checkpoint_engine.base import (
    CheckpointEngine,
    CheckpointEngineRegistry,
    TensorMeta,
    merge_weight_chunks,
    split_weight_chunks,
)

from omni_verl_cpu import GLOO_BACKEND

SYNC_TIMEOUT = timedelta(minutes=10)
"""How long a rank waits for the others to join a sync or a broadcast."""


ALIGNMENT = 16
"""Each chunk starts at a multiple of this in its bucket: the receiver views its bytes as the
tensor's dtype, which needs an offset divisible by the dtype's size."""


def aligned(offset: int) -> int:
    return -(-offset // ALIGNMENT) * ALIGNMENT


@dataclass(frozen=True)
class StoreAddress:
    """Where actor rank 0 serves this sync's TCP store."""

    host: str
    port: int


def free_address() -> StoreAddress:
    """This node's address and a free port on it."""
    import ray
    from verl.utils.net_utils import get_free_port

    host = ray.util.get_node_ip_address().strip("[]")
    port, _ = get_free_port(host)
    return StoreAddress(host, port)


@CheckpointEngineRegistry.register(GLOO_BACKEND)
class GlooCheckpointEngine(CheckpointEngine):
    """Broadcasts the actor's weights from actor rank 0 to every rollout rank over gloo.

    Args:
        bucket_size: bytes per broadcast (``checkpoint_engine.update_weights_bucket_megabytes``).
        is_master: this is actor rank 0, the sender (verl sets it on the actor side only).
    """

    def __init__(self, bucket_size: int, is_master: bool = False, **_: Any) -> None:
        if bucket_size <= 0:
            raise ValueError(f"checkpoint_engine bucket size must be positive, got {bucket_size} bytes.")
        self.bucket_size = bucket_size
        self.is_master = is_master
        self.rank: int | None = None
        self.world_size: int | None = None
        self._group: Any = None
        self._store: Any = None
        self._empty: list[tuple[str, torch.Size, torch.dtype]] = []

    def prepare(self) -> dict[str, Any]:
        return {"address": free_address()} if self.is_master else {}

    @classmethod
    def build_topology(
        cls, actor_wg_world_size: int, rollout_world_size: int, metadata: list[Any]
    ) -> tuple[dict[str, list[Any]], dict[str, list[Any]]]:
        address = metadata[0].get("address")
        if not isinstance(address, StoreAddress):
            raise ValueError(f"{GLOO_BACKEND}: actor rank 0 must serve the sync's store; it reported {address!r}.")
        world_size = 1 + rollout_world_size
        actor: dict[str, list[Any]] = {
            "rank": [0] + [-1] * (actor_wg_world_size - 1),
            "world_size": [world_size] * actor_wg_world_size,
            "address": [address] * actor_wg_world_size,
        }
        rollout: dict[str, list[Any]] = {
            "rank": list(range(1, world_size)),
            "world_size": [world_size] * rollout_world_size,
            "address": [address] * rollout_world_size,
        }
        return actor, rollout

    def init_process_group(  # type: ignore[override]  # verl passes build_topology's keywords
        self, rank: int, world_size: int, address: StoreAddress
    ) -> None:
        self.rank, self.world_size = rank, world_size
        if rank < 0:
            return
        self._store = dist.TCPStore(
            address.host, address.port, world_size, is_master=rank == 0, timeout=SYNC_TIMEOUT, wait_for_workers=False
        )
        self._group = dist.ProcessGroupGloo(dist.PrefixStore(GLOO_BACKEND, self._store), rank, world_size, SYNC_TIMEOUT)

    def finalize(self) -> None:
        self._group = None
        self._store = None
        self.rank = self.world_size = None

    @torch.no_grad()
    async def send_weights(self, weights: Iterable[tuple[str, torch.Tensor]], global_steps: int | None = None) -> None:
        if self.rank is None:
            raise RuntimeError(f"{GLOO_BACKEND}: send_weights before init_process_group.")
        if self.rank != 0:
            for _ in weights:  # each full tensor is gathered across the actor's ranks
                pass
            return
        bucket: list[tuple[TensorMeta, torch.Tensor]] = []
        empty: list[tuple[str, torch.Size, torch.dtype]] = []
        filled = 0
        async for meta, chunk in split_weight_chunks(_set_aside_empty(weights, empty), self.bucket_size):
            assert chunk is not None  # meta_only=False
            offset = aligned(filled)
            if bucket and offset + meta.chunk_size > self.bucket_size:
                await asyncio.to_thread(self._broadcast_bucket, bucket, filled, False)
                bucket, offset = [], 0
            meta.offset = offset
            bucket.append((meta, chunk.to("cpu").clone()))  # the stream may reuse its buffer
            filled = offset + meta.chunk_size
        await asyncio.to_thread(self._broadcast_bucket, bucket, filled, True, empty)

    def _broadcast_bucket(
        self, bucket: list[tuple[TensorMeta, torch.Tensor]], size: int, last: bool,
        empty: list[tuple[str, torch.Size, torch.dtype]] | None = None,
    ) -> None:
        header = pickle.dumps({"metas": [meta for meta, _ in bucket], "last": last, "empty": empty or []})
        payload = torch.zeros(size, dtype=torch.uint8)
        for meta, chunk in bucket:
            payload[meta.offset : meta.offset + meta.chunk_size] = chunk
        self._broadcast(torch.tensor([len(header), payload.numel()], dtype=torch.int64))
        self._broadcast(torch.frombuffer(bytearray(header), dtype=torch.uint8))
        self._broadcast(payload)

    def _broadcast(self, tensor: torch.Tensor) -> None:
        if tensor.numel():
            self._group.broadcast([tensor], dist.BroadcastOptions()).wait()

    @torch.no_grad()
    async def receive_weights(  # type: ignore[override]  # an async generator, as verl's NCCL engine's
        self, global_steps: int | None = None
    ) -> AsyncGenerator[tuple[str, torch.Tensor], None]:
        if self.rank is None or self.rank < 1:
            raise RuntimeError(f"{GLOO_BACKEND}: receive_weights on a rank that does not receive ({self.rank}).")
        chunks: Any = self._chunks()  # verl hints a Generator; it iterates it with ``async for``
        async for name, weight in merge_weight_chunks(chunks, self.bucket_size):
            yield name, weight

        for name, shape, dtype in self._empty:
            yield name, torch.empty(shape, dtype=dtype)

    async def _chunks(self) -> AsyncIterator[tuple[TensorMeta, torch.Tensor]]:
        while True:
            header, payload = await asyncio.to_thread(self._receive_bucket)
            for meta in header["metas"]:
                yield meta, payload[meta.offset : meta.offset + meta.chunk_size]
            if header["last"]:
                self._empty = header["empty"]
                return

    def _receive_bucket(self) -> tuple[dict[str, Any], torch.Tensor]:
        sizes = torch.zeros(2, dtype=torch.int64)
        self._broadcast(sizes)
        header = torch.empty(int(sizes[0]), dtype=torch.uint8)
        self._broadcast(header)
        payload = torch.empty(int(sizes[1]), dtype=torch.uint8)  # a fresh buffer per bucket: yielded views stay valid
        self._broadcast(payload)
        return pickle.loads(header.numpy().tobytes()), payload


def _set_aside_empty(
    weights: Iterable[tuple[str, torch.Tensor]], empty: list[tuple[str, torch.Size, torch.dtype]]
) -> Generator[tuple[str, torch.Tensor], None, None]:
    """``weights`` without its empty tensors, which have no bytes to chunk (verl's
    ``split_weight_chunks`` yields nothing for them); they are listed in ``empty`` instead and
    travel in the last bucket's header."""
    for name, tensor in weights:
        if tensor.numel() == 0:
            empty.append((name, tensor.shape, tensor.dtype))
        else:
            yield name, tensor
