"""Re-evaluating a trained checkpoint at new lengths and with a RoPE scaling strategy."""

import json
from pathlib import Path

import pytest
import torch
from hydra.core.global_hydra import GlobalHydra
from omegaconf import DictConfig, OmegaConf

from pelab.analysis.collect import directory_records
from pelab.analysis.report import main as make_table
from pelab.analysis.sweep import SweepSummary
from pelab.assembly import build_model, build_task
from pelab.errors import ConfigError
from pelab.evaluate import check_evaluation, eval_overrides, evaluate, main
from pelab.record import SCHEMA_VERSION
from pelab.train import train
from tests.conftest import TINY, compose_config


def compose_eval(overrides: list[str], root: Path) -> DictConfig:
    """``eval.yaml`` composed as ``scripts/eval.py`` would, with every path inside ``root``."""
    return compose_config(overrides, root, config_name="eval")


def train_tiny(root: Path, *overrides: str) -> Path:
    """A tiny training run in ``root/run``; returns its best checkpoint."""
    cfg = compose_config([*TINY, "logger=csv", *overrides], root)
    train(cfg)
    GlobalHydra.instance().clear()
    return Path(cfg.paths.output_dir, "checkpoints", "best.ckpt")


@pytest.fixture(scope="module")
def rope_ckpt(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return train_tiny(tmp_path_factory.mktemp("rope"), "pe=rope")


@pytest.mark.integration
def test_a_checkpoint_is_re_evaluated_longer_with_linear_scaling(rope_ckpt):
    run_dir = rope_ckpt.parent.parent
    train_results = (run_dir / "results.json").read_bytes()
    overrides = [
        f"ckpt_path='{rope_ckpt}'",
        "pe.scaling=linear",
        "pe.scaling_factor=2",
        "task.eval_lengths=[8,48]",
        "logger=csv",
    ]
    record = evaluate(compose_eval(overrides, run_dir.parent))

    written = list((run_dir / "eval").glob("*_scaling=linear,scaling_factor=2/results.json"))
    assert len(written) == 1
    res = json.loads(written[0].read_text())
    assert res["status"] == "completed" and res == json.loads(json.dumps(record, default=str))
    assert res["checkpoint"] == str(rope_ckpt.resolve())
    assert list(res["metrics"]["test"]) == ["8", "48"]
    for m in res["metrics"]["test"].values():
        assert 0.0 <= m["exact_match"] <= m["token_acc"] <= 1.0
    assert (
        set(res["metrics"]["test_id"])
        == set(res["metrics"]["test_ood"])
        == {
            "exact_match",
            "token_acc",
        }
    )
    pe = res["config"]["pe"]
    assert (pe["scaling"], pe["scaling_factor"]) == ("linear", 2.0)
    assert pe["original_max_len"] is None  # the encoding reads the training length from:
    assert res["model_dims"]["train_max_len"] == 8 + 8 + 2  # BOS, 8, SEP, 8
    assert res["schema_version"] == SCHEMA_VERSION and res["job_type"] == "eval"
    assert res["metrics"]["chance"].keys() == res["metrics"]["test"].keys()  # chance levels too
    assert res["config"]["model"]["net"]["d_model"] == 16  # the model of the training run
    assert res["choices"]["pe"] == "rope" and res["params"]["total"] > 0
    assert (written[0].parent / "csv").is_dir()  # the logger writes beside the results
    assert (run_dir / "results.json").read_bytes() == train_results  # training record untouched
    # the trained run's settings, never the evaluation's defaults; the evaluation's own apart
    trained = json.loads(train_results)["config"]
    assert res["config"]["trainer"] == trained["trainer"] and trained["trainer"]["max_steps"] == 4
    assert res["evaluation"]["trainer"]["max_steps"] == 3000  # configs/trainer/default.yaml
    assert res["evaluation"]["paths"]["output_dir"] == str(written[0].parent)


@pytest.mark.integration
def test_without_overrides_the_training_numbers_are_reproduced(rope_ckpt):
    run_dir = rope_ckpt.parent.parent
    evaluate(compose_eval([f"ckpt_path='{rope_ckpt}'"], run_dir.parent))
    res = json.loads(next((run_dir / "eval").glob("*_as_trained/results.json")).read_text())
    trained = json.loads((run_dir / "results.json").read_text())
    assert res["metrics"]["test"] == trained["metrics"]["test"]


@pytest.mark.integration
def test_evaluation_chooses_torchs_threads_by_the_model_it_rebuilt(rope_ckpt, caplog):
    run_dir = rope_ckpt.parent.parent
    torch.set_num_threads(2)
    with caplog.at_level("INFO", logger="pelab.threads"):
        record = evaluate(compose_eval([f"ckpt_path='{rope_ckpt}'"], run_dir.parent))
    assert torch.get_num_threads() == 1  # a small model (pelab.threads)
    assert "torch threads: 1 (model of " in caplog.text
    assert record["evaluation"]["threads"] == "auto"
    record = evaluate(compose_eval([f"ckpt_path='{rope_ckpt}'", "threads=2"], run_dir.parent))
    assert torch.get_num_threads() == 2 and record["evaluation"]["threads"] == 2
    with pytest.raises(ConfigError, match="threads='all': valid choices: auto"):
        evaluate(compose_eval([f"ckpt_path='{rope_ckpt}'", "threads=all"], run_dir.parent))


def test_a_missing_checkpoint_is_a_clear_error(tmp_path):
    missing = tmp_path / "run" / "checkpoints" / "best.ckpt"
    with pytest.raises(ConfigError, match=r"ckpt_path=.*best.ckpt does not exist"):
        evaluate(compose_eval([f"ckpt_path='{missing}'"], tmp_path))
    assert not (tmp_path / "run").exists()
    with pytest.raises(ConfigError, match=r"set ckpt_path="):
        evaluate(compose_eval([], tmp_path))


@pytest.mark.integration
def test_a_corrupt_checkpoint_is_a_clear_error(rope_ckpt):
    corrupt = rope_ckpt.parent / "corrupt.ckpt"
    corrupt.write_bytes(b"not a checkpoint")
    with pytest.raises(ConfigError, match=r"corrupt.ckpt is not a readable Lightning checkpoint"):
        evaluate(compose_eval([f"ckpt_path='{corrupt}'"], rope_ckpt.parent.parent.parent))


@pytest.mark.integration
def test_weights_that_do_not_fit_the_config_are_a_clear_error(rope_ckpt, tmp_path):
    # a run dir whose results.json claims a wider model than the checkpoint holds
    run_dir = tmp_path / "run"
    (run_dir / "checkpoints").mkdir(parents=True)
    record = json.loads((rope_ckpt.parent.parent / "results.json").read_text())
    record["config"]["model"]["net"]["d_model"] = 32
    (run_dir / "results.json").write_text(json.dumps(record))
    ckpt = run_dir / "checkpoints" / "best.ckpt"
    ckpt.write_bytes(rope_ckpt.read_bytes())
    with pytest.raises(ConfigError, match=r"do not fit the model built from its run's config"):
        evaluate(compose_eval([f"ckpt_path='{ckpt}'"], tmp_path))


@pytest.mark.integration
def test_a_schedule_is_not_added_to_a_checkpoint_trained_without_one(rope_ckpt, tmp_path):
    overrides = [f"ckpt_path='{rope_ckpt}'", "pe.layers=[rope,none]"]
    with pytest.raises(ConfigError, match=r"pe.layers=\[rope,none\]: the checkpoint was trained"):
        evaluate(compose_eval(overrides, tmp_path))


@pytest.mark.integration
def test_scaling_an_encoding_without_that_option_is_refused(tmp_path):
    ckpt = train_tiny(tmp_path, "pe=alibi")
    overrides = [f"ckpt_path='{ckpt}'", "pe.scaling=yarn"]
    with pytest.raises(ConfigError, match=r"pe.scaling=yarn is not an option of .*AlibiPE"):
        evaluate(compose_eval(overrides, tmp_path))


@pytest.mark.integration
def test_a_learned_table_cannot_be_evaluated_beyond_its_size(tmp_path):
    ckpt = train_tiny(tmp_path, "pe=learned")
    overrides = [f"ckpt_path='{ckpt}'", "task.eval_lengths=[8,40]"]
    with pytest.raises(ConfigError, match=r"pe=learned has 66 positions.*cannot extrapolate"):
        evaluate(compose_eval(overrides, tmp_path))
    # found before the evaluation starts, by timing its decoding (pelab.eval_time): no record
    assert not list((tmp_path / "run" / "eval").glob("*/results.json"))


@pytest.mark.integration
def test_an_evaluation_without_an_in_distribution_length_is_refused_and_leaves_no_record(
    rope_ckpt,
):
    run_dir = rope_ckpt.parent.parent
    before = set((run_dir / "eval").glob("*")) if (run_dir / "eval").exists() else set()
    overrides = [f"ckpt_path='{rope_ckpt}'", "pe.scaling=yarn", "task.eval_lengths=[16,64]"]
    with pytest.raises(ConfigError, match=r"\[16, 64\] has no in-distribution length"):
        evaluate(compose_eval(overrides, run_dir.parent))
    after = set((run_dir / "eval").glob("*")) if (run_dir / "eval").exists() else set()
    assert after == before


@pytest.mark.integration
@pytest.mark.parametrize(
    ("overrides", "refusal"),
    [
        (["pe.scaling=yarnn"], r"unknown pe.scaling 'yarnn'; valid choices"),
        (["pe.num_buckets=8"], r"pe.num_buckets=8 is not an option of .*RotaryPE"),
        (["task.eval_lengths=[16,64]"], r"\[16, 64\] has no in-distribution length"),
        (["pe.scaling=yarn", "pe.scaling_factor=4"], None),
    ],
)
def test_an_evaluation_job_is_checked_before_it_runs_as_the_evaluation_would_refuse_it(
    rope_ckpt, tmp_path, overrides, refusal
):
    """``check_evaluation``: what the checked sweeper asks of each job of ``eval.py -m``."""
    cfg = compose_eval([f"ckpt_path='{rope_ckpt}'", *overrides], tmp_path)
    if refusal is None:
        check_evaluation(cfg)
        return
    with pytest.raises(ConfigError, match=refusal):
        check_evaluation(cfg)
    with pytest.raises(ConfigError, match=refusal):
        evaluate(cfg)


@pytest.mark.integration
def test_a_urpe_table_keeps_its_training_size_at_longer_lengths(tmp_path):
    # the Toeplitz table has one entry per offset up to the training max_len - 1 (66 tokens:
    # BOS, 32, SEP, 32); longer offsets reuse the last entry, so the checkpoint loads and runs
    ckpt = train_tiny(tmp_path, "pe=urpe", "pe.bias=none")
    record = evaluate(compose_eval([f"ckpt_path='{ckpt}'", "task.eval_lengths=[8,40]"], tmp_path))
    assert record["status"] == "completed" and list(record["metrics"]["test"]) == ["8", "40"]
    assert record["model_dims"]["max_len"] == 66
    # a run recorded before records kept model_dims: its table is pinned all the same
    results = ckpt.parent.parent / "results.json"
    train_record = json.loads(results.read_text())
    del train_record["model_dims"]
    results.write_text(json.dumps(train_record))
    record = evaluate(compose_eval([f"ckpt_path='{ckpt}'", "task.eval_lengths=[8,40]"], tmp_path))
    assert record["status"] == "completed" and record["model_dims"]["max_len"] == 66


@pytest.mark.integration
def test_a_learned_table_keeps_its_size_under_randomized_positions(tmp_path):
    # with randomized positions the table has positions.max_position rows, not 66
    ckpt = train_tiny(tmp_path, "pe=learned", "positions=randomized", "positions.max_position=96")
    record = evaluate(compose_eval([f"ckpt_path='{ckpt}'", "task.eval_lengths=[8,40]"], tmp_path))
    assert record["status"] == "completed" and record["model_dims"]["max_len"] == 96


def test_the_training_context_length_counts_the_prompt_at_the_longest_training_length(tiny_cfg):
    # addition's prompt at n digits is "a + b" (2n + 1 tokens), its answer n + 1 digits: the
    # longest training sequence is not 2n + 2 tokens, as a prompt of n tokens would give
    cfg = tiny_cfg("task=addition", "pe=rope", "pe.scaling=yarn", "pe.scaling_factor=2")
    task = build_task(cfg)
    model = build_model(cfg, task)
    hi = task.train_lengths[1]
    assert task.prompt_length(hi) != hi
    expected = task.prompt_length(hi) + task.answer_length(hi) + 2
    assert model.net.dims.train_max_len == task.max_train_sequence_length() == expected
    assert model.net.pe.original_max_len == expected  # what the scaling stretches from


@pytest.mark.integration
def test_an_evaluation_sweep_is_summarised_and_tabulated_by_its_settings(
    rope_ckpt, tmp_path, monkeypatch, capsys
):
    """``scripts/eval.py -m pe.scaling=linear,ntk,none pe.scaling_factor=2``, simulated: each job
    links its Hydra directory to its record; a failing job is recorded and the sweep goes on;
    the summary counts the jobs (one failed before its record), finds no phantom training runs,
    and ``make_table.py <sweep dir>`` writes the evaluation table: a row per scaling strategy
    with the chance level."""
    sweep, hydra = (
        tmp_path / "sweep",
        OmegaConf.create({"hydra": {"job": {"config_name": "eval"}}}),
    )
    sweep.mkdir()
    OmegaConf.save(hydra, sweep / "multirun.yaml")
    monkeypatch.setattr("pelab.hydra_job.in_sweep", lambda: True)
    for num, scaling in enumerate(["linear", "ntk", "none", "early failure"]):
        job_dir = sweep / str(num)
        (job_dir / ".hydra").mkdir(parents=True)
        OmegaConf.save(hydra, job_dir / ".hydra" / "hydra.yaml")
        monkeypatch.setattr("pelab.evaluate.sweep_hydra_dir", lambda d=job_dir: d)
        ckpt = rope_ckpt if scaling != "early failure" else tmp_path / "absent.ckpt"
        overrides = [f"ckpt_path='{ckpt}'", "pe.scaling_factor=2", "task.eval_lengths=[8,16]"]
        cfg = compose_eval([*overrides, f"pe.scaling={scaling.split()[0]}"], tmp_path)
        main(cfg)  # none with a factor fails inside its job: recorded, and the sweep goes on
    assert eval_overrides(cfg) == [
        "pe.scaling=early",
        "pe.scaling_factor=2",
        "task.eval_lengths=[8,16]",
    ]
    assert directory_records(sweep) == []  # no training run is missing from an eval sweep
    with pytest.raises(SystemExit, match="2 of 4 jobs did not complete"):
        SweepSummary().on_multirun_end(
            OmegaConf.create(
                {"hydra": {"sweep": {"dir": str(sweep)}, "job": {"config_name": "eval"}}}
            )
        )
    err = capsys.readouterr().err
    assert "4 jobs: 2 completed, 2 failed" in err and "no effect with pe.scaling=none" in err
    assert make_table([str(sweep)]) == 0
    table = (sweep / "summary" / "eval" / "table_tasks.md").read_text()
    rows = [line.split("|")[2].strip() for line in table.splitlines() if line.startswith("| rope")]
    assert rows == ["linear", "ntk", "none", "none"] and "| pe.scaling" in table
    as_trained = [line for line in table.splitlines() if line.startswith("| rope")][-1]
    assert "[4,8,16,32]" in as_trained  # the run as trained: its own lengths and factor
    assert "not learned" in as_trained  # and whether it had learned
    assert "| chance" in table and not (sweep / "summary" / "table_tasks.md").exists()
