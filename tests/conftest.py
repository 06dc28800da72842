import pytest

ORDER = ("unit", "integration", "e2e")


def pytest_collection_modifyitems(config, items):
    """Marks each test by its folder, and runs them in that order: the unit tests, the integration tests, those that
    need what the test command builds in the background while the others run (`built_tools`), then kind's."""
    for item in items:
        for marker in ORDER:
            if f"/tests/{marker}/" in str(item.fspath):
                item.add_marker(getattr(pytest.mark, marker))

    def rank(item) -> tuple[int, bool]:
        folder = next((i for i, marker in enumerate(ORDER) if item.get_closest_marker(marker)), len(ORDER))
        return folder, "built_tools" in getattr(item, "fixturenames", ())

    items.sort(key=rank)  # (stable: files and tests keep their order within each group)
