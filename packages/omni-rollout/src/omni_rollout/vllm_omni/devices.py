"""Which GPUs each pipeline stage of one rollout replica runs on.

A node runs ``num_replicas`` rollout replicas side by side, each owning ``gpus_per_replica``
consecutive entries of the launcher's visible devices. Replica ``r`` owns the logical
indices ``r * G .. r * G + G - 1``, so two replicas never share a device.

Inside a replica the policy stage (the one whose weights are trained) takes the first
``tensor_parallel_size`` devices. Every other stage runs with tensor parallel size 1 on
the next free device of the replica; when none is left it shares the replica's last
device. That is the placement vLLM-Omni's own Qwen3-Omni deploy uses on two GPUs (thinker
on one, talker and code2wav together on the other) and it degrades to everything on one
GPU in colocated single-GPU runs.

Device ids are *logical*: positions in the launcher's ``CUDA_VISIBLE_DEVICES``, which is
what vLLM-Omni's ``devices`` field means; it maps them to physical ids itself.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from omni_contracts import StageConfig


class DevicePlacementError(ValueError):
    """The requested replica layout does not fit the visible devices."""


@dataclass(frozen=True)
class ReplicaLayout:
    """Where one rollout replica sits among the node's visible devices.

    Attributes:
        replica_rank: this replica's index, ``0 <= replica_rank < num_replicas``.
        num_replicas: replicas sharing the node's visible devices.
        gpus_per_replica: devices each replica owns.
        tensor_parallel_size: tensor parallel size of the policy stage.
        num_visible_devices: how many devices the launcher sees; ``None`` skips the check.
    """

    replica_rank: int = 0
    num_replicas: int = 1
    gpus_per_replica: int = 1
    tensor_parallel_size: int = 1
    num_visible_devices: int | None = None

    def __post_init__(self) -> None:
        errors = []
        if self.num_replicas < 1:
            errors.append(f"num_replicas must be >= 1, got {self.num_replicas}")
        if not 0 <= self.replica_rank < max(self.num_replicas, 1):
            errors.append(
                f"replica_rank {self.replica_rank} is outside 0..{self.num_replicas - 1}"
            )
        if self.gpus_per_replica < 1:
            errors.append(f"gpus_per_replica must be >= 1, got {self.gpus_per_replica}")
        if self.tensor_parallel_size < 1:
            errors.append(f"tensor_parallel_size must be >= 1, got {self.tensor_parallel_size}")
        elif self.tensor_parallel_size > self.gpus_per_replica:
            errors.append(
                f"tensor_parallel_size {self.tensor_parallel_size} exceeds gpus_per_replica "
                f"{self.gpus_per_replica}; give each replica at least as many GPUs as its TP size"
            )
        needed = self.num_replicas * self.gpus_per_replica
        if self.num_visible_devices is not None and needed > self.num_visible_devices:
            errors.append(
                f"{self.num_replicas} replicas x {self.gpus_per_replica} GPUs need {needed} "
                f"devices but only {self.num_visible_devices} are visible; lower num_replicas "
                "or gpus_per_replica, or widen CUDA_VISIBLE_DEVICES"
            )
        if errors:
            raise DevicePlacementError("Invalid replica layout: " + "; ".join(errors) + ".")

    @classmethod
    def from_visible_devices(
        cls,
        visible: str | Sequence[str],
        *,
        replica_rank: int,
        num_replicas: int,
        tensor_parallel_size: int = 1,
    ) -> ReplicaLayout:
        """Split the launcher's visible devices (``"4,5,6,7"`` or a list) evenly over replicas.

        A replica process that already sees only its own GPUs passes ``replica_rank=0,
        num_replicas=1``.

        Raises:
            DevicePlacementError: the devices do not split evenly, or nothing is visible.
        """
        ids = [d.strip() for d in visible.split(",")] if isinstance(visible, str) else list(visible)
        ids = [d for d in ids if d]
        if not ids or num_replicas < 1 or len(ids) % num_replicas:
            raise DevicePlacementError(
                f"{len(ids)} visible devices ({','.join(ids) or 'none'}) do not split evenly "
                f"over {num_replicas} replicas; make CUDA_VISIBLE_DEVICES a multiple of the "
                "replica count."
            )
        return cls(replica_rank, num_replicas, len(ids) // num_replicas, tensor_parallel_size,
                   num_visible_devices=len(ids))

    def replica_devices(self) -> tuple[int, ...]:
        """The logical device ids this replica owns (disjoint from every other replica's)."""
        first = self.replica_rank * self.gpus_per_replica
        return tuple(range(first, first + self.gpus_per_replica))


def physical_devices(logical: Sequence[int], visible: str | Sequence[str]) -> tuple[str, ...]:
    """The physical ids behind logical ones, as vLLM-Omni will map them (for logs and checks)."""
    ids = [d.strip() for d in visible.split(",")] if isinstance(visible, str) else list(visible)
    ids = [d for d in ids if d]
    out_of_range = [i for i in logical if not 0 <= i < len(ids)]
    if out_of_range:
        raise DevicePlacementError(
            f"Logical devices {out_of_range} are outside the {len(ids)} visible devices {ids}."
        )
    return tuple(ids[i] for i in logical)


@dataclass(frozen=True)
class StagePlacement:
    """Devices and tensor parallel size of one stage."""

    stage_id: int
    devices: tuple[int, ...]
    tensor_parallel_size: int

    @property
    def devices_str(self) -> str:
        """The ``"0,1"`` form vLLM-Omni's deploy config expects."""
        return ",".join(str(device) for device in self.devices)


def place_stages(
    stages: Sequence[StageConfig], layout: ReplicaLayout, policy_stage_id: int
) -> tuple[StagePlacement, ...]:
    """Assign devices to every stage of one replica (rule in the module docstring).

    Raises:
        DevicePlacementError: ``policy_stage_id`` is not one of ``stages``.
    """
    ids = [stage.stage_id for stage in stages]
    if policy_stage_id not in ids:
        raise DevicePlacementError(
            f"Policy stage {policy_stage_id} is not among the pipeline's stages {ids}; "
            "the rollout adapter's policy_stage_id must name one of its stages."
        )
    owned = layout.replica_devices()
    tp = layout.tensor_parallel_size
    free = list(owned[tp:])
    placements = []
    for stage in stages:
        if stage.stage_id == policy_stage_id:
            placements.append(StagePlacement(stage.stage_id, owned[:tp], tp))
            continue
        device = free.pop(0) if free else owned[-1]
        placements.append(StagePlacement(stage.stage_id, (device,), 1))
    return tuple(placements)
