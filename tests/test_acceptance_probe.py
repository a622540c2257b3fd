"""accounting.acceptance.probe: what the machine has, as the run needs it to plan its steps."""

import importlib.util
import json

import torch

from accounting.acceptance.plan import Machine
from accounting.acceptance.probe import NEEDED, OPTIONAL, main, missing, probe


def test_the_probe_says_what_torch_and_the_package_say_here(tmp_path, capsys):
    path = tmp_path / "probe.json"
    assert main([str(path)]) == 0
    found = json.loads(path.read_text())
    assert json.loads(capsys.readouterr().out) == found
    assert found["gpu"] == torch.cuda.is_available() and found["torch"] == torch.__version__
    assert len(found["devices"]) == (torch.cuda.device_count() if found["gpu"] else 0)
    assert found["import_errors"] == []  # every module of the package imports here
    assert found["missing_optional"] == [name for name in OPTIONAL if importlib.util.find_spec(name) is None]
    assert found["missing_needed"] == [name for name in NEEDED if importlib.util.find_spec(name) is None]
    machine = Machine.from_probe(found)
    assert machine.gpu == found["gpu"] and machine.missing_optional == tuple(found["missing_optional"])
    if not found["gpu"]:
        assert found["no_gpu_reason"].startswith("no CUDA device")


def test_missing_keeps_the_order_it_was_asked_in():
    assert missing(["no_such_module_b", "json", "no_such_module_a"]) == ["no_such_module_b", "no_such_module_a"]


def test_a_probe_record_with_fields_the_plan_does_not_use_still_reads():
    machine = Machine.from_probe({**probe(), "something_new": 1})
    assert isinstance(machine.devices, tuple)


def test_the_probe_plans_the_model_size_for_the_gpu_it_found_and_says_why_it_did_not_without_one():
    from accounting.acceptance.plan import model_size_that_fits
    from accounting.acceptance.probe import plan_model

    h200 = {"index": 0, "name": "NVIDIA H200", "total_bytes": 150 * 10**9, "free_bytes": 149 * 10**9,
            "compute_capability": "9.0", "multiprocessors": 132}
    found = {"gpu": True, "devices": [h200], "import_errors": []}
    size, why = model_size_that_fits(Machine.from_probe(found))
    assert plan_model(found) == {"name": size.name, "batch": size.batch_size, "why": why}
    assert plan_model({"gpu": False, "devices": []})["why"] == "not planned: no GPU"
    assert probe()["model"]["name"] is None or torch.cuda.is_available()
