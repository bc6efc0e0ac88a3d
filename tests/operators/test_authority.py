"""Authority: the authority file's grants allow repair kinds, actors hold grants; the built-in
policy grants people nothing; a policy file that names an unknown kind or grant is refused when
it is read. A token's role is another thing, with its own word in every message (issue 24:
both were "roles", and a file's "operator" was not the token ladder's)."""

from __future__ import annotations

from pathlib import Path

import pytest

from ledgerflow.errors import ConfigurationError, NotAuthorizedError
from ledgerflow.model.authority import ApiRole, Principal
from ledgerflow.model.repair import RepairKind
from ledgerflow.operators.authority import RECONCILER, Authority


def test_builtin_policy_grants_only_the_reconciler(monkeypatch: pytest.MonkeyPatch) -> None:
    """Goal: with no policy file, only the reconciler may repair, and only what it needs.

    Method: from_environment without LEDGERFLOW_AUTHORITY; the reconciler may resolve and
    resume but not force; a person may do nothing and is told how to get a grant.
    """
    monkeypatch.delenv("LEDGERFLOW_AUTHORITY", raising=False)
    authority = Authority.from_environment()
    assert authority.grant_for(RECONCILER, RepairKind.RESOLVE_EFFECT) == "reconciler"
    assert authority.grant_for(RECONCILER, RepairKind.RESUME) == "reconciler"
    with pytest.raises(NotAuthorizedError):
        authority.grant_for(RECONCILER, RepairKind.FORCE_TERMINAL)
    with pytest.raises(NotAuthorizedError) as refused:
        authority.grant_for("local:alice", RepairKind.RESUME)
    message = refused.value.message
    assert message.startswith("local:alice holds no grant that allows resume")
    assert "no authority file is set" in message
    assert "set LEDGERFLOW_AUTHORITY (or --authority) to a file whose [grants]" in message
    assert "role" not in message


GRANTS_FILE = (
    '[grants]\nrepairs = ["resume"]\nsupervision = ["force-terminal"]\n'
    '[actors]\nalice = ["repairs"]\nbob = ["repairs", "supervision"]\n'
)


@pytest.mark.parametrize("section", ["grants", "roles"])
def test_policy_file_grants_and_actors(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, section: str
) -> None:
    """Goal: a TOML file grants exactly its grants; the reconciler keeps its built-in one; a
    file written before the rename (``[roles]``) means the same.

    Method: alice holds repairs (resume), bob also supervision (force); each may do only
    theirs; the file is found through LEDGERFLOW_AUTHORITY; once as ``[grants]``, once as
    ``[roles]``.
    """
    path = tmp_path / "authority.toml"
    path.write_text(GRANTS_FILE.replace("[grants]", f"[{section}]"))
    monkeypatch.setenv("LEDGERFLOW_AUTHORITY", str(path))
    authority = Authority.from_environment()
    assert authority.grant_for("alice", RepairKind.RESUME) == "repairs"
    assert authority.grant_for("bob", RepairKind.FORCE_TERMINAL) == "supervision"
    assert authority.grant_for(RECONCILER, RepairKind.RESUME) == "reconciler"
    with pytest.raises(NotAuthorizedError) as refused:
        authority.grant_for("alice", RepairKind.FORCE_TERMINAL)
    assert refused.value.message == (
        f"alice holds no grant that allows force-terminal in the authority file (grants held: "
        f"repairs; authority: {path})"
    )
    assert authority.allowed_by("repairs") == "grant repairs"


def test_a_tokens_role_is_named_as_a_role() -> None:
    """Goal: the policy of an API principal speaks of its token's role, and says which role
    would allow the command. Method: an operator token's principal asks to force."""
    principal = Principal(name="olga", role=ApiRole.OPERATOR, tenant="acme", token_id="tok_1")
    authority = Authority.of(Authority.for_principal(principal))
    assert authority.grant_for("olga", RepairKind.RESUME) == "operator"
    assert authority.allowed_by("operator") == "role operator"
    with pytest.raises(NotAuthorizedError) as refused:
        authority.grant_for("olga", RepairKind.FORCE_TERMINAL)
    assert refused.value.message == (
        "olga's token has the operator role, which does not allow force-terminal; the admin "
        "role allows it"
    )


@pytest.mark.parametrize(
    ("text", "error"),
    [
        ('[grants]\nop = ["reset"]\n', "unknown repair kind"),
        ('[roles]\nop = ["reset"]\n', "roles.op names unknown repair kind"),
        ('[actors]\nalice = ["admin"]\n', r"grant\(s\) \[grants\] does not define: \['admin'\]"),
        ("[grants]\nop = 'resume'\n", "list of strings"),
        ('[grants]\nop = ["resume"]\n[roles]\nop = ["resume"]\n', "old name of \\[grants\\]"),
        ("[people]\n", "unknown section"),
        ("grants = [", "not TOML"),
    ],
)
def test_bad_policy_files_are_refused(tmp_path: Path, text: str, error: str) -> None:
    """Goal: a mistake in the policy is an error when it is read, never a silent grant; a
    file with both ``[grants]`` and its old name ``[roles]`` is ambiguous and refused.

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
        Authority.default().grant_for(actor, RepairKind.RESUME)
