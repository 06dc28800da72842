import pytest


def pytest_collection_modifyitems(config, items):
    for item in items:
        for marker in ("unit", "integration", "e2e"):
            if f"/tests/{marker}/" in str(item.fspath):
                item.add_marker(getattr(pytest.mark, marker))
