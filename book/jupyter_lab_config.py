"""JupyterLab's configuration under ``make lab`` (``book/lab.py`` passes this file with ``--config``).

A lesson saved over its stored file keeps the ``language_info`` it was stored with. Opening a lesson
starts a kernel that reports the reader's own Python version; JupyterLab writes that into the notebook,
marks it changed and autosaves it, so a lesson merely read would show as modified in ``git status``.
"""

import json
from pathlib import Path


def keep_stored_language_info(model, path, contents_manager, **kwargs):
    """Pre-save hook: a notebook saved over a file that records a ``language_info`` keeps that one."""
    if model.get("type") != "notebook" or not isinstance(model.get("content"), dict):
        return
    try:
        stored = json.loads(Path(contents_manager._get_os_path(path)).read_text(encoding="utf-8"))
        model["content"]["metadata"]["language_info"] = stored["metadata"]["language_info"]
    except (OSError, ValueError, KeyError):
        return  # a new notebook, or one stored without it: saved as JupyterLab has it


c = get_config()  # noqa: F821 (provided by Jupyter's config loader)
c.FileContentsManager.pre_save_hook = keep_stored_language_info
