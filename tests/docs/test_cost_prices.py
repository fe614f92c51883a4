"""docs/cost.md's table of default prices and power is the one `scaler.cost.DEFAULT_GPU_PRICES` holds (issue 14:
"defaults documented with their source"), so a changed default cannot leave the page citing another number."""

from __future__ import annotations

import re
from pathlib import Path

from scaler.cost import DEFAULT_GPU_PRICES

PAGE = Path(__file__).resolve().parents[2] / "docs" / "cost.md"


def test_the_pages_price_table_is_the_defaults() -> None:
    section = PAGE.read_text().split("## Prices and power", 1)[1].split("\n## ", 1)[0]
    rows = re.findall(r"^\| (\w+)[^|]* \| ([\d.]+) \| (\d+) W \|", section, re.M)
    documented = {gpu: (float(price), float(watts)) for gpu, price, watts in rows}
    defaults = {gpu: (p.price_per_hour_usd, p.power_w) for gpu, p in DEFAULT_GPU_PRICES.items()}
    assert documented == defaults
    assert "runpod.io/pricing" in section
    assert "datasheet" in section
