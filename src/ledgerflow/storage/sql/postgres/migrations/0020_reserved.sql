-- Ledgerflow schema 0020: reserved for another capability of issue 27, which lands its own
-- 0020 (this placeholder keeps the numbers 1..n on the values branch: drop it at the merge).
SELECT 1;
