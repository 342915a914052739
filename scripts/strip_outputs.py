"""Store notebooks without outputs: ``python scripts/strip_outputs.py PATH...``.

PATH is a notebook or a folder (searched for ``*.ipynb``, ``_build`` and checkpoints
skipped). Outputs, execution counts and per-cell execution metadata are removed; the
cells, their ids, tags and the kernelspec are kept. Prints the notebooks it changed.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def notebooks(paths: list[str]) -> list[Path]:
    found = []
    for name in paths:
        path = Path(name)
        if path.is_dir():
            found += [p for p in sorted(path.rglob("*.ipynb"))
                      if "_build" not in p.parts and ".ipynb_checkpoints" not in p.parts]
        elif path.suffix == ".ipynb":
            found.append(path)
        else:
            raise SystemExit(f"strip_outputs: {name} is neither a notebook nor a folder")
    return found


def strip(nb: dict) -> dict:
    for cell in nb.get("cells", []):
        if cell.get("cell_type") == "code":
            cell["outputs"] = []
            cell["execution_count"] = None
        cell.get("metadata", {}).pop("execution", None)
    return nb


def main(argv: list[str]) -> int:
    if not argv:
        raise SystemExit(__doc__)
    for path in notebooks(argv):
        text = path.read_text(encoding="utf-8")
        stripped = json.dumps(strip(json.loads(text)), indent=1, ensure_ascii=False) + "\n"
        if stripped != text:
            path.write_text(stripped, encoding="utf-8")
            print(f"stripped {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
