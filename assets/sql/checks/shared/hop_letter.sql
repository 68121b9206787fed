-- A hop kind as one letter (hop alias h), so a chain becomes a string a regular expression can judge.
CASE h.hop_kind WHEN 'PUBLISH' THEN 'P' WHEN 'SCHEDULE' THEN 'S' WHEN 'TIMER' THEN 'T' WHEN 'DELIVER' THEN 'D' WHEN 'RETRY' THEN 'R' WHEN 'DLQ' THEN 'Q' WHEN 'HALF' THEN 'H' WHEN 'DISCARD' THEN 'X' ELSE '?' END
