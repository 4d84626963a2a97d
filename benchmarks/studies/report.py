"""How a study script hands its results over: the markdown printed, and written to
``--md`` / ``--json`` where given (the JSON holds the header line, the command that
made it and the rows)."""
from __future__ import annotations

import json


def write_report(md, head, cmd, rows, md_path=None, json_path=None):
    """Print ``md``; write it to ``md_path`` and ``{head, command, rows}`` to
    ``json_path`` (each only where given)."""
    print()
    print(md)
    if md_path:
        with open(md_path, "w") as f:
            f.write(md)
    if json_path:
        with open(json_path, "w") as f:
            json.dump({"head": head, "command": cmd, "rows": rows}, f, indent=1)
