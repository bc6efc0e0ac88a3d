-- Ledgerflow schema 0002: compensations are effects that undo another effect.
--
-- A compensation row lives in lf_effects at the negative of the original step's position, with
-- its own key (compensate: + the original key) and the original effect's id here.

ALTER TABLE lf_effects ADD COLUMN compensates TEXT REFERENCES lf_effects (effect_id);

CREATE INDEX lf_effects_compensates ON lf_effects (compensates);
