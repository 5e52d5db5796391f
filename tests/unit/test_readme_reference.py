"""README.md's configuration and metrics references are what the code says (tools/gen_reference.py).

A setting added to shared/config_sections.py, or a metric added or renamed in extender/metrics.py or
rescheduler/metrics.py, fails here until ``python3 tools/gen_reference.py`` rewrites the README.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from shared.config import env_names
from tools.gen_reference import (
    CONFIG_BEGIN,
    EXAMPLES,
    METRICS_BEGIN,
    README,
    check_example,
    metric_families,
    settings,
    updated_readme,
)


def test_readme_references_are_up_to_date() -> None:
    text = README.read_text(encoding="utf-8")
    assert CONFIG_BEGIN in text and METRICS_BEGIN in text
    assert updated_readme(text) == text, "README.md is stale: run python3 tools/gen_reference.py"


def test_every_setting_and_its_variable_is_in_the_readme() -> None:
    text = README.read_text(encoding="utf-8")
    for variable, path in env_names().items():
        assert f"| `{path}` |" in text and f"`{variable}`" in text
    assert len(settings()) == len(env_names())


def test_every_exported_metric_is_in_the_readme() -> None:
    text = README.read_text(encoding="utf-8")
    families = metric_families()
    assert len(families) >= 18
    for family in families:
        assert f"| `{family.shown}` |" in text


@pytest.mark.parametrize("path", sorted(EXAMPLES))
def test_each_example_is_accepted_by_the_loader(path: str) -> None:
    check_example(path, EXAMPLES[path])


def test_a_wrong_example_would_be_caught() -> None:
    from shared.config import ConfigError

    with pytest.raises(ConfigError):
        check_example("webhook.weight", "150")


def test_the_generator_script_is_where_the_readme_says() -> None:
    assert (Path(__file__).resolve().parents[2] / "tools" / "gen_reference.py").exists()
