"""The updates part of :class:`~ledgerflow.model.definition.Registry`: the validators a
workflow declares for the updates it handles (internal; used as ``registry.update_validator``).

A validator runs in the caller's process, before anything is written: raising refuses the
update (:class:`~ledgerflow.errors.UpdateRejectedError`) and leaves no trace in the instance's
journal or inbox, so a refused request costs the workflow nothing.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ledgerflow.errors import RegistrationError

Validator = Callable[[Any], object]


class UpdateDeclarations:
    """Validators of updates, by (workflow name, update name)."""

    update_validators: dict[tuple[str, str], Validator]

    def update_validator(self, workflow: str, name: str) -> Callable[[Validator], Validator]:
        """Declare the validator of the update ``name`` of ``workflow``: called with the
        update's payload by ``engine.update`` before the request is stored; an exception it
        raises refuses the update.

        Example::

            @registry.update_validator("counter", "add")
            def positive(amount: int) -> None:
                if amount <= 0:
                    raise ValueError("add takes a positive amount")
        """

        def declare(validator: Validator) -> Validator:
            if (workflow, name) in self.update_validators:
                raise RegistrationError(f"update {name!r} of {workflow!r} has a validator already")
            self.update_validators[(workflow, name)] = validator
            return validator

        return declare

    def validator_of(self, workflow: str, name: str) -> Validator | None:
        """The validator declared for the update ``name`` of ``workflow``, if any."""
        return self.update_validators.get((workflow, name))
