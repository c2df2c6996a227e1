"""The compiled modules' caches (`sim.network.unmanaged.drop_stale_caches`): numba keys a
cached function by its own file only, so a change to any compiled module's source must
drop every cache compiled from them, and nothing else may."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("numba")

from sim.network.unmanaged import COMPILED_SOURCES, STAMP, drop_stale_caches  # noqa: E402


def _tree(tmp_path: Path) -> tuple[list[Path], list[Path]]:
    """Two folders of sources, each with numba's cache files and a bytecode file."""
    sources, cached = [], []
    for folder in ("network", "kernel"):
        (tmp_path / folder / "__pycache__").mkdir(parents=True)
        source = tmp_path / folder / "loop.py"
        source.write_text(f"# {folder}\n")
        sources.append(source)
        for name in ("loop.run-1.py311.nbi", "loop.run-1.py311.1.nbc"):
            (tmp_path / folder / "__pycache__" / name).write_bytes(b"machine code")
            cached.append(tmp_path / folder / "__pycache__" / name)
        (tmp_path / folder / "__pycache__" / "loop.cpython-311.pyc").write_bytes(b"")
    return sources, cached


def test_a_changed_source_drops_every_folders_caches(tmp_path: Path) -> None:
    sources, cached = _tree(tmp_path)
    assert drop_stale_caches(sources)  # no digest yet: caches of unknown sources go
    assert not any(p.exists() for p in cached)
    for path in cached:  # compiled again from these sources
        path.write_bytes(b"machine code")
    assert not drop_stale_caches(sources)  # unchanged: kept
    assert all(p.exists() for p in cached)
    sources[1].write_text("# kernel, changed\n")  # one folder's source
    assert drop_stale_caches(sources)
    assert not any(p.exists() for p in cached)  # both folders' (one inlines the other)
    assert all((s.parent / "__pycache__" / "loop.cpython-311.pyc").exists() for s in sources)
    (digest,) = {(s.parent / "__pycache__" / STAMP).read_text() for s in sources}
    assert len(digest) == 64 and int(digest, 16) >= 0  # one sha256 for all, in each


def test_an_unwritable_folder_is_left_alone(tmp_path: Path) -> None:
    source = tmp_path / "loop.py"
    source.write_text("# alone\n")
    (tmp_path / "__pycache__").write_text("a file where the folder would be")
    assert not drop_stale_caches([source])


def test_the_engines_sources_are_all_listed() -> None:
    listed = {p.name for p in COMPILED_SOURCES}
    root = Path(__file__).resolve().parent.parent
    compiled = {
        p.name
        for p in (root / "sim").rglob("*.py")
        if "@njit" in p.read_text() or "@bare" in p.read_text()
    }
    assert compiled <= listed
