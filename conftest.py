"""pytest configuration shared by the unit tests and the nbval notebook checks.

Chapters that read real data declare it in their front matter::

    capassign:
      needs_data: [bank, mmlu]

Before nbval re-executes such a chapter, the files it needs are located (the
folder named by CAPASSIGN_DATA, else the download cache) and, when missing,
fetched; if they cannot be had, the chapter's cells are skipped with the
message that says how to get the data, instead of failing.
"""

from pathlib import Path

import pytest


def _datasets(task_names):
    out = set()
    for name in task_names:
        out.update(("mmlu-questions", "mmlu-agents") if name.startswith("mmlu") else (name,))
    return out


def _missing_data_message(task_names):
    import capassign

    reg = capassign.data_registry()
    wanted = _datasets(task_names)
    files = [e["path"] for e in reg.registry["files"] if e["dataset"] in wanted]
    problems = [f"{path} {status}" for path, status, _ in reg.fetch(files) if status != "ok"]
    if not problems:
        return ""
    more = f" and {len(problems) - 3} more" if len(problems) > 3 else ""
    return ", ".join(problems[:3]) + more


def pytest_collection_modifyitems(config, items):
    import nbformat

    verdicts = {}
    for item in items:
        path = Path(str(item.fspath))
        if path.suffix != ".ipynb":
            continue
        if path not in verdicts:
            meta = nbformat.read(path, as_version=4).metadata.get("capassign", {})
            needs = meta.get("needs_data", [])
            verdicts[path] = _missing_data_message(needs) if needs else ""
        if verdicts[path]:
            item.add_marker(pytest.mark.skip(
                reason=f"data not available ({verdicts[path]}); set CAPASSIGN_DATA "
                       f"or run `python -m capassign data fetch`"))
