"""MIG catalogue: per GPU product, its MIG profiles, their slices and valid placements.

Facts come from docs/MIG.md, which cites: the NVIDIA MIG User Guide "Supported MIG Profiles" tables [UG],
real `nvidia-smi mig -lgipp` outputs [LGIPP] (A100-40GB in the User Guide; H100-80GB HBM3 in public mig-parted
and gpu-operator issues), and NVIDIA/mig-parted deployments/systemd/config-default.yaml [MP] for PCI device ids.
Anything not confirmed that way is flagged: `placements_confirmed=False`, `inferred=...`.
Unknown products raise UnknownProductError; nothing is guessed.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cached_property


class UnknownProductError(ValueError):
    """A GPU product (or profile) that the catalogue does not know."""


@dataclass(frozen=True)
class Profile:
    """One GPU-instance profile on one product."""

    name: str  # as advertised: nvidia.com/mig-<name>
    id: int  # GPU instance profile id (nvidia-smi mig -lgip)
    compute: int  # compute slices out of 7
    memory: int  # memory slices out of 8; also the placement size
    starts: tuple[int, ...]  # valid placement starts; the instance occupies memory slices [start, start+memory)
    max_per_gpu: int

    @property
    def placements(self) -> tuple[tuple[int, int], ...]:
        return tuple((s, self.memory) for s in self.starts)


@dataclass(frozen=True)
class Product:
    key: str  # catalogue key, e.g. "H100-80GB"
    gfd_names: tuple[str, ...]  # values of nvidia.com/gpu.product
    pci_ids: tuple[str, ...]  # mig-parted device-filter ids
    profiles: tuple[Profile, ...]
    placements_confirmed: bool  # True only where real `-lgipp` output confirmed the placements
    inferred: str  # what is inferred or unconfirmed for this product ("" when nothing)

    def __hash__(self) -> int:  # cheap: products are used as cache keys on the planner's hot path
        return hash(self.key)

    @cached_property
    def _names(self) -> dict[str, Profile | None]:
        return {p.name: p for p in self.profiles}

    def profile(self, name: str) -> Profile:
        """The profile a node advertises as `name` (exact, or the same shape under a driver/SKU variant name)."""
        found = self._names.get(name, False)
        if found is False:
            found = self._names[name] = _match_variant(self, name)
        if found is None:
            raise UnknownProductError(f"profile {name!r} is not a MIG profile of {self.key}")
        return found

    def offers(self, name: str) -> bool:
        """Whether `name` is exactly this product's name for a profile: what a pod's resource request must match."""
        return name in self._names and self._names[name] is not None and self._names[name].name == name

    def has_profile(self, name: str) -> bool:
        try:
            self.profile(name)
        except UnknownProductError:
            return False
        return True


_NAME = re.compile(r"^(\d)g\.(\d+)gb(\+me)?$")


def _match_variant(product: Product, name: str) -> Profile | None:
    # MIG.md: names vary by driver and SKU (7g.79gb vs 7g.80gb; GB200 1g.23gb vs 1g.24gb): match the profile with the
    # same compute slices and media flag whose memory in GB is within 1 GB or 5%, if exactly one matches.
    m = _NAME.match(name)
    if m is None:
        return None
    compute, gb, media = int(m.group(1)), int(m.group(2)), bool(m.group(3))
    hits = []
    for p in product.profiles:
        pm = _NAME.match(p.name)
        assert pm is not None
        same_shape = int(pm.group(1)) == compute and bool(pm.group(3)) == media
        if same_shape and abs(int(pm.group(2)) - gb) <= max(1, 0.05 * gb):
            hits.append(p)
    return hits[0] if len(hits) == 1 else None


# Profile table, MIG.md "Profiles" [UG]: (profile id, compute slices, memory slices, valid starts, max per GPU).
# The placements {start}:size are [LGIPP] for A100-40GB and H100-80GB; for the other products they are inferred from
# the identical profile ids and memory fractions (MIG.md says so).
_SHAPES = (
    (19, 1, 1, (0, 1, 2, 3, 4, 5, 6), 7),  # 1g, 1/8 memory; slice 7 is never a start
    (20, 1, 1, (0, 1, 2, 3, 4, 5, 6), 1),  # 1g+me (media extensions): one per GPU
    (15, 1, 2, (0, 2, 4, 6), 4),  # 1g, 2/8 memory
    (14, 2, 2, (0, 2, 4), 3),  # 2g
    (9, 3, 4, (0, 4), 2),  # 3g
    (5, 4, 4, (0,), 1),  # 4g
    (0, 7, 8, (0,), 1),  # 7g, whole GPU
)


def _profiles(names: tuple[str, ...]) -> tuple[Profile, ...]:
    return tuple(
        Profile(name=n, id=pid, compute=c, memory=m, starts=s, max_per_gpu=mx)
        for n, (pid, c, m, s, mx) in zip(names, _SHAPES, strict=True)
    )


# Names per product in _SHAPES order (ids 19, 20, 15, 14, 9, 5, 0), from MIG.md's table [UG].
_A100_40 = ("1g.5gb", "1g.5gb+me", "1g.10gb", "2g.10gb", "3g.20gb", "4g.20gb", "7g.40gb")
_X_80 = ("1g.10gb", "1g.10gb+me", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb")
_H200 = ("1g.18gb", "1g.18gb+me", "1g.35gb", "2g.35gb", "3g.71gb", "4g.71gb", "7g.141gb")
_B200 = ("1g.23gb", "1g.23gb+me", "1g.45gb", "2g.45gb", "3g.90gb", "4g.90gb", "7g.180gb")
_H20 = ("1g.12gb", "1g.12gb+me", "1g.24gb", "2g.24gb", "3g.48gb", "4g.48gb", "7g.96gb")  # whole column inferred

# GFD product names (nvidia.com/gpu.product) are not in MIG.md. "NVIDIA-H100-80GB-HBM3" is in DESIGN.md;
# "NVIDIA-A100-SXM4-80GB" and "NVIDIA-H200" appear in public manifests; the rest are inferred from the [MP] product
# names (assuming GFD's "NVIDIA-" prefix and dashes for spaces) and are marked so in `inferred`.
PRODUCTS: dict[str, Product] = {
    p.key: p
    for p in (
        Product(
            key="A100-40GB",
            gfd_names=("NVIDIA-A100-SXM4-40GB", "NVIDIA-A100-PCIE-40GB"),
            pci_ids=("0x20B010DE", "0x20F110DE"),  # [MP] A100-SXM4-40GB, A100-PCIE-40GB
            profiles=_profiles(_A100_40),
            placements_confirmed=True,  # [LGIPP] MIG User Guide example
            inferred="GFD names inferred from [MP] product names",  # placements themselves are [LGIPP]
        ),
        Product(
            key="A100-80GB",
            gfd_names=("NVIDIA-A100-SXM4-80GB", "NVIDIA-A100-PCIE-80GB"),
            pci_ids=("0x20B210DE", "0x20B510DE"),  # [MP] A100-SXM4-80GB, A100-PCIE-80GB
            profiles=_profiles(_X_80),
            placements_confirmed=False,
            inferred="placements inferred from profile ids; GFD name of the PCIe card inferred",
        ),
        Product(
            key="H100-80GB",
            gfd_names=("NVIDIA-H100-80GB-HBM3",),
            pci_ids=("0x233010DE",),  # [MP] H100 SXM5 80GB
            profiles=_profiles(_X_80),
            placements_confirmed=True,  # [LGIPP] H100-80GB HBM3 output in public issues
            inferred="",  # GFD name from DESIGN.md, PCI id [MP], placements [LGIPP]
        ),
        Product(
            key="H200-141GB",
            gfd_names=("NVIDIA-H200", "NVIDIA-H200-NVL"),
            pci_ids=("0x233510DE", "0x233B10DE"),  # [MP] H200, H200 NVL
            profiles=_profiles(_H200),
            placements_confirmed=False,
            inferred="placements inferred from profile ids; GFD name of H200 NVL inferred",
        ),
        Product(
            key="H20-96GB",
            gfd_names=("NVIDIA-H20",),
            pci_ids=("0x232910DE",),  # [MP] group "H100-96GB, PG506-96GB, GH200, H20": unconfirmed for H20
            profiles=_profiles(_H20),
            placements_confirmed=False,
            inferred="profile names, placements, GFD name and PCI id all inferred (MIG.md marks the H20 column)",
        ),
        Product(
            key="B200-180GB",
            gfd_names=("NVIDIA-B200",),
            pci_ids=("0x290110DE",),  # [MP] B200
            profiles=_profiles(_B200),
            placements_confirmed=False,
            inferred="placements inferred from profile ids; GFD name inferred",
        ),
    )
}

_BY_GFD = {g: p for p in PRODUCTS.values() for g in p.gfd_names}
_BY_PCI = {i.lower(): p for p in PRODUCTS.values() for i in p.pci_ids}


def product(name: str) -> Product:
    """Product by catalogue key ("H100-80GB") or GFD name ("NVIDIA-H100-80GB-HBM3"); refuses anything else."""
    found = PRODUCTS.get(name) or _BY_GFD.get(name)
    if found is None:
        known = ", ".join(sorted(_BY_GFD))
        raise UnknownProductError(f"GPU product {name!r} is not in the MIG catalogue (known: {known})")
    return found


def product_by_pci_id(pci_id: str) -> Product:
    found = _BY_PCI.get(pci_id.lower())
    if found is None:
        raise UnknownProductError(f"PCI device id {pci_id!r} is not in the MIG catalogue")
    return found


def resource_name(profile_name: str) -> str:
    """Extended resource advertised for a profile under the device plugin's mixed strategy."""
    return f"nvidia.com/mig-{profile_name}"
