"""Every result type ``render.RENDERERS`` names is a class of ``patchkit.commands`` whose render
module has its text and its document, and every render module of a command's result is named there."""

from __future__ import annotations

import importlib
import pkgutil

import pytest

import patchkit.commands
import patchkit.render
from patchkit.render import RENDERERS, renderer, text


def _command_classes() -> dict[str, type]:
    found = {}
    for info in pkgutil.iter_modules(patchkit.commands.__path__):
        module = importlib.import_module(f"patchkit.commands.{info.name}")
        found.update({k: v for k, v in vars(module).items() if isinstance(v, type) and v.__module__ == module.__name__})
    return found


def test_each_named_type_is_a_command_result_its_module_renders() -> None:
    classes = _command_classes()
    for name, module in RENDERERS.items():
        assert name in classes, f"{name} is no class of patchkit.commands"
        render = importlib.import_module(f"patchkit.render.{module}")
        assert callable(render.to_text) and callable(render.to_json), module
        assert renderer(classes[name]) is render


def test_every_render_module_of_a_result_is_named() -> None:
    with_text = {info.name for info in pkgutil.iter_modules(patchkit.render.__path__)
                 if hasattr(importlib.import_module(f"patchkit.render.{info.name}"), "to_text")}
    assert with_text - {"auto"} == set(RENDERERS.values())  # auto renders report.Auto, chosen by isinstance


def test_a_type_not_named_has_no_renderer() -> None:
    class ApplyResult:  # a result's name, outside patchkit.commands
        pass

    with pytest.raises(TypeError, match="^no renderer for ApplyResult$"):
        text(ApplyResult(), terminal=False)
    with pytest.raises(TypeError, match="^no renderer for Transacted$"):
        renderer(_command_classes()["Transacted"])  # a command's class, but no result
