"""Named hardware profiles: what a device computes and how fast its links move data.

The search prices a plan in bytes by default.  A step's time also depends on
which link a collective crosses and on the arithmetic each device runs, and a
plan that recomputes activations trades exactly those: so a profile turns
the price into seconds (`CostModel`), an alpha-beta model per mesh axis for
the collectives and the contractions' FLOPs at the chip's peak.

A profile knows two kinds of link: the fast one within a node (NVLink within
an HGX board of 8 H100s; ICI within a TPU slice) and the slow one between
nodes (InfiniBand; the data-center network between slices).  A mesh axis is
*near* when every group of devices along it sits in one node, device ids
taken in groups of `Hardware.devices_per_node` (the order NCCL and PJRT
number devices in), else *far*.  So ``data=8,model=8`` on H100 nodes runs
``model`` over NVLink and ``data`` over InfiniBand, as Megatron-LM lays out
tensor parallelism within a node.

The figures are the vendors' published peaks (dense bf16, one direction of
each link) and typical collective latencies; `override` replaces any of them,
and ``--bandwidth``/``--latency`` set an axis directly.
"""

from __future__ import annotations

import dataclasses
import itertools

from stablehlo_spmd.auto_sharding.graph import CostModel
from stablehlo_spmd.mesh import Mesh


@dataclasses.dataclass(frozen=True)
class Link:
    bandwidth: float    # bytes per second one device sends over it
    latency: float      # seconds a collective over it costs before any byte


@dataclasses.dataclass(frozen=True)
class Hardware:
    name: str
    flops: float                # dense bf16 FLOP/s per device
    memory: float               # bytes of device memory
    devices_per_node: int       # devices the near link joins; 0: all of them
    near: Link
    far: Link

    def link(self, mesh: Mesh, axis: str) -> Link:
        """The link a collective over `axis` crosses: near where every group
        of devices along it is within one node."""
        if not self.devices_per_node:
            return self.near
        node = self.devices_per_node
        for group in _axis_groups(mesh, axis):
            if len({device // node for device in group}) > 1:
                return self.far
        return self.near

    def cost_model(self, mesh: Mesh, **target) -> CostModel:
        """Seconds on this hardware for `mesh` (`target`: `CostModel`'s memory fields)."""
        links = {axis: self.link(mesh, axis) for axis in mesh.axis_names}
        return CostModel(tuple((axis, link.bandwidth) for axis, link in links.items()),
                         latencies=tuple((axis, link.latency) for axis, link in links.items()),
                         flops_per_second=self.flops, **target)

    def override(self, **fields) -> Hardware:
        """This profile with some figures replaced: ``flops``, ``memory``,
        ``devices_per_node``, and ``near_bandwidth``, ``far_latency``, ..."""
        links = {}
        for side in ("near", "far"):
            changed = {key[len(side) + 1:]: fields.pop(key) for key in list(fields)
                       if key.startswith(side + "_")}
            links[side] = dataclasses.replace(getattr(self, side), **changed)
        return dataclasses.replace(self, **fields, **links)


def _axis_groups(mesh: Mesh, axis: str) -> list[list[int]]:
    """The device ids along `axis`, one list per group (the other axes fixed)."""
    shape = list(mesh.mesh_shape)
    position = list(mesh.axis_names).index(axis)
    others = [range(n) if i != position else [None] for i, n in enumerate(shape)]
    groups = []
    for fixed in itertools.product(*others):
        index = list(fixed)
        group = []
        for k in range(shape[position]):
            index[position] = k
            flat = 0
            for i, n in zip(index, shape):
                flat = flat * n + i
            group.append(mesh.device_ids[flat])
        groups.append(group)
    return groups


GB = 1e9
PROFILES = {
    # H100 SXM5 on an HGX board: 989 TFLOP/s bf16 dense, 80 GiB of HBM3,
    # NVLink 4 at 900 GB/s both ways among 8 GPUs, one 400 Gb/s NDR
    # InfiniBand port per GPU between nodes.
    "h100": Hardware("h100", flops=989e12, memory=80 * 2**30, devices_per_node=8,
                     near=Link(450 * GB, 10e-6), far=Link(50 * GB, 25e-6)),
    # TPU v5p: 459 TFLOP/s bf16, 95 GB of HBM, 4,800 Gb/s of ICI per chip over
    # six links of a 3-D torus (a mesh axis rides one torus dimension's two
    # links); one slice holds every device, and slices talk over the
    # data-center network.
    "tpu-v5p": Hardware("tpu-v5p", flops=459e12, memory=95 * GB, devices_per_node=0,
                        near=Link(100 * GB, 5e-6), far=Link(6.25 * GB, 50e-6)),
}


def profile(name: str) -> Hardware:
    found = PROFILES.get(name.strip().lower())
    if found is None:
        raise ValueError(f"unknown hardware {name!r} (expected one of "
                         f"{', '.join(sorted(PROFILES))})")
    return found
