"""The documentation's configuration and metrics references are what the code says (tools/gen_reference.py).

A setting added to shared/config_sections.py, or a metric added or renamed in extender/metrics.py or
rescheduler/metrics.py, fails here until ``python3 tools/gen_reference.py`` rewrites docs/configuration.md and
docs/metrics.md.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from shared.config import env_names
from tools.gen_reference import (
    CONFIG_BEGIN,
    CONFIG_PAGE,
    EXAMPLES,
    METRICS_BEGIN,
    METRICS_PAGE,
    check_example,
    metric_families,
    settings,
    updated_config_page,
    updated_metrics_page,
)

ROOT = Path(__file__).resolve().parents[2]


def test_the_references_are_written_into_the_documentation_pages() -> None:
    assert CONFIG_PAGE == ROOT / "docs" / "configuration.md"
    assert METRICS_PAGE == ROOT / "docs" / "metrics.md"


def test_the_configuration_reference_is_up_to_date() -> None:
    text = CONFIG_PAGE.read_text(encoding="utf-8")
    assert CONFIG_BEGIN in text
    assert updated_config_page(text) == text, "docs/configuration.md is stale: run python3 tools/gen_reference.py"


def test_the_metrics_reference_is_up_to_date() -> None:
    text = METRICS_PAGE.read_text(encoding="utf-8")
    assert METRICS_BEGIN in text
    assert updated_metrics_page(text) == text, "docs/metrics.md is stale: run python3 tools/gen_reference.py"


def test_every_setting_and_its_variable_is_in_the_configuration_page() -> None:
    text = CONFIG_PAGE.read_text(encoding="utf-8")
    for variable, path in env_names().items():
        assert f"| `{path}` |" in text and f"`{variable}`" in text
    assert len(settings()) == len(env_names())


def test_every_exported_metric_is_in_the_metrics_page() -> None:
    text = METRICS_PAGE.read_text(encoding="utf-8")
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


def test_the_generator_script_is_where_the_pages_say() -> None:
    assert (ROOT / "tools" / "gen_reference.py").exists()
    for page in (ROOT / "docs" / "configuration.md", ROOT / "docs" / "metrics.md"):
        assert "python3 tools/gen_reference.py" in page.read_text(encoding="utf-8")
