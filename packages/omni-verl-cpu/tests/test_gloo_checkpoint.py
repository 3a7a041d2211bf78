"""The ``omni_gloo`` checkpoint engine: actor rank 0 broadcasts, every rollout rank receives
the same weights bit for bit; other actor ranks only walk the stream."""

from __future__ import annotations

import asyncio
import socket
import threading
from collections.abc import Iterator
from typing import Any

import pytest
import torch

pytest.importorskip("verl")

from omni_verl_cpu.gloo_checkpoint import (  # noqa: E402
    GLOO_BACKEND,
    GlooCheckpointEngine,
    StoreAddress,
)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def model_weights() -> dict[str, torch.Tensor]:
    """Mixed dtypes and odd sizes (a bf16 tensor of odd length before fp32 ones), one tensor
    larger than a bucket, one empty."""
    generator = torch.Generator().manual_seed(0)
    return {
        "embed.weight": torch.randn(37, 16, generator=generator),
        "norm.weight": torch.randn(7, generator=generator).to(torch.bfloat16),
        "proj.weight": torch.randn(5, 3, generator=generator),
        "big.weight": torch.randn(300, 11, generator=generator),  # 13200 bytes: four chunks of 4 KiB
        "steps": torch.tensor([3, 1, 4], dtype=torch.int64),
        "empty": torch.empty(0, 4),
    }


def run_sync(weights: dict[str, torch.Tensor], actor_ranks: int, rollout_ranks: int, bucket_size: int) -> dict[str, Any]:
    """One sync as verl's ``CheckpointEngineManager`` runs it, each rank in a thread."""
    actors = [GlooCheckpointEngine(bucket_size, is_master=i == 0) for i in range(actor_ranks)]
    rollouts = [GlooCheckpointEngine(bucket_size) for _ in range(rollout_ranks)]
    # Actor rank 0 serves the store on this machine (prepare() would ask Ray for the node's address).
    metadata = [engine.prepare() if i else {"address": StoreAddress("127.0.0.1", free_port())} for i, engine in enumerate(actors)]
    metadata += [engine.prepare() for engine in rollouts]
    actor_kwargs, rollout_kwargs = GlooCheckpointEngine.build_topology(actor_ranks, rollout_ranks, metadata)
    walked: list[int] = []
    results: dict[str, Any] = {}

    def stream(rank: int) -> Iterator[tuple[str, torch.Tensor]]:
        for name, tensor in weights.items():
            walked.append(rank)
            yield name, tensor

    async def receive(engine: GlooCheckpointEngine) -> dict[str, torch.Tensor]:
        return {name: tensor.clone() async for name, tensor in engine.receive_weights()}

    def actor(i: int) -> None:
        actors[i].init_process_group(**{k: v[i] for k, v in actor_kwargs.items()})
        asyncio.run(actors[i].send_weights(stream(i), global_steps=1))
        actors[i].finalize()

    def rollout(i: int) -> None:
        rollouts[i].init_process_group(**{k: v[i] for k, v in rollout_kwargs.items()})
        results[f"rollout{i}"] = asyncio.run(receive(rollouts[i]))
        rollouts[i].finalize()

    threads = [threading.Thread(target=actor, args=(i,)) for i in range(actor_ranks)]
    threads += [threading.Thread(target=rollout, args=(i,)) for i in range(rollout_ranks)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
        assert not thread.is_alive(), "a rank hung"
    results["walked"] = walked
    return results


def test_every_rollout_rank_receives_the_weights_bit_for_bit() -> None:
    weights = model_weights()
    results = run_sync(weights, actor_ranks=2, rollout_ranks=2, bucket_size=4096)
    for i in range(2):
        received = results[f"rollout{i}"]
        assert sorted(received) == sorted(weights)  # empty tensors come last
        for name, tensor in weights.items():
            assert received[name].dtype == tensor.dtype and received[name].shape == tensor.shape, name
            assert torch.equal(received[name], tensor), name
    # Both actor ranks walked the whole stream (gathering a sharded tensor is collective).
    assert sorted(results["walked"]) == [0] * len(weights) + [1] * len(weights)


def test_a_second_sync_carries_the_new_weights() -> None:
    weights = model_weights()
    run_sync(weights, actor_ranks=1, rollout_ranks=1, bucket_size=1 << 20)
    updated = {name: tensor + 1 for name, tensor in weights.items()}
    received = run_sync(updated, actor_ranks=1, rollout_ranks=1, bucket_size=1 << 20)["rollout0"]
    assert all(torch.equal(received[name], updated[name]) for name in weights)


def test_topology_puts_actor_rank_0_first_and_leaves_the_other_actor_ranks_out() -> None:
    address = StoreAddress("10.0.0.1", 1234)
    actor, rollout = GlooCheckpointEngine.build_topology(3, 2, [{"address": address}, {}, {}, {}, {}])
    assert actor["rank"] == [0, -1, -1] and rollout["rank"] == [1, 2]
    assert set(actor["world_size"] + rollout["world_size"]) == {3}
    assert set(actor["address"] + rollout["address"]) == {address}
    with pytest.raises(ValueError, match="actor rank 0 must serve"):
        GlooCheckpointEngine.build_topology(1, 1, [{}, {}])


def test_it_is_registered_under_its_name() -> None:
    from verl.checkpoint_engine import CheckpointEngineRegistry

    assert CheckpointEngineRegistry.get(GLOO_BACKEND) is GlooCheckpointEngine
