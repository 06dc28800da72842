from fractions import Fraction

import pytest

from superpod.core.dra.model import Device
from superpod.core.dra.selectors import SelectorError, Selectors, references
from superpod.core.dra.values import Version, parse_quantity

from .objects import GPU_CLASS_EXPRESSION, MIG_CLASS_EXPRESSION


@pytest.fixture(scope="module")
def selectors():
    return Selectors()


def h200(index: int = 0, **extra) -> Device:
    attributes = {"type": "gpu", "productName": "NVIDIA H200", "uuid": f"GPU-{index}", "architecture": "Hopper",
                  "cudaComputeCapability": Version("9.0.0"), "driverVersion": Version("570.86.15"),
                  "resource.kubernetes.io/pciBusID": f"0000:{index:02x}:00.0", **extra}
    return Device("gpu.nvidia.com", "node-1", f"gpu-{index}", attributes, {"memory": parse_quantity("143771Mi")})


def test_quantities_and_versions_read_exactly():
    assert parse_quantity("80Gi") == 80 * 2 ** 30
    assert parse_quantity("1.5k") == 1500 and parse_quantity("500m") == Fraction(1, 2)
    assert parse_quantity("1e3") == 1000 and parse_quantity("-2M") == -2_000_000
    with pytest.raises(ValueError):
        parse_quantity("80GB")
    assert Version("1.0.0-alpha") < Version("1.0.0-alpha.1") < Version("1.0.0-beta") < Version("1.0.0")
    assert Version("1.0.0-2") < Version("1.0.0-10") < Version("1.0.0-a")
    assert Version("1.2.3+build.1") == Version("1.2.3") and Version("550.54.15") > Version("535.161.8")
    with pytest.raises(ValueError):
        Version("01.2.3")


@pytest.mark.parametrize("expression, expected", [
    (GPU_CLASS_EXPRESSION, True),
    (MIG_CLASS_EXPRESSION, False),
    ('device.attributes["gpu.nvidia.com"].productName == "NVIDIA H200"', True),
    ("device.capacity['gpu.nvidia.com'].memory.compareTo(quantity('140Gi')) >= 0", True),
    ("device.capacity['gpu.nvidia.com'].memory.isGreaterThan(quantity('141Gi'))", False),
    ("device.capacity['gpu.nvidia.com'].memory == quantity('143771Mi')", True),
    ("device.attributes['gpu.nvidia.com'].driverVersion.isGreaterThan(semver('550.0.0'))", True),
    ("device.attributes['gpu.nvidia.com'].cudaComputeCapability.compareTo(semver('9.0.0')) == 0", True),
    ("device.attributes['gpu.nvidia.com'].driverVersion.major() >= 570", True),
    ("semver('v12', true) == semver('12.0.0')", True),
    ("quantity('1.5Gi').asInteger() == 1610612736 && !quantity('500m').isInteger()", True),
    ("device.attributes['resource.kubernetes.io'].pciBusID.startsWith('0000:03')", True),
    ("has(device.attributes['dra.example.com'].x)", False),  # an absent domain is an empty map
    ("'productName' in device.attributes['gpu.nvidia.com']", True),
    ("device.attributes['gpu.nvidia.com'].?clique.orValue('none') == 'none'", True),
    ("cel.bind(g, device.attributes['gpu.nvidia.com'], g.architecture.lowerAscii() == 'hopper')", True),
    ("device.attributes['gpu.nvidia.com'].productName.matches('^NVIDIA H(100|200)')", True),
    ('"dra.example.com" in device.attributes', False),
    ('device.attributes.exists_one(domain, domain == "gpu.nvidia.com")', True),
    ("!('x' in device.capacity['dra.example.com']) || device.capacity['dra.example.com'].x.isLessThan(quantity('1'))",
     True),
    ("device.attributes['gpu.nvidia.com'].productName.includes('NVIDIA H200')", True),
    ("device.attributes['gpu.nvidia.com'].productName.split(' ').size() == 2", True),
    ("device.allowMultipleAllocations == false", True),
])
def test_selectors_read_devices_as_kube_scheduler_does(selectors, expression, expected):
    assert selectors.matches(expression, h200(3)) is expected


@pytest.mark.parametrize("expression, fragment", [
    ("device.attributes['gpu.nvidia.com'].clique == 'x'", "runtime error"),  # an absent id fails the claim
    ("device.attributes['gpu.nvidia.com'].productName", "not a bool"),
    ("quantity('1') > 3", "compile error"),  # quantities are opaque, as in Kubernetes
    ("device.attributes[", "compile error"),
    ("device.capacity['gpu.nvidia.com'].memory.isGreaterThan(quantity('lots'))", "runtime error"),
])
def test_selector_errors_are_reported_not_read_as_false(selectors, expression, fragment):
    with pytest.raises(SelectorError, match=fragment):
        selectors.matches(expression, h200())


def test_identical_devices_cost_one_evaluation(selectors):
    expression = 'device.attributes["gpu.nvidia.com"].productName == "NVIDIA H200" && device.driver != ""'
    assert all(selectors.matches(expression, h200(i)) for i in range(8))
    assert len(selectors.compile(expression).results) == 1
    assert not selectors.matches(expression, h200(9, productName="NVIDIA H100"))
    assert len(selectors.compile(expression).results) == 2


def test_expressions_reading_more_than_literal_lookups_are_evaluated_per_device(selectors):
    expression = "cel.bind(g, device.attributes['gpu.nvidia.com'], g.uuid.endsWith('1'))"
    assert not references(expression).complete
    assert [selectors.matches(expression, h200(i)) for i in range(3)] == [False, True, False]


def test_references_are_the_literal_lookups():
    refs = references('device.attributes["gpu.nvidia.com"].productName == "x" && '
                      "device.capacity['gpu.nvidia.com']['memory'].isGreaterThan(quantity('1')) && "
                      "device.attributes['b'].?c.orValue(1) == 1")
    assert refs.complete
    assert refs.lookups == (("attributes", "gpu.nvidia.com", "productName"), ("capacity", "gpu.nvidia.com", "memory"),
                            ("attributes", "b", "c"))
    assert not references("device.attributes.size() > 0").complete
    assert not references("device.attributes['gpu.nvidia.com'].all(k, k != 'x')").complete
    assert not references("[1].exists(device, device.driver == 'x')").complete


def test_functions_of_a_whole_domain_see_every_attribute(selectors):
    expression = "device.attributes['gpu.nvidia.com'].exists(k, k == 'clique')"
    assert not selectors.matches(expression, h200(0)) and selectors.matches(expression, h200(1, clique="x"))


def test_true_and_one_are_told_apart_in_the_cache(selectors):
    expression = "device.attributes['gpu.nvidia.com'].flag == true"
    assert selectors.matches(expression, h200(0, flag=True))
    assert not selectors.matches(expression, h200(1, flag=1))
