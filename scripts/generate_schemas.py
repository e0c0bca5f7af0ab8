"""Write schemas/session/*.schema.json from the pydantic models."""

from __future__ import annotations

import json
from pathlib import Path

from tiny_agent_nb.session._schema import session_schemas

OUT = Path(__file__).resolve().parent.parent / "schemas" / "session"


def render(schema: dict[str, object]) -> str:
    return json.dumps(schema, indent=2, ensure_ascii=False, sort_keys=False) + "\n"


def main() -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    for name, schema in session_schemas().items():
        (OUT / name).write_text(render(schema), encoding="utf-8")
        print(f"wrote {OUT / name}")


if __name__ == "__main__":
    main()
