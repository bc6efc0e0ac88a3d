"""Authority: roles grant repair kinds, actors hold roles; the built-in policy grants people
nothing; a policy file that names an unknown kind or role is refused when it is read."""

from __future__ import annotations

from pathlib import Path

import pytest

from ledgerflow.errors import ConfigurationError, NotAuthorizedError
from ledgerflow.model.repair import RepairKind
from ledgerflow.operators.authority import RECONCILER, Authority


def test_builtin_policy_grants_only_the_reconciler(monkeypatch: pytest.MonkeyPatch) -> None:
    """Goal: with no policy file, only the reconciler may repair, and only what it needs.

    Method: from_environment without LEDGERFLOW_AUTHORITY; the reconciler may resolve and
    resume but not force; a person may do nothing and is told how to get a role.
    """
    monkeypatch.delenv("LEDGERFLOW_AUTHORITY", raising=False)
    authority = Authority.from_environment()
    assert authority.role_for(RECONCILER, RepairKind.RESOLVE_EFFECT) == "reconciler"
    assert authority.role_for(RECONCILER, RepairKind.RESUME) == "reconciler"
    with pytest.raises(NotAuthorizedError):
        authority.role_for(RECONCILER, RepairKind.FORCE_TERMINAL)
    with pytest.raises(NotAuthorizedError, match="LEDGERFLOW_AUTHORITY"):
        authority.role_for("alice", RepairKind.RESUME)


def test_policy_file_roles_and_actors(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Goal: a TOML file grants exactly its roles; the reconciler keeps its built-in role.

    Method: alice is an operator (resume), bob a supervisor (force); each may do only theirs;
    the file is found through LEDGERFLOW_AUTHORITY.
    """
    path = tmp_path / "authority.toml"
    path.write_text(
        '[roles]\noperator = ["resume"]\nsupervisor = ["force-terminal"]\n'
        '[actors]\nalice = ["operator"]\nbob = ["operator", "supervisor"]\n'
    )
    monkeypatch.setenv("LEDGERFLOW_AUTHORITY", str(path))
    authority = Authority.from_environment()
    assert authority.role_for("alice", RepairKind.RESUME) == "operator"
    assert authority.role_for("bob", RepairKind.FORCE_TERMINAL) == "supervisor"
    assert authority.role_for(RECONCILER, RepairKind.RESUME) == "reconciler"
    with pytest.raises(NotAuthorizedError, match="roles held: operator"):
        authority.role_for("alice", RepairKind.FORCE_TERMINAL)


@pytest.mark.parametrize(
    ("text", "error"),
    [
        ('[roles]\nop = ["reset"]\n', "unknown repair kind"),
        ('[actors]\nalice = ["admin"]\n', "undefined role"),
        ("[roles]\nop = 'resume'\n", "list of strings"),
        ("[people]\n", "unknown section"),
        ("roles = [", "not TOML"),
    ],
)
def test_bad_policy_files_are_refused(tmp_path: Path, text: str, error: str) -> None:
    """Goal: a mistake in the policy is an error when it is read, never a silent grant.

    Method: each malformed file raises ConfigurationError naming the problem.
    """
    path = tmp_path / "bad.toml"
    path.write_text(text)
    with pytest.raises(ConfigurationError, match=error):
        Authority.from_file(path)


@pytest.mark.parametrize("actor", ["", "   "])
def test_an_identity_is_required(actor: str) -> None:
    """Goal: a repair without an operator identity is refused.

    Method: a blank actor raises NotAuthorizedError asking for one.
    """
    with pytest.raises(NotAuthorizedError, match="identity is required"):
        Authority.default().role_for(actor, RepairKind.RESUME)
