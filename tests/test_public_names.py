"""``accounting``'s public names, loaded on first use (PEP 562): each is there, is the object its module defines,
and shows in ``dir()``; a name that is not public is an ordinary AttributeError."""

import importlib

import pytest

import accounting


def _defining_module(value) -> str | None:
    """Where a function or class says it was defined (``None`` for constants: dicts, tuples)."""
    return getattr(value, "__module__", None) if callable(value) else None


@pytest.mark.parametrize("name", accounting.__all__)
def test_each_public_name_is_the_object_of_the_module_that_defines_it(name):
    namespace = {}
    exec(f"from accounting import {name}", namespace)  # the form users write
    value = namespace[name]
    assert getattr(accounting, name) is value
    assert name in dir(accounting)
    defined_in = _defining_module(value)
    if defined_in is not None and defined_in.startswith("accounting."):
        assert getattr(importlib.import_module(defined_in), value.__name__) is value


def test_star_import_binds_every_public_name_once():
    assert len(set(accounting.__all__)) == len(accounting.__all__)
    namespace = {}
    exec("from accounting import *", namespace)
    assert set(namespace) - {"__builtins__"} == set(accounting.__all__)


def test_a_name_that_is_not_public_is_an_attribute_error():
    with pytest.raises(AttributeError, match=r"^module 'accounting' has no attribute 'tensor_byte'$"):
        accounting.tensor_byte  # noqa: B018
    assert not hasattr(accounting, "__wrapped__")


@pytest.mark.parametrize("name", accounting.__all__)
def test_a_public_name_is_still_its_object_after_its_module_was_imported(name):
    """Importing a module binds it to its package's attribute of its name: a public function named as a module
    (``training_memory``, whose module is ``accounting.model.training_memory``) must still be the function when
    looked up afterwards."""
    module = importlib.import_module(accounting._PUBLIC[name])
    namespace = {}
    exec(f"from accounting import {name}", namespace)
    assert namespace[name] is getattr(module, name) is getattr(accounting, name)
