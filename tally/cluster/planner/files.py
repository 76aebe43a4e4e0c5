"""Reading the planner's YAML/JSON input files with errors that name the file."""
from __future__ import annotations

import json
from pathlib import Path

import yaml

from tally.cluster.planner.errors import PlanInputError


def read_structured(path: Path, what: str):
    """Parse `path` as JSON (a .json name) or YAML (anything else)."""
    try:
        text = Path(path).read_text()
    except OSError as e:
        raise PlanInputError(f"cannot read {what} {path}: {e.strerror}") from None
    is_json = Path(path).suffix == ".json"
    try:
        return json.loads(text) if is_json else yaml.safe_load(text)
    except (json.JSONDecodeError, yaml.YAMLError) as e:
        raise PlanInputError(f"{what} {path} is not valid {'JSON' if is_json else 'YAML'}: {e}") from None
