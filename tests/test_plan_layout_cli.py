"""``accounting plan`` over a parallel layout, as a user runs it: the axes' options, the per-rank table, JSON, errors.

The figures are checked against the library call the command stands for (``layout_plan``), the bubble and
tokens/s against their definitions, the all-1 layout against the single-device plan, and docs/plan.md's
"Parallel layouts" section and the README's plan example against what their commands print, so that neither
can drift.
"""

import json
import re
import shlex
from pathlib import Path

import pytest

from accounting.model.config import TransformerConfig
from accounting.model.parallel.layout import ParallelLayout
from accounting.plan.devices import plan_device
from accounting.plan.layout_plan import LayoutSettings, layout_plan
from accounting.plan.render import layout_plan_document
from tests.support.cli_runs import run_main
from tests.test_plan import LLAMA_3_8B

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "plan.md"

LLAMA_3_70B = {**LLAMA_3_8B, "hidden_size": 8192, "intermediate_size": 28672, "num_hidden_layers": 80,
               "num_attention_heads": 64, "num_key_value_heads": 8}
"""Llama-3-70B's config.json (meta-llama/Meta-Llama-3-70B), the keys that size it."""

SMALL_LLAMA = {**LLAMA_3_8B, "hidden_size": 1024, "intermediate_size": 2816, "num_hidden_layers": 8,
               "num_attention_heads": 16, "num_key_value_heads": 4, "vocab_size": 32000,
               "max_position_embeddings": 2048}


def library_plan(path, *, devices, tensor=1, pipeline=1, context=1, expert=1, sharding="ddp", schedule="1f1b",
                 virtual_stages=1, recompute="none", selective="attention-core", sequence_length=None, **batch):
    config = TransformerConfig.from_hf(path, sequence_length=sequence_length)
    layout = ParallelLayout(devices=devices, tensor=tensor, pipeline=pipeline, context=context, expert=expert,
                            sharding=sharding, schedule=schedule, virtual_stages=virtual_stages)
    settings = LayoutSettings(layout, recompute=recompute, selective=selective)
    return layout_plan(config, plan_device("H100 SXM", "bfloat16"), settings, **batch)


def test_a_multi_axis_layout_as_json_is_the_library_plan(config_file, capsys):
    path = config_file(SMALL_LLAMA)
    argv = ["plan", "--config", path, "--devices", "16", "--tensor-parallel", "2", "--pipeline-parallel", "2",
            "--sharding", "zero1", "--global-batch", "32", "--tokens", "1e10", "--json"]
    status, out, err = run_main(argv, capsys)
    plan = library_plan(path, devices=16, tensor=2, pipeline=2, sharding="zero1", global_batch=32, tokens=1e10)
    assert json.loads(out) == json.loads(json.dumps(layout_plan_document(plan, path)))
    assert status == (0 if plan.fits else 1) and err == ""
    document = json.loads(out)
    assert document["layout"]["data"] == 4 and len(document["memory_per_rank"]) == 2
    peaks = [rank["peak"] for rank in document["memory_per_rank"]]
    assert document["memory_per_rank"][document["most_loaded_stage"]]["peak"] == max(peaks)


def test_the_text_shows_each_stage_the_most_loaded_and_each_axis(config_file, capsys):
    path = config_file(SMALL_LLAMA)
    argv = ["plan", "--config", path, "--devices", "16", "--tensor-parallel", "2", "--pipeline-parallel", "4",
            "--global-batch", "16"]
    status, out, err = run_main(argv, capsys)
    _, document, _ = run_main([*argv, "--json"], capsys)
    document = json.loads(document)
    assert err == "" and status in (0, 1)
    assert "Layout: TP 2 (SP) × PP 4 (1f1b) × DP 2 (ddp) on 16 x H100 SXM" in out
    kernel = document["training"]["attention_kernel"]["name"]  # the kernel the single-device plan counts too
    assert kernel == json.loads(run_main(["plan", "--config", path, "--json"], capsys)[1])["training"][
        "attention_kernel"]["name"] and f"Attention: sdpa runs its {kernel} kernel" in out
    header = next(line for line in out.splitlines() if line.strip().startswith("part"))
    assert header.split()[1:] == ["stage", "0", "stage", "1", "stage", "2", "stage", "3"]
    peak_row = next(line for line in out.splitlines() if line.strip().startswith("peak "))
    printed = [float(cell) for cell in peak_row.split()[1:5]]
    assert printed == [round(rank["peak"] / 2**30, 2) for rank in document["memory_per_rank"]]
    most = document["memory_per_rank"][document["most_loaded_stage"]]
    assert most["phases"][most["peak_phase"]] == max(most["phases"].values())
    assert f"Most loaded: stage {document['most_loaded_stage']}, {most['peak'] / 2**30:.2f} GiB, at its peak phase " \
           f"({most['peak_phase']})." in out
    for axis in document["communication"]["by_axis"]:
        row = re.search(rf"^  {axis['axis']}\s+{re.escape(', '.join(axis['collectives']))}\s.*$", out,
                        flags=re.MULTILINE)
        assert row and f"{axis['bytes'] / 2**30:.2f}" in row.group(0).split()
    # the bubble of 1F1B with m micro-batches over P stages: (P - 1) / (m + P - 1) of the pipeline's time
    m = document["batch"]["micro_batches"]
    assert m == 16 // 2 and f"({3 / (m + 3):.1%} of the pipeline's time)" in out
    compute = document["compute"]
    assert compute["tokens_per_second"] == pytest.approx(16 * 2048 / compute["seconds_per_step"])


@pytest.mark.parametrize("extra", [[], ["--tensor-parallel", "1", "--pipeline-parallel", "1", "--context-parallel",
                                        "1", "--expert-parallel", "1", "--schedule", "1f1b"]])
def test_all_axes_one_is_todays_plan(extra, config_file, capsys):
    """Degrees of 1 change nothing: the single-device plan, printed as it always was."""
    path = config_file(LLAMA_3_8B)
    base = ["plan", "--config", path, "--sequence-length", "2048", "--devices", "8", "--sharding", "zero3",
            "--global-batch", "64"]
    assert run_main([*base, *extra], capsys) == run_main(base, capsys)
    assert "Memory per device at micro-batch" in run_main([*base, *extra], capsys)[1]


@pytest.mark.parametrize(("argv", "message"), [
    pytest.param(["--devices", "12", "--tensor-parallel", "8"], r"devices 12 is not a multiple of tensor × pipeline",
                 id="devices"),
    pytest.param(["--devices", "6", "--tensor-parallel", "3"], r"tensor 3 must divide the 16 query heads", id="heads"),
    pytest.param(["--devices", "8", "--tensor-parallel", "0"], r"--tensor-parallel must be a positive whole number",
                 id="zero"),
    pytest.param(["--devices", "8", "--pipeline-parallel", "2", "--virtual-stages", "2"],
                 r"virtual_stages 2 needs schedule 'interleaved-1f1b'", id="virtual"),
    pytest.param(["--devices", "8", "--schedule", "interleaved-1f1b"], r"needs pipeline parallelism", id="schedule"),
    pytest.param(["--devices", "8", "--expert-parallel", "2"], r"expert 2 needs a mixture-of-experts model",
                 id="dense-experts"),
    pytest.param(["--devices", "16", "--pipeline-parallel", "16"], r"16 stages is more than the 8 blocks",
                 id="stages"),
    pytest.param(["--devices", "8", "--context-parallel", "8", "--sequence-length", "24"],
                 r"context 8: the sequence of 24 tokens must divide into 2 × 8 chunks", id="context"),
    pytest.param(["--devices", "8", "--tensor-parallel", "2", "--global-batch", "6"],
                 r"global batch 6 is not a multiple of the 4 data-parallel ranks", id="batch"),
    pytest.param(["--devices", "8", "--tensor-parallel", "2", "--global-batch", "8", "--micro-batches", "3"],
                 r"micro-batches 3 does not divide the 2 sequences", id="micro-batches"),
    pytest.param(["--devices", "8", "--schedule", "zigzag"], r"argument --schedule: invalid choice: 'zigzag'",
                 id="schedule-name"),
    pytest.param(["--devices", "8", "--recompute", "some"], r"argument --recompute: invalid choice: 'some'",
                 id="recompute"),
])
def test_a_bad_layout_is_one_line_naming_the_value_and_exit_2(argv, message, config_file, capsys):
    status, out, err = run_main(["plan", "--config", config_file(SMALL_LLAMA), *argv], capsys)
    assert status == 2 and out == ""
    assert len(err.strip().splitlines()) == 1 and err.startswith("accounting plan: error: ")
    assert re.search(message, err), err


def test_a_traced_model_refuses_a_layout(config_file, capsys):
    path = config_file({"model_type": "bert", "hidden_size": 64, "num_hidden_layers": 2,
                        "num_attention_heads": 4, "intermediate_size": 128, "vocab_size": 100})
    status, _out, err = run_main(["plan", "--config", path, "--devices", "2", "--tensor-parallel", "2"], capsys)
    assert status == 2 and "not a parallel layout (TP 2 (SP) × DP 1 (ddp))" in err


def test_a_layout_that_does_not_fit_names_its_stage_and_phase_and_each_remedy_fits(config_file, capsys):
    path = config_file(LLAMA_3_8B)
    argv = ["plan", "--config", path, "--sequence-length", "4096", "--devices", "16", "--pipeline-parallel", "2",
            "--schedule", "gpipe", "--micro-batch", "1", "--global-batch", "8"]
    status, out, err = run_main(argv, capsys)
    document = json.loads(run_main([*argv, "--json"], capsys)[1])
    rank = document["memory_per_rank"][document["most_loaded_stage"]]
    assert status == 1 and err == "" and rank["peak"] > document["device"]["usable_bytes"]
    assert f"on pipeline stage {document['most_loaded_stage']}'s ranks" in document["reasons"][0]
    remedies = re.findall(r"with (--\S+ \S+), one sequence per micro-batch fits", out)
    assert remedies
    for remedy in remedies:  # each remedy offered does fit
        assert run_main([*argv, *remedy.split()], capsys)[0] == 0, remedy


def test_a_mixture_of_experts_divides_its_routed_experts_over_the_expert_ranks(config_file, capsys):
    from tests.support.published_configs import PUBLISHED

    path = config_file(PUBLISHED["qwen3-30b-a3b"][0])
    argv = ["plan", "--config", path, "--sequence-length", "4096", "--devices", "16", "--expert-parallel", "8",
            "--sharding", "zero1", "--recompute", "full", "--global-batch", "32", "--json"]
    status, out, err = run_main(argv, capsys)
    config = TransformerConfig.from_hf(path, sequence_length=4096)
    layout = ParallelLayout(devices=16, expert=8, sharding="zero1")
    plan = layout_plan(config, plan_device("H100 SXM", "bfloat16"), LayoutSettings(layout, recompute="full"),
                       global_batch=32)
    document = json.loads(out)
    assert document == json.loads(json.dumps(layout_plan_document(plan, path))) and err == ""
    (expert,) = [axis for axis in document["communication"]["by_axis"] if axis["axis"] == "expert"]
    assert expert["collectives"] == ["all-to-all"] and expert["groups"] == [8]
    # each rank holds 1/8 of the routed experts: fewer weights than the same run without expert parallelism
    _, whole, _ = run_main([*argv[:7], *argv[9:]], capsys)
    assert json.loads(whole)["memory_per_device"]["parameters"] > document["memory_per_rank"][0]["parameters"]


def test_hybrid_sharding_divides_the_states_within_a_node_only(config_file, capsys):
    """HSDP over 16 data-parallel ranks, 4 of them in a node of 8 (TP 2): each rank holds the states ZeRO-3 over
    those 4 gives it."""
    path = config_file(SMALL_LLAMA)
    base = ["plan", "--config", path, "--tensor-parallel", "2", "--global-batch", "16", "--json"]
    _, hybrid, _ = run_main([*base, "--devices", "32", "--sharding", "hsdp"], capsys)
    _, within, _ = run_main([*base, "--devices", "8", "--sharding", "zero3"], capsys)
    hybrid, within = json.loads(hybrid), json.loads(within)
    assert hybrid["layout"]["sharding_degree"] == 8 // 2 == within["layout"]["sharding_degree"]
    for part in ("parameters", "gradients", "optimizer"):
        assert hybrid["memory_per_rank"][0][part] == within["memory_per_rank"][0][part]


def test_links_json_replaces_the_datasheets_bandwidths(config_file, tmp_path, capsys):
    path = config_file(SMALL_LLAMA)
    links = tmp_path / "links.json"
    links.write_text(json.dumps({"intra_node_gbps": 45, "inter_node_gbps": 5}))
    argv = ["plan", "--config", path, "--devices", "32", "--tensor-parallel", "4", "--pipeline-parallel", "2",
            "--global-batch", "32", "--links", str(links), "--json"]
    status, out, err = run_main(argv, capsys)
    document = json.loads(out)
    assert err == "" and document["communication"]["links"]["intra_source"] == str(links)
    for axis in document["communication"]["by_axis"]:
        bandwidth = 45e9 if axis["within_node"] else 5e9
        assert axis["seconds"] == pytest.approx(axis["bytes"] / bandwidth)


def test_links_json_gives_a_device_without_datasheet_links_both_scopes(config_file, tmp_path, capsys):
    links = tmp_path / "links.json"
    links.write_text(json.dumps({"intra_node_gbps": 20, "inter_node_gbps": 2}))
    argv = ["plan", "--config", config_file(SMALL_LLAMA), "--device", "T4", "--peak-tflops", "65",
            "--devices", "4", "--tensor-parallel", "2", "--global-batch", "8", "--links", str(links), "--json"]
    status, out, err = run_main(argv, capsys)
    within = [axis for axis in json.loads(out)["communication"]["by_axis"] if axis["within_node"] and axis["bytes"]]
    assert err == "" and within
    assert [axis["seconds"] for axis in within] == pytest.approx([axis["bytes"] / 20e9 for axis in within])


def test_search_plans_with_the_selective_policy_asked_for(config_file, capsys):
    path = config_file(SMALL_LLAMA)
    argv = ["plan", "--config", path, "--devices", "16", "--global-batch", "32", "--search", "--recompute",
            "selective", "--selective-policy", "matmul-outputs", "--json"]
    status, out, err = run_main(argv, capsys)
    row = json.loads(out)["layouts"][0]
    assert err == ""
    plans = {policy: library_plan(path, devices=16, tensor=row["tensor"], pipeline=row["pipeline"],
                                  context=row["context"], sharding=row["sharding"], schedule=row["schedule"],
                                  virtual_stages=row["virtual_stages"], global_batch=32, micro_batch=row["micro_batch"],
                                  recompute="selective", selective=policy)
             for policy in ("matmul-outputs", "attention-core")}
    assert plans["matmul-outputs"].memory.most_loaded.peak == row["peak"]
    assert plans["attention-core"].memory.most_loaded.peak != row["peak"]


def test_search_ranks_the_layouts_that_fit_as_the_plan_sizes_them(config_file, capsys):
    """Each ranked layout, planned on its own at its micro-batch, has the peak and the time the search gave it."""
    path = config_file(SMALL_LLAMA)
    status, out, err = run_main(["plan", "--config", path, "--devices", "16", "--global-batch", "32", "--search",
                                 "--json"], capsys)
    rows = json.loads(out)["layouts"]
    assert status == 0 and err == "" and 0 < len(rows) <= 10
    assert [row["seconds_per_step"] for row in rows] == sorted(row["seconds_per_step"] for row in rows)
    for row in rows[:3]:
        plan = library_plan(path, devices=16, tensor=row["tensor"], pipeline=row["pipeline"],
                            context=row["context"], sharding=row["sharding"], schedule=row["schedule"],
                            virtual_stages=row["virtual_stages"], global_batch=32, micro_batch=row["micro_batch"])
        assert plan.memory.most_loaded.peak == row["peak"]
        assert plan.seconds_per_step == pytest.approx(row["seconds_per_step"])
    _, text, _ = run_main(["plan", "--config", path, "--devices", "16", "--global-batch", "32", "--search"], capsys)
    first = next(line for line in text.splitlines() if line.split()[:1] == ["1"])
    assert rows[0]["describe"] in first


@pytest.mark.parametrize(("argv", "message"), [
    pytest.param(["--search"], r"--search ranks layouts for one global batch: give --global-batch", id="batch"),
    pytest.param(["--search", "--global-batch", "8", "--tensor-parallel", "2"],
                 r"--search chooses the layout and the micro-batch itself: drop --tensor-parallel 2", id="axis"),
    pytest.param(["--search", "--global-batch", "8", "--sharding", "zero3", "--schedule", "gpipe"],
                 r"drop --sharding zero3, --schedule gpipe$", id="sharding"),
    pytest.param(["--tensor-parallel", "2", "--links", "/nonexistent/links.json"],
                 r"links: cannot read /nonexistent/links.json", id="links"),
])
def test_search_and_links_refuse_what_they_cannot_use(argv, message, config_file, capsys):
    status, out, err = run_main(["plan", "--config", config_file(SMALL_LLAMA), "--devices", "8", *argv], capsys)
    assert status == 2 and out == "" and len(err.strip().splitlines()) == 1
    assert re.search(message, err), err


# ---- the documented layouts are what the command prints ------------------------------------------------

def _section() -> str:
    text = DOC.read_text(encoding="utf8")
    start = text.index("## Parallel layouts")
    return text[start:text.index("\n## ", start + 1)]


@pytest.fixture
def doc_configs(tmp_path, monkeypatch):
    """Each config.json docs/plan.md shows (a ``<!-- name.json -->`` line above a json block), written to a
    directory the test then runs in, as a reader would."""
    for name, block in re.findall(r"<!-- (\S+\.json) -->\n```json\n(.*?)```", DOC.read_text(encoding="utf8"),
                                  flags=re.DOTALL):
        (tmp_path / name).write_text(block)
    monkeypatch.chdir(tmp_path)
    return tmp_path


def documented_layouts() -> list:
    """``(arguments, our figure in GiB)`` of each torchtitan row of docs/plan.md's "Parallel layouts" section."""
    runs = []
    for command, figure in re.findall(r"`(python -m accounting plan [^`]+)`\s*\|\s*\*\*([\d.]+)\*\*", _section()):
        runs.append(pytest.param(shlex.split(command)[3:], float(figure), id=f"torchtitan-{len(runs) + 1}"))
    return runs


def documented_outputs() -> list:
    """``(arguments, printed text)`` of each ```console block of the section."""
    runs = []
    for block in re.findall(r"```console\n\$ (python -m accounting plan .*?)```", _section(), flags=re.DOTALL):
        command, _, output = block.partition("\n")
        runs.append(pytest.param(shlex.split(command)[3:], output, id=f"console-{len(runs) + 1}"))
    return runs


def documented_programs() -> list:
    """``(program, printed text)`` of each ```python block of the section and the ```text block after it."""
    pairs = re.findall(r"```python\n(.*?)```\n\n```text\n(.*?)```", _section(), flags=re.DOTALL)
    return [pytest.param(program, printed, id=f"program-{index + 1}") for index, (program, printed) in enumerate(pairs)]


def test_the_doc_has_each_kind_of_anchor():
    assert len(documented_layouts()) == 8 and len(documented_outputs()) == 3 and len(documented_programs()) == 2


@pytest.mark.parametrize(("argv", "figure"), documented_layouts())
def test_the_documented_peaks_are_what_the_command_prints(argv, figure, doc_configs, capsys):
    """The doc's figure for each torchtitan run is the most loaded rank's peak the command prints, in GiB."""
    status, out, err = run_main([*argv, "--json"], capsys)
    assert status in (0, 1), err
    document = json.loads(out)
    if "memory_per_rank" in document:
        peak = document["memory_per_rank"][document["most_loaded_stage"]]["peak"]
    else:  # every degree 1: the single-device plan
        peak = document["memory_per_device"]["peak"]
    assert round(peak / 2**30, 1) == figure


@pytest.mark.parametrize(("argv", "printed"), documented_outputs())
def test_the_documented_layout_plans_are_what_the_command_prints(argv, printed, doc_configs, capsys):
    """Regenerate the section's outputs when the formulas change: the doc shows real output."""
    status, out, err = run_main(argv, capsys)
    assert (status, err) == (0, "") and out == printed


@pytest.mark.parametrize(("program", "printed"), documented_programs())
def test_the_documented_anchor_tables_are_what_their_programs_print(program, printed, doc_configs, capsys):
    exec(compile(program, "docs/plan.md", "exec"), {"__name__": "docs"})
    assert capsys.readouterr().out == printed


def test_the_readme_example_is_the_commands_output(doc_configs, capsys):
    """Every line the README shows of its plan example is a line the command prints (the README shows an excerpt)."""
    text = (ROOT / "README.md").read_text(encoding="utf8")
    block = re.search(r"## Planning a run\n.*?```text\n\$ (python -m accounting plan .*?)```", text,
                      flags=re.DOTALL).group(1)
    command, _, shown = block.replace("\\\n", "").partition("\n")
    status, out, err = run_main(shlex.split(command)[3:], capsys)
    assert status == 0 and err == ""
    printed = out.splitlines()
    assert shown.splitlines() and all(line in printed for line in shown.splitlines())


# ---- when the formulas change: `python -m tests.test_plan_layout_cli` rewrites the figures in place -------------

def _printed(argv) -> str:
    """What ``accounting plan ARGV`` prints, run in-process."""
    import contextlib
    import io

    from accounting.__main__ import main

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        try:
            main(argv)
        except SystemExit:
            pass
    return out.getvalue()


def rewrite_documents() -> None:
    """Re-run every documented plan and program of docs/plan.md (the single-device plans, the "Parallel layouts"
    section) and the README's plan excerpt, and write what they print in place (the prose around the figures is
    left for a person to read)."""
    import contextlib
    import io
    import os
    import tempfile

    text = DOC.read_text(encoding="utf8")
    start = text.index("## Parallel layouts")
    end = text.index("\n## ", start + 1)
    section = text[start:end]
    readme = (ROOT / "README.md").read_text(encoding="utf8")
    here = os.getcwd()
    with tempfile.TemporaryDirectory() as directory:
        for name, block in re.findall(r"<!-- (\S+\.json) -->\n```json\n(.*?)```", text, flags=re.DOTALL):
            Path(directory, name).write_text(block)
        os.chdir(directory)
        try:
            def console(match):
                command = match.group(1)
                return f"```console\n$ {command}\n{_printed(shlex.split(command)[3:])}```"

            section = re.sub(r"```console\n\$ (python -m accounting plan [^\n]*)\n.*?```", console, section,
                             flags=re.DOTALL)

            def program(match):
                out = io.StringIO()
                with contextlib.redirect_stdout(out):
                    exec(compile(match.group(1), "docs/plan.md", "exec"), {"__name__": "docs"})
                return f"```python\n{match.group(1)}```\n\n```text\n{out.getvalue()}```"

            section = re.sub(r"```python\n(.*?)```\n\n```text\n(.*?)```", program, section, flags=re.DOTALL)

            def row(match):
                published, command = match.group(1), match.group(2)
                document = json.loads(_printed([*shlex.split(command)[3:], "--json"]))
                rank = (document["memory_per_rank"][document["most_loaded_stage"]] if "memory_per_rank" in document
                        else document["memory_per_device"])
                ours = round(rank["peak"] / 2**30, 1)
                return f"| {published} | `{command}` | **{ours}** | {ours / float(published):.2f} |"

            section = re.sub(r"\| ([\d.]+) \| `(python -m accounting plan [^`]+)` \| \*\*[\d.]+\*\* \| [\d.]+ \|", row,
                             section)
            block = re.search(r"## Planning a run\n.*?```text\n\$ (python -m accounting plan .*?)```", readme,
                              flags=re.DOTALL)
            arguments, _, shown = block.group(1).replace("\\\n", "").partition("\n")
            printed = _printed(shlex.split(arguments)[3:]).splitlines()
            lines = [next(line for line in printed if line.split()[:1] == old.split()[:1]) for old in shown.splitlines()]
            readme = readme.replace(shown, "\n".join(lines) + "\n")
        finally:
            os.chdir(here)
    text = text[:start] + section + text[end:]

    def plain(match):  # the single-device plans above the section, each with its exit status when shown
        command, status = match.group(1), match.group(3)
        with tempfile.TemporaryDirectory() as directory:
            Path(directory, "llama-3-8b.json").write_text(
                re.search(r"```json\n(.*?)```", text, flags=re.DOTALL).group(1))
            os.chdir(directory)
            try:
                out = io.StringIO()
                with contextlib.redirect_stdout(out):
                    try:
                        code = main(shlex.split(command)[3:])
                    except SystemExit as exit_:
                        code = exit_.code
            finally:
                os.chdir(here)
        shown = f"$ echo $?\n{code}\n" if status is not None else ""
        return f"```text\n$ {command}\n{out.getvalue()}{shown}```"

    from accounting.__main__ import main

    text = re.sub(r"```text\n\$ (python -m accounting plan [^\n]*)\n(.*?)(?:\$ echo \$\?\n(\d+)\n)?```", plain, text,
                  flags=re.DOTALL)
    DOC.write_text(text, encoding="utf8")
    (ROOT / "README.md").write_text(readme, encoding="utf8")


if __name__ == "__main__":
    rewrite_documents()
