"""`trainscale catalog` from the user's side: the tables it prints, checked against the
datasheets and papers the catalog cites, and one line with exit status 2 for bad input."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from commands.catalog import main

ROOT = Path(__file__).resolve().parent.parent
CATALOG = ROOT / "scenarios" / "catalog"


def table(text: str) -> dict[str, dict[str, str]]:
    """A text table (header, a rule of dashes, rows) as {first cell: {column: cell}}, the
    columns cut where the rule's dashes are."""
    lines = text.splitlines()
    spans = [m.span() for m in re.finditer(r"-+", lines[1])]

    def cells(line: str) -> list[str]:
        # the last column runs to the end of the line (the rule is as wide as its widest)
        ends = [end for _, end in spans[:-1]] + [len(line)]
        return [line[start:end].strip() for (start, _), end in zip(spans, ends, strict=True)]

    header = cells(lines[0])
    rows = [cells(line) for line in lines[2:] if line and not line.startswith("Sources:")]
    return {row[0]: dict(zip(header, row, strict=True)) for row in rows}


def printed(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    assert main(list(argv)) == 0
    return capsys.readouterr().out


def file_entries(name: str) -> list[str]:
    """The entries of a catalog file, read here with PyYAML, not through the catalog."""
    return list(yaml.safe_load((CATALOG / name).read_text(encoding="utf-8")))


def test_every_device_shows_its_memory(capsys: pytest.CaptureFixture[str]) -> None:
    devices = table(printed(capsys, "devices"))
    # NVIDIA's V100 SXM2 32 GB datasheet (4 HBM2 stacks of 8 GiB) and H100 SXM 80 GB
    # datasheet (5 active HBM3 stacks of 16 GiB)
    assert devices["v100"]["memory"] == "32 GiB"
    assert devices["h100"]["memory"] == "80 GiB"
    assert devices["v100"]["memory bandwidth"] == "900 GB/s"  # V100 datasheet
    assert devices["v100"]["fp32 TFLOP/s"] == "15.7"
    assert list(devices) == file_entries("devices.yaml")  # every one, in the file's order
    assert all(row["memory"].endswith(" GiB") for row in devices.values())


def test_resnet50_shows_its_parameters(capsys: pytest.CaptureFixture[str]) -> None:
    models = table(printed(capsys, "models"))
    # He et al. 2016: 25,557,032 parameters, 25.6 M (Keras adds 26,560 convolution biases)
    assert models["resnet50"]["params"] == "25.6 M"
    assert models["resnet50"]["keras builder"] == "resnet50"
    assert models["resnet50"]["convergence"] == "resnet50"
    expected = sorted(p.stem for p in (CATALOG / "models").glob("*.yaml"))
    assert sorted(models) == expected


def test_every_kind_has_its_table(capsys: pytest.CaptureFixture[str]) -> None:
    everything = printed(capsys)
    blocks = {b.split("\n", 1)[0]: b.split("\n", 1)[1] for b in everything.split("\n\n")}
    assert list(blocks) == [
        "devices",
        "links",
        "networks",
        "models",
        "convergence",
        "collectives",
        "prices",
    ]
    for kind, name in (
        ("devices", "devices.yaml"),
        ("links", "links.yaml"),
        ("networks", "networks.yaml"),
        ("convergence", "convergence.yaml"),
        ("collectives", "collectives.yaml"),
        ("prices", "prices.yaml"),
    ):
        assert list(table(blocks[kind])) == file_entries(name), kind
        assert f"scenarios/catalog/{name}" in blocks[kind].splitlines()[-1]
    networks = table(blocks["networks"])
    assert networks["25GbE"]["Gbit/s"] == "25"
    assert networks["ib-fdr"]["Gbit/s"] == "54.54"  # 4 x 14.0625 GBd x 64/66
    links = table(blocks["links"])
    assert (links["nvlink2"]["Gbit/s"], links["nvlink2"]["GB/s"]) == ("1200", "150")
    convergence = table(blocks["convergence"])["resnet50"]
    assert convergence["noise scale"] == "1000 samples"  # McCandlish et al. 2018, Table 1
    assert "McCandlish" in convergence["source"]
    # AWS's us-east-1 list price of p4d.24xlarge, 32.7726 USD per instance-hour
    p4d = table(blocks["prices"])["p4d.24xlarge"]
    assert (p4d["USD/h on-demand"], p4d["devices"]) == ("32.77", "8x a100")
    # NVIDIA A100 SXM4 datasheet: 400 W
    assert table(blocks["devices"])["a100"]["power tdp/idle"] == "400/60 W"


def test_markdown(capsys: pytest.CaptureFixture[str]) -> None:
    out = printed(capsys, "devices", "--format", "markdown")
    assert out.startswith("## Devices\n\n| device | kind |")
    (v100,) = [line for line in out.splitlines() if line.startswith("| v100 |")]
    assert "| 32 GiB |" in v100


@pytest.mark.parametrize("argv", [["gpus"], ["devices", "--format", "html"], ["devices", "models"]])
def test_bad_arguments_are_one_line(capsys: pytest.CaptureFixture[str], argv: list[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("catalog: error: "), err


def test_trainscale_catalog_devices_loads_neither_backend() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "trainscale", "catalog", "devices"],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stderr
    assert table(proc.stdout)["v100"]["memory"] == "32 GiB"
    check = (
        "import sys; from trainscale.cli import main; main(['catalog', 'devices']); "
        "loaded = {'sim', 'real', 'tensorflow'} & set(sys.modules); "
        "sys.exit(f'loaded {sorted(loaded)}' if loaded else 0)"
    )
    proc = subprocess.run([sys.executable, "-c", check], cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
