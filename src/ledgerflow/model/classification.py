"""Effect classification: what can be done about an effect once it has been applied."""

from __future__ import annotations

import enum


class Classification(enum.Enum):
    """How an applied effect can be undone, declared by every effect (there is no default).

    - ``REVERSIBLE``: can be undone exactly (a hold, a reservation).
    - ``COMPENSATABLE``: a semantic counter-effect exists (a refund for a charge).
    - ``FORWARD_RECOVERY_ONLY``: cannot be undone (an email, a shipment). Once confirmed it is a
      pivot: the workflow may only go forward from there.
    - ``MANUAL_INTERVENTION``: any doubt about it goes to an operator.
    """

    REVERSIBLE = "reversible"
    COMPENSATABLE = "compensatable"
    FORWARD_RECOVERY_ONLY = "forward-recovery-only"
    MANUAL_INTERVENTION = "manual-intervention"

    @property
    def is_pivot(self) -> bool:
        """Whether a confirmed effect of this class is a pivot: forward-recovery-only, after which
        the workflow only goes forward."""
        return self is Classification.FORWARD_RECOVERY_ONLY
