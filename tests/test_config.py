"""Settings: validation naming each bad parameter, kebab-case mappings, round trips."""

from __future__ import annotations

import dataclasses
import math

import pytest

from ldpfda.config import Settings


def test_defaults_are_valid_and_frozen():
    settings = Settings()
    assert settings.is_private
    assert settings.label_share is None
    with pytest.raises(dataclasses.FrozenInstanceError):
        settings.epsilon = 1.0  # type: ignore[misc]
    assert not Settings(epsilon=math.inf).is_private


def test_the_default_is_one_joint_release_and_the_moment_classifier():
    settings = Settings()
    assert settings.mechanism == "joint-hybrid" and settings.joint_release
    assert settings.vector_mechanism == "hybrid"
    assert settings.protocol == "moment" and settings.learner == "moment"
    assert settings.public_features
    assert Settings(method="mrma").protocol == "mrma"
    assert Settings(mechanism="joint-duchi").vector_mechanism == "duchi"


def test_the_reference_is_one_option_away():
    reference = Settings.reference(epsilon=2.0)
    assert reference == Settings(mechanism="reference", epsilon=2.0)
    assert not reference.joint_release
    assert reference.protocol == "mrma" and reference.learner == "logistic"
    assert Settings.from_mapping({"privacy.mechanism": "reference"}) == (
        Settings.reference()
    )
    assert Settings.reference(weak_learner="svm").learner == "svm"
    assert Settings.reference(method="moment").protocol == "moment"
    with pytest.raises(ValueError, match="no vector mechanism"):
        _ = reference.vector_mechanism


@pytest.mark.parametrize(
    ("changes", "name"),
    [
        ({"epsilon": 0.0}, "epsilon"),
        ({"epsilon": -2.0}, "epsilon"),
        ({"epsilon": math.nan}, "epsilon"),
        ({"label_share": 0.0}, "label_share"),
        ({"label_share": 1.0}, "label_share"),
        ({"order": 0}, "order"),
        ({"n_basis": 3, "order": 4}, "n_basis"),
        ({"calibration_size": 1}, "calibration_size"),
        ({"num_weak_models": 0}, "num_weak_models"),
        ({"subsample_size": 501, "n_train": 500, "method": "mrma"}, "subsample_size"),
        ({"subsample_size": 1}, "subsample_size"),
        ({"cutoff": 0.6}, "cutoff"),
        ({"cutoff": -0.1}, "cutoff"),
        ({"weak_learner": "tree"}, "weak_learner"),
        ({"mechanism": "gauss"}, "mechanism"),
        ({"mechanism": "hybrid"}, "mechanism"),
        ({"method": "voting"}, "method"),
        ({"method": "mrma", "weak_learner": "logistic"}, "weak_learner"),
        ({"method": "mrma", "weak_learner": "natarajan"}, "weak_learner"),
        ({"label_share": 0.5}, "label_share"),
        ({"dataset": "images"}, "dataset"),
        ({"n_train": 1}, "n_train"),
        ({"n_eval": 49, "num_weak_models": 50, "mechanism": "reference"}, "n_eval"),
        ({"n_test": 0}, "n_test"),
        ({"repeats": 0}, "repeats"),
        ({"seed": -1}, "seed"),
    ],
)
def test_each_bad_value_is_a_value_error_naming_it(changes, name):
    with pytest.raises(ValueError, match=name):
        Settings(**changes)


def test_error_messages_repeat_the_value():
    with pytest.raises(ValueError, match=r"epsilon must be in \(0, inf\], got -2.0"):
        Settings(epsilon=-2.0)
    with pytest.raises(
        ValueError, match=r"subsample_size must be <= n_train \(500\), got 501"
    ):
        Settings.reference(subsample_size=501, n_train=500)
    with pytest.raises(ValueError, match=r"n_basis must be >= order \(4\), got 3"):
        Settings(n_basis=3)
    with pytest.raises(ValueError, match=r"mechanism must be one of .*, got 'gauss'"):
        Settings(mechanism="gauss")
    # Every field with choices is checked, from the constructor and from a run config.
    with pytest.raises(ValueError, match=r"threshold must be one of .*, got 'mean'"):
        Settings(threshold="mean")
    with pytest.raises(ValueError, match=r"threshold must be one of .*, got 'mean'"):
        Settings.from_mapping({"server.threshold": "mean"})
    with pytest.raises(
        ValueError,
        match="weak_learner 'svm' needs released labels; with mechanism "
        "'joint-hybrid' use weak_learner 'moment'",
    ):
        Settings(method="mrma", weak_learner="svm")


@pytest.mark.parametrize(
    ("changes", "name"),
    [
        ({"epsilon": "5"}, "epsilon"),
        ({"epsilon": True}, "epsilon"),
        ({"n_basis": 10.0}, "n_basis"),
        ({"seed": 1.5}, "seed"),
        ({"normalize_models": 1}, "normalize_models"),
        ({"public_features": "yes"}, "public_features"),
        ({"cutoff": "0.2"}, "cutoff"),
    ],
)
def test_each_wrong_type_is_a_type_error_naming_it(changes, name):
    with pytest.raises(TypeError, match=name):
        Settings(**changes)


def test_subsample_size_equal_to_n_train_is_allowed():
    assert Settings(subsample_size=500, n_train=500).subsample_size == 500


def test_from_mapping_with_grouped_kebab_keys():
    settings = Settings.from_mapping(
        {
            "privacy.epsilon": 2.0,
            "privacy.mechanism": "reference",
            "privacy.label-share": 0.3,
            "server.method": "mrma",
            "fda.n-basis": 8,
            "fda.order": 3,
            "mrma.num-weak-models": 20,
            "mrma.subsample-size": 40,
            "mrma.cutoff": 0.1,
            "mrma.weak-learner": "svm",
            "mrma.normalize-models": False,
            "data.dataset": "functional",
            "data.public-features": False,
            "data.n-train": 300,
            "data.n-eval": 400,
            "seed": 3,
        }
    )
    assert settings == Settings(
        epsilon=2.0,
        mechanism="reference",
        method="mrma",
        public_features=False,
        label_share=0.3,
        n_basis=8,
        order=3,
        num_weak_models=20,
        subsample_size=40,
        cutoff=0.1,
        weak_learner="svm",
        normalize_models=False,
        dataset="functional",
        n_train=300,
        n_eval=400,
        seed=3,
    )


def test_from_mapping_with_bare_kebab_keys_gives_the_same():
    grouped = Settings.from_mapping(
        {
            "privacy.epsilon": 2.0,
            "fda.n-basis": 8,
            "mrma.num-weak-models": 20,
            "data.n-train": 300,
        }
    )
    bare = Settings.from_mapping(
        {"epsilon": 2.0, "n-basis": 8, "num-weak-models": 20, "n-train": 300}
    )
    assert bare == grouped


def test_from_mapping_label_share_reference_and_string_epsilon():
    assert (
        Settings.from_mapping({"privacy.label-share": "reference"}).label_share is None
    )
    assert Settings.from_mapping({"label-share": ""}).label_share is None
    assert Settings.from_mapping({"privacy.epsilon": "2.5"}).epsilon == 2.5
    assert Settings.from_mapping({"privacy.epsilon": "inf"}).epsilon == math.inf


def test_from_mapping_starts_from_a_base():
    base = Settings(epsilon=3.0, seed=9)
    settings = Settings.from_mapping({"fda.n-basis": 6}, base=base)
    assert settings == base.replace(n_basis=6)


@pytest.mark.parametrize(
    "key",
    [
        "privacy.epsilonn",
        "epsilonn",
        "fda.epsilon",
        "data.seed",
        "privacy.n-basis",
        "mrma.weak_learner",
        "tool.flwr.app.config.seed",
    ],
)
def test_from_mapping_refuses_unknown_keys_naming_them(key):
    with pytest.raises(
        ValueError, match=rf"unknown setting\(s\): {key.replace('.', '[.]')}"
    ):
        Settings.from_mapping({key: 1, "privacy.epsilon": 2.0})


def test_from_mapping_names_every_unknown_key():
    with pytest.raises(ValueError, match="alpha, beta"):
        Settings.from_mapping({"beta": 1, "alpha": 2})


def test_from_mapping_validates_values():
    with pytest.raises(ValueError, match="epsilon"):
        Settings.from_mapping({"privacy.epsilon": 0.0})
    with pytest.raises(ValueError, match="subsample_size"):
        Settings.from_mapping(
            {
                "privacy.mechanism": "reference",
                "mrma.subsample-size": 600,
                "data.n-train": 500,
            }
        )


@pytest.mark.parametrize(
    "settings",
    [
        Settings(),
        Settings.reference(
            epsilon=0.5, label_share=0.25, n_basis=6, order=2, dataset="functional"
        ),
        Settings.reference(
            epsilon=math.inf, weak_learner="svm", normalize_models=False, seed=42
        ),
        Settings(mechanism="joint-duchi", method="mrma", public_features=False, seed=5),
    ],
    ids=["defaults", "functional", "non-private", "joint-mrma"],
)
def test_round_trip_to_mapping_from_mapping(settings):
    mapping = settings.to_mapping()
    assert all(
        k == Settings.key(k.rsplit(".", 1)[-1].replace("-", "_")) for k in mapping
    )
    assert Settings.from_mapping(mapping) == settings
    assert mapping["privacy.label-share"] == (
        "reference" if settings.label_share is None else settings.label_share
    )


def test_keys_are_grouped_kebab_case():
    assert Settings.key("epsilon") == "privacy.epsilon"
    assert Settings.key("n_basis") == "fda.n-basis"
    assert Settings.key("num_weak_models") == "mrma.num-weak-models"
    assert Settings.key("n_train") == "data.n-train"
    assert Settings.key("mechanism") == "privacy.mechanism"
    assert Settings.key("method") == "server.method"
    assert Settings.key("public_features") == "data.public-features"
    assert Settings.key("seed") == "seed"
    mapping = Settings().to_mapping()
    assert set(mapping) == {Settings.key(f.name) for f in dataclasses.fields(Settings)}


# -- one declaration per setting -------------------------------------------------------


def test_the_docs_table_is_generated_from_the_settings():
    from pathlib import Path

    from ldpfda.config import settings_markdown

    docs = Path(__file__).resolve().parents[1] / "docs" / "settings.md"
    assert docs.read_text(encoding="utf-8") == settings_markdown(), (
        "docs/settings.md is stale: run python -m ldpfda.config > docs/settings.md"
    )


def test_the_flower_app_config_names_every_setting_once():
    import tomllib
    from pathlib import Path

    from ldpfda.config import FLOWER_PREFIX, Settings

    def flat(table, prefix=""):
        for key, value in table.items():
            if isinstance(value, dict):
                yield from flat(value, f"{prefix}{key}.")
            else:
                yield prefix + key

    root = Path(__file__).resolve().parents[1]
    config = tomllib.loads((root / "pyproject.toml").read_text(encoding="utf-8"))
    keys = set(flat(config["tool"]["flwr"]["app"]["config"]))
    assert {k for k in keys if not k.startswith(FLOWER_PREFIX)} == set(
        Settings().to_mapping()
    )


def test_cli_flags_come_from_the_settings_table():
    import argparse

    from ldpfda.cli import SIMULATE_FLAGS, add_setting_flags
    from ldpfda.config import Settings

    parser = argparse.ArgumentParser(allow_abbrev=False)
    add_setting_flags(parser, SIMULATE_FLAGS)
    args = parser.parse_args([])
    for name in SIMULATE_FLAGS:
        assert getattr(args, name) == getattr(Settings(), name), name
    with pytest.raises(SystemExit):
        parser.parse_args(["--n-trai", "5"])  # no prefix matching


#: Flags of a command that share a setting's name but are the command's own: the
#: budget (fit: from the spec), fit's split seed and the spec's basis, multiserver's
#: smaller test set and repeats.
_OWN = {
    "simulate": {"epsilon"},
    "fit": {"epsilon", "seed", "n_basis", "order"},
    "multiserver": {"n_test", "repeats"},
}


@pytest.mark.parametrize("command", sorted(_OWN))
def test_every_other_flag_named_after_a_setting_is_that_settings_own(command):
    # Declared once, in Settings: the help, default and choices the command shows.
    import argparse

    from ldpfda import cli
    from ldpfda.config import Settings, settings_table

    sub = argparse.ArgumentParser().add_subparsers()
    getattr(cli, f"_{command}_parser")(sub)
    actions = {a.dest: a for a in sub.choices[command]._actions}
    shared = [r for r in settings_table() if r["name"] in set(actions) - _OWN[command]]
    assert len(shared) >= 5, [r["name"] for r in shared]
    for row in shared:
        action = actions[row["name"]]
        assert action.option_strings == ["--" + row["name"].replace("_", "-")]
        assert action.help == f"{row['help']} (default: {row['default']})", row
        assert action.default == getattr(Settings(), row["name"]), row
        assert tuple(action.choices or ()) == row["choices"], row


# -- checks only where a setting is used, limits named -------------------------------


def test_mrma_sizes_are_not_checked_for_the_default_protocol():
    # The default protocol neither subsamples nor evaluates weak models.
    settings = Settings(n_train=20, n_eval=10)
    assert settings.protocol == "moment" and settings.subsample_size > 20
    assert Settings(n_eval=1).num_weak_models > 1


def test_too_many_weak_models_name_the_weak_models_and_the_limit():
    with pytest.raises(
        ValueError,
        match=r"num_weak_models must be <= n_eval \(833\): MRMA evaluates each weak "
        r"model on its own subgroup of evaluation clients, got 1000",
    ) as info:
        Settings.reference(num_weak_models=1000, n_eval=833)
    assert info.value.name == "num_weak_models"


@pytest.mark.parametrize(
    ("changes", "name", "limit"),
    [
        ({"n_train": 10**12}, "n_train", "10000000"),
        ({"n_eval": 10**8}, "n_eval", "10000000"),
        ({"n_test": 10**8}, "n_test", "10000000"),
        ({"calibration_size": 10**7}, "calibration_size", "1000000"),
        ({"seed": 2**64}, "seed", str(2**64 - 1)),
        ({"n_basis": 200, "dataset": "functional"}, "n_basis", "100"),
        ({"n_basis": 200, "dataset": "wearable"}, "n_basis", "144"),
        ({"order": 2, "n_basis": 10, "dataset": "wearable"}, "order", ">= 3"),
    ],
)
def test_sizes_beyond_their_limit_name_the_setting_and_the_limit(changes, name, limit):
    from ldpfda.config import SettingError

    with pytest.raises(SettingError, match=rf"^{name} must be .*{limit}") as info:
        Settings(**changes)
    assert info.value.name == name


def test_the_vector_design_does_not_check_a_basis_it_does_not_use():
    assert Settings(n_basis=200).n_basis == 200


def test_the_grid_limits_match_the_designs():
    from ldpfda.config import FUNCTIONAL_GRID_POINTS, WEARABLE_MAX_BASIS
    from ldpfda.datasets.synthetic import FunctionalDesign
    from ldpfda.datasets.wearable import DAY_MINUTES

    assert FUNCTIONAL_GRID_POINTS == FunctionalDesign().n_points
    assert WEARABLE_MAX_BASIS == DAY_MINUTES / 10.0


def test_more_than_two_classes_are_the_wearable_conditions_of_the_default():
    from ldpfda.config import WEARABLE_MAX_CLASSES, SettingError
    from ldpfda.datasets.wearable import CONDITIONS

    assert WEARABLE_MAX_CLASSES == len(CONDITIONS)
    assert Settings(dataset="wearable", n_classes=5).n_classes == 5
    for changes, match in [
        ({"dataset": "wearable", "n_classes": 6}, "<= 5"),
        ({"dataset": "wearable", "n_classes": 1}, ">= 2"),
        ({"n_classes": 3}, "dataset 'wearable'"),
        ({"dataset": "wearable", "n_classes": 3, "method": "mrma"}, "moment"),
    ]:
        with pytest.raises(SettingError, match=match) as info:
            Settings(**changes)
        assert info.value.name == "n_classes", changes
    # K-class MRMA takes a logistic or svm weak learner, in process and on Flower.
    reference = Settings(dataset="wearable", n_classes=3, mechanism="reference")
    reference.check_n_classes(3)
    with pytest.raises(SettingError, match="weak learner") as info:
        reference.replace(weak_learner="natarajan")
    assert info.value.name == "n_classes"


def test_wearable_servers_draw_their_own_unshifted_subjects():
    assert Settings(dataset="wearable", server_id=1).server_id == 1
    for name in ("feature_shift", "label_shift"):
        with pytest.raises(ValueError, match="no shifted populations") as info:
            Settings(dataset="wearable", server_id=0, **{name: 0.5})
        assert info.value.name == name


def test_every_validation_error_names_its_setting():
    from ldpfda.config import SettingError, SettingTypeError

    for changes, name in [
        ({"epsilon": 0.0}, "epsilon"),
        ({"cutoff": 0.7}, "cutoff"),
        ({"mechanism": "gauss"}, "mechanism"),
        ({"label_share": 0.5}, "label_share"),
        ({"mechanism": "label-uniform", "method": "mrma"}, "method"),
        ({"mechanism": "label-cluster", "n_clusters": 10**6}, "n_clusters"),
    ]:
        with pytest.raises(SettingError) as info:
            Settings(**changes)
        assert info.value.name == name, changes
    with pytest.raises(SettingTypeError) as type_info:
        Settings(n_train=2.5)
    assert type_info.value.name == "n_train"
    assert isinstance(type_info.value, TypeError)
