-- Ledgerflow schema 0013: reserved for another change of issue 22, merged on its own branch.
-- It holds nothing here so that 0014 follows an unbroken numbering; when the real 0013 lands,
-- this file is dropped in its favour (only journals made on this branch alone recorded it).
SELECT 1;
