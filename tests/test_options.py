"""Options built from config dataclasses (``attnlab._options``): fields, defaults and
checks come from the dataclass; the flag is named in every refusal; the survey's and the
training's options are their configs'."""

from __future__ import annotations

import argparse
import dataclasses
import re
from dataclasses import dataclass

import pytest

from attnlab._options import add_dataclass_options, config_from_args, positive_int


@dataclass(frozen=True)
class Cfg:
    batch_size: int = 8
    epsilon: float = 0.3
    name: str = "x"
    probes: bool = True
    verbose: bool = False

    def __post_init__(self) -> None:
        if self.batch_size < 1:
            raise ValueError(f"batch_size must be a positive int, got {self.batch_size}")
        if not 0 <= self.epsilon < 1:
            raise ValueError(f"epsilon must be in [0, 1), got {self.epsilon}")


HELP = {"batch_size": "texts a pass", "epsilon": "a threshold", "name": "a name",
        "probes": "skip the probes", "verbose": "say more"}


def _parser(cls=Cfg, **kw) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="t")
    add_dataclass_options(p, cls, help=HELP, **kw)
    return p


def test_fields_become_typed_options_with_the_fields_defaults():
    p = _parser()
    assert config_from_args(Cfg, p.parse_args([])) == Cfg()
    got = config_from_args(Cfg, p.parse_args(["--batch-size", "3", "--epsilon", "0.5",
                                              "--name", "y", "--no-probes", "--verbose"]))
    assert got == Cfg(batch_size=3, epsilon=0.5, name="y", probes=False, verbose=True)
    text = p.format_help()
    assert "texts a pass (default 8)" in text and "a threshold (default 0.3)" in text
    assert "--batch-size BATCH_SIZE" in text and "--no-probes" in text
    with pytest.raises(SystemExit):  # argparse types the value
        p.parse_args(["--batch-size", "many"])


def test_a_refusal_by_the_dataclass_names_the_flag():
    p = _parser(flags={"batch_size": "--bs"})
    with pytest.raises(ValueError, match=r"^--bs must be a positive int, got 0$"):
        config_from_args(Cfg, p.parse_args(["--bs", "0"]), flags={"batch_size": "--bs"})
    with pytest.raises(ValueError, match=re.escape("--epsilon must be in [0, 1), got 1.5")):
        config_from_args(Cfg, _parser().parse_args(["--epsilon", "1.5"]))


def test_given_only_leaves_defaults_to_the_factory():
    p = _parser(given_only=True)
    args = p.parse_args(["--batch-size", "2"])
    assert (args.batch_size, args.epsilon, args.probes) == (2, None, None)
    made = config_from_args(Cfg, args, build=lambda **kw: Cfg(**{"epsilon": 0.1, **kw}))
    assert made == Cfg(batch_size=2, epsilon=0.1)
    assert config_from_args(Cfg, p.parse_args(["--probes"])).probes is True
    assert config_from_args(Cfg, p.parse_args(["--no-probes"])).probes is False


def test_a_class_not_imported_for_help_types_the_values_at_run_time():
    p = _parser(None, flags={"probes": "--no-probes"})
    args = p.parse_args(["--batch-size", "4", "--epsilon", "0.25", "--no-probes"])
    assert args.batch_size == "4"  # kept as typed until the class is known
    assert config_from_args(Cfg, args, flags={"probes": "--no-probes"}) == Cfg(
        batch_size=4, epsilon=0.25, probes=False)
    with pytest.raises(ValueError, match=r"^--batch-size: expected an integer, got 'x'$"):
        config_from_args(Cfg, p.parse_args(["--batch-size", "x"]))
    with pytest.raises(ValueError, match=r"^--batch-size must be a positive int, got 0$"):
        config_from_args(Cfg, p.parse_args(["--batch-size", "0"]))


def test_an_unknown_field_or_type_is_refused_when_the_parser_is_built():
    with pytest.raises(TypeError, match="Cfg has no field 'nope'"):
        add_dataclass_options(argparse.ArgumentParser(), Cfg, help={"nope": "?"})

    @dataclass
    class Listy:
        sizes: list = dataclasses.field(default_factory=list)

    with pytest.raises(TypeError, match="an int, float, str or bool field"):
        add_dataclass_options(argparse.ArgumentParser(), Listy, help={"sizes": "?"})


def test_positive_int():
    assert positive_int("2") == 2
    for bad in ("0", "-1", "x"):
        with pytest.raises(argparse.ArgumentTypeError, match="an integer >= 1"):
            positive_int(bad)


# --------------------------------------------------------------------------------------
# the commands' options are their configs'
# --------------------------------------------------------------------------------------


def _subparser(name: str) -> argparse.ArgumentParser:
    from attnlab.cli import build_parser

    sub = next(a for a in build_parser()._actions if a.dest == "command")
    return sub.choices[name]


def test_every_survey_config_field_is_an_option_whose_help_states_its_default():
    from attnlab.analysis.survey import SurveyConfig
    from attnlab.commands import survey

    fields = {f.name: f.default for f in dataclasses.fields(SurveyConfig)}
    assert set(survey.OPTIONS) == set(fields)
    actions = {a.dest: a for a in _subparser("survey")._actions}
    for name, default in fields.items():
        if isinstance(default, bool):
            assert actions[name].default is None  # a switch: SurveyConfig's default stands
            continue
        assert actions[name].default == default  # the dataclass's own default
        stated = re.search(r"\(default ([^:)]+)", actions[name].help)
        assert stated and stated.group(1) == str(default), (name, actions[name].help)
    args = _subparser("survey").parse_args(["--model", "m", "--out", "o"])
    from attnlab._options import config_from_args

    assert config_from_args(SurveyConfig, args, flags=survey.FLAGS) == SurveyConfig()


def test_the_training_options_are_train_config_fields_with_its_defaults():
    from attnlab.train.config import FLAGS, OPTIONS, TrainConfig, config_from_args

    actions = {a.dest: a for a in _subparser("train")._actions}
    fields = {f.name: f.default for f in dataclasses.fields(TrainConfig)}
    for name in OPTIONS:
        assert actions[name].default is None  # the task's defaults fill what is not given
        assert actions[name].option_strings[0] == FLAGS.get(name, "--" + name.replace("_", "-"))
        if "the task's" not in actions[name].help:
            assert actions[name].help.endswith(f"(default {fields[name]})"), name
    args = _subparser("train").parse_args(["--task", "copy", "--out", "o"])
    assert config_from_args(args) == TrainConfig.for_task("copy")
    bad = _subparser("train").parse_args(["--task", "copy", "--out", "o", "--layers", "0"])
    with pytest.raises(ValueError, match=re.escape("--layers (num_layers) must be a positive")):
        config_from_args(bad)
