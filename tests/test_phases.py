"""register_phase: what a phase definition accepts."""

from __future__ import annotations

import pytest

import asynctrace as at
from asynctrace import ConfigurationError


@pytest.mark.parametrize("bad", ["no", "false", 0, 1, None, [], 2])
def test_allow_multiple_must_be_a_bool(bad: object) -> None:
    """allow_multiple is True or False: 'no' is refused, not read as true."""
    name = f"phase_bad_flag_{abs(hash(repr(bad))) % 10_000}"
    expected = r"register_phase\(allow_multiple\): .* is not accepted; accepted: True or False"
    with pytest.raises(ConfigurationError, match=expected):
        at.register_phase(name, allow_multiple=bad)  # type: ignore[arg-type]
    assert name not in at.registered_phases()


def test_a_bool_is_stored_as_given() -> None:
    """True and False are kept; registering the same definition again is a no-op."""
    at.register_phase("phase_flag_once", allow_multiple=False)
    at.register_phase("phase_flag_once", allow_multiple=False)
    at.register_phase("phase_flag_many", allow_multiple=True)
    phases = at.registered_phases()
    assert phases["phase_flag_once"] is False
    assert phases["phase_flag_many"] is True
    with pytest.raises(ConfigurationError, match=r"accepted: allow_multiple=False"):
        at.register_phase("phase_flag_once", allow_multiple=True)


@pytest.mark.parametrize("reserved", ["finalized", "total", "submit"])
def test_reserved_names_say_what_is_accepted(reserved: str) -> None:
    """A reserved name is refused with what would be accepted."""
    with pytest.raises(ConfigurationError, match=r"is reserved.*accepted: any other"):
        at.register_phase(reserved)
