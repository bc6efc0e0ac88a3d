-- Ledgerflow schema 0013: arrivals that no park can overwrite.
--
-- A signal, a callback or a cancel request may arrive while a worker holds the instance and
-- has already read the inbox and the request it decides from: its next park (WAITING until a
-- timer, or a retry back-off) would then put the instance to sleep past what arrived. Every
-- arrival sets this flag, every claim clears it, and a park by an owner whose claim was
-- followed by an arrival makes the instance due at once instead of at its timer.

ALTER TABLE lf_instances ADD COLUMN arrived_since_claim INTEGER NOT NULL DEFAULT 0;
