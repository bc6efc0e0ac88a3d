"""The one naming rule for business keys and tenants, through the engine on a real journal.

The property test draws arbitrary Unicode text: a key the rule accepts starts one instance
whatever normal form it is typed in, and a key it refuses is a PayloadError naming the business
key, with nothing stored. The rule is stated here independently of ``ledgerflow.model.names``
(as the issue states it), so the test checks the code against the specification.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Iterator

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ledgerflow import Registry, SyncEngine, WorkflowContext
from ledgerflow.errors import PayloadError
from ledgerflow.limits import BUSINESS_KEY_LENGTH_MAX

registry = Registry()


@registry.workflow(name="noop", version=1)
async def noop(ctx: WorkflowContext, value: int) -> int:
    return value


BIDI = set("\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")


def refused_by_the_rule(key: str) -> bool:
    """The issue's rule: no control, bidi, line-separator or surrogate character, no leading or
    trailing whitespace, not empty, bounded length (counted in NFC)."""
    if any(c in BIDI or unicodedata.category(c) in {"Cc", "Cs", "Zl", "Zp"} for c in key):
        return True
    normal = unicodedata.normalize("NFC", key)
    return not normal or normal != normal.strip() or len(normal) > BUSINESS_KEY_LENGTH_MAX


# Text from every plane, with the characters the rule is about made frequent.
KEYS = st.text(
    alphabet=st.one_of(
        st.characters(),
        st.sampled_from(
            ["\u0301", "\ud800", "\u00e9", "\u202e", "\n", "\x1b", " ", "\u00a0", "\u2028"]
        ),
    ),
    max_size=40,
) | st.text(min_size=BUSINESS_KEY_LENGTH_MAX - 2, max_size=BUSINESS_KEY_LENGTH_MAX + 2)


@pytest.fixture(scope="module")
def engine(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SyncEngine]:
    # One journal for every drawn key: hypothesis calls the test many times per fixture.
    folder = tmp_path_factory.mktemp("names")
    with SyncEngine(f"sqlite:///{folder / 'names.db'}", registry) as opened:
        yield opened


@settings(
    max_examples=300,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(key=KEYS)
def test_every_spelling_of_a_key_is_one_instance_and_bad_keys_are_refused(
    engine: SyncEngine, key: str
) -> None:
    """Goal: a key's NFC and NFD spellings start one instance; a key the rule refuses is a
    clear PayloadError (LF110) naming the business key, and stores nothing.

    Method: start the key as drawn, then in NFC and in NFD; compare instance ids and stored
    keys; for a refused key, the error and an unchanged instance count.
    """
    if refused_by_the_rule(key):
        before = len(engine.list(limit=10_000))
        with pytest.raises(PayloadError, match="business key") as refused:
            engine.start("noop", key=key, input=1)
        assert refused.value.code == "LF110"
        assert len(engine.list(limit=10_000)) == before
        return
    spellings = {key, unicodedata.normalize("NFC", key), unicodedata.normalize("NFD", key)}
    started = [engine.start("noop", key=spelling, input=1) for spelling in spellings]
    assert len({s.instance_id for s in started}) == 1
    assert {s.instance.business_key for s in started} == {unicodedata.normalize("NFC", key)}


@pytest.mark.parametrize(
    ("tenant", "words"),
    [("", "must not be empty"), (" acme", "whitespace"), ("ac\u202eme", r"U\+202E")],
)
def test_a_bad_tenant_is_refused_not_replaced_by_the_default(
    engine: SyncEngine, tenant: str, words: str
) -> None:
    """Goal: an empty or malformed tenant is refused (the bug: '' silently became 'default').

    Method: start with each bad tenant: PayloadError with the rule's words; no tenant given
    is still the default tenant.
    """
    with pytest.raises(PayloadError, match=words):
        engine.start("noop", key="tenant-check", input=1, tenant=tenant)
    assert engine.start("noop", key="tenant-check", input=1).instance.tenant == "default"
