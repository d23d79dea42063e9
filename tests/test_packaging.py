"""Packaging: the version's single source, the license and metadata, the uvloop extra's error."""

from __future__ import annotations

import asyncio
import re
import sys
import tomllib
from importlib.metadata import metadata, version
from pathlib import Path

import pytest

import ahipgraph as ahg

ROOT = Path(__file__).resolve().parent.parent


def pyproject() -> dict[str, object]:
    with (ROOT / "pyproject.toml").open("rb") as file:
        return tomllib.load(file)["project"]  # type: ignore[no-any-return]


def test_version_comes_from_the_package_metadata() -> None:
    assert ahg.__version__ == version("ahipgraph") == pyproject()["version"]
    assert re.fullmatch(r"\d+\.\d+\.\d+\S*", ahg.__version__)


def test_license_is_mit_and_shipped() -> None:
    project = pyproject()
    assert project["license"] == "MIT"
    assert project["license-files"] == ["LICENSE"]
    text = (ROOT / "LICENSE").read_text()
    assert text.startswith("MIT License")
    assert "Copyright (c) 2026 the ahipgraph authors" in text


def test_installed_metadata_declares_typing_asyncio_and_python() -> None:
    classifiers = set(metadata("ahipgraph").get_all("Classifier") or [])
    assert {
        "Typing :: Typed",
        "Framework :: AsyncIO",
        "Development Status :: 3 - Alpha",
        "Programming Language :: Python :: 3.11",
    } <= classifiers
    # PEP 639: the SPDX expression replaces license classifiers (setuptools rejects both).
    assert not any(c.startswith("License ::") for c in classifiers)
    assert (ROOT / "src" / "ahipgraph" / "py.typed").exists()


def test_run_without_uvloop_says_how_to_install_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "uvloop", None)  # as if uvloop were not installed
    started: list[bool] = []

    async def main() -> None:
        started.append(True)

    with pytest.raises(ImportError, match=re.escape("pip install 'ahipgraph[uvloop]'")) as info:
        ahg.run(main, use_uvloop=True)
    assert isinstance(info.value, ModuleNotFoundError)
    assert info.value.name == "uvloop"
    coroutine = main()  # a coroutine object is closed, so it cannot warn "never awaited"
    with pytest.raises(ModuleNotFoundError, match="uvloop"):
        ahg.run(coroutine, use_uvloop=True)
    assert coroutine.cr_frame is None  # closed
    assert started == []


def test_run_on_asyncio_returns_the_result() -> None:
    async def main() -> int:
        await asyncio.sleep(0)
        return 42

    assert ahg.run(main) == 42
    assert ahg.run(main()) == 42
