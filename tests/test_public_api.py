"""The public API is deliberate: `bus.__all__` is checked, and every module's `__all__` is importable."""

from __future__ import annotations

import importlib
import pkgutil
import tomllib
from pathlib import Path

import pytest

import agents
import bus
import coordinator

ROOT = Path(__file__).parent.parent
EXPECTED_BUS_API = {
    "Ack", "BusError", "Client", "CommandFailed", "ConfigError", "ConnectionFailed", "Consumer",
    "DecodeError", "Delivery", "EmbeddedRedisError", "EncodeError", "Envelope", "EnvelopeTooLarge", "EnvelopeType",
    "Keys", "Kind", "NamespaceMissing", "PermissionDenied", "ProtocolError", "Publisher", "Settings", "StreamKind", "connect", "decode",
    "deterministic_id", "encode", "new_envelope", "open_namespace",
}  # fmt: skip


def test_bus_exports_exactly_the_documented_names() -> None:
    assert set(bus.__all__) == EXPECTED_BUS_API
    for name in bus.__all__:
        assert getattr(bus, name) is not None


def test_every_error_derives_from_bus_error() -> None:
    for name in bus.__all__:
        value = getattr(bus, name)
        if isinstance(value, type) and issubclass(value, Exception):
            assert issubclass(value, bus.BusError), name


def _modules() -> list[str]:
    names = []
    for package in (bus, agents, coordinator):
        for info in pkgutil.walk_packages([str(Path(package.__file__ or "").parent)], package.__name__ + "."):
            names.append(info.name)
    return names


@pytest.mark.parametrize("module_name", _modules())
def test_module_all_names_exist(module_name: str) -> None:
    module = importlib.import_module(module_name)
    exported = getattr(module, "__all__", None)
    assert exported is not None, f"{module_name} has no __all__"
    for name in exported:
        assert hasattr(module, name), f"{module_name}.__all__ names missing {name}"


@pytest.mark.parametrize("module_name", [m for m in _modules() if m.startswith(("agents", "coordinator"))])
def test_agents_and_coordinator_never_import_each_other(module_name: str) -> None:
    source = importlib.import_module(module_name).__file__
    assert source is not None
    text = Path(source).read_text(encoding="utf-8")
    other = "coordinator" if module_name.startswith("agents") else "agents"
    assert f"from {other}" not in text and f"import {other}" not in text, module_name


def test_every_package_is_installed() -> None:
    # setuptools installs the packages pyproject.toml names, not their subpackages: one left out is in an
    # editable install (the tests') and missing from a wheel (the image's), where every command fails
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    installed = set(config["tool"]["setuptools"]["packages"])
    found = {
        ".".join(init.parent.relative_to(ROOT).parts)
        for top in ("bus", "agents", "coordinator")
        for init in (ROOT / top).rglob("__init__.py")
    }
    code = {package for package in installed if ROOT.joinpath(*package.split("."), "__init__.py").exists()}
    assert code == found
    assert installed - code == {"bus.schemas"}  # the JSON schemas: data, named so that the build ships them
