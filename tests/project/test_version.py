"""The package version follows the store schema (CHANGELOG.md, "Versions")."""

from __future__ import annotations

import tomllib

from packaging.version import Version

from pipedeck.store import SCHEMA_VERSION
from tests.paths import ROOT


def project_version() -> str:
    """The version pyproject.toml declares (the installed metadata is as old as the last install)."""
    return str(tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"])


def test_the_version_s_minor_number_is_the_store_schema_version():
    version = Version(project_version())
    assert version.minor == SCHEMA_VERSION, f"pyproject.toml's version {version} is not 0.{SCHEMA_VERSION}.x"


def test_the_changelog_has_an_entry_for_the_version():
    assert f"## [{project_version()}]" in (ROOT / "CHANGELOG.md").read_text()
