-- outbox schema, version 9: the claim writes no index entry (issue 33). From this version a
-- claim leaves `due_at` where it was (negated only for a row's last attempt, as before), so
-- the claim's update touches no indexed column and is a HOT update on the row's own page
-- (fillfactor 50). A claimed row is due again at its lease end, as before: its next attempt
-- is the later of `abs(due_at)` and `lease_until` (rows claimed before this version have
-- `due_at` = the lease end, so the same value), and the claim orders a stranded row there.
-- Nothing in the tables changes; the view `delivery_rows` reads the next attempt so. A binary
-- older than this version refuses the schema, so no older claim runs beside a newer one.

CREATE OR REPLACE VIEW {schema}.delivery_rows AS
SELECT x.seq, x.id, x.message_id, g.tenant, m.topic, m.ordering_key, g.kind, g.target,
       (CASE x.state WHEN 0 THEN 'pending' WHEN 1 THEN 'held' WHEN 2 THEN 'processing'
                     ELSE 'sending' END)::text AS status,
       x.attempts, x.snoozes, CASE WHEN x.state >= 2 THEN greatest(abs(x.due_at), x.lease_until)
            ELSE abs(x.due_at) END AS next_attempt_at,
       nullif(x.lease_until, 0) AS lease_until,
       nullif(x.token, '00000000-0000-0000-0000-000000000000'::uuid) AS claim_token,
       la.outcome AS last_outcome, la.status_code AS last_status_code,
       la.excerpt AS last_excerpt, la.finished_at AS last_at, NULL::text AS dead_reason,
       x.ledger_len, m.created_at, x.updated_at, NULL::bigint AS completed_at, x.run,
       nullif(x.claimed_due, 0) AS due_at
  FROM {schema}.queue x
  JOIN {schema}.groups g ON g.id = x.group_id
  JOIN {schema}.messages m ON m.id = x.message_id
  LEFT JOIN LATERAL (
       SELECT a.outcome, a.status_code, a.excerpt, a.finished_at FROM {schema}.attempts a
        WHERE x.ledger_len > 0 AND a.delivery_id = x.id
        ORDER BY a.number DESC LIMIT 1) la ON true
UNION ALL
SELECT h.seq, h.id, h.message_id, h.tenant, m.topic, m.ordering_key, g.kind, g.target,
       (CASE h.status WHEN 4 THEN 'succeeded' ELSE 'dead' END)::text,
       h.attempts, h.snoozes, coalesce(h.next_attempt_at, h.completed_at), NULL::bigint,
       NULL::uuid, coalesce(h.last_outcome, la.outcome),
       CASE WHEN h.last_outcome IS NULL THEN la.status_code ELSE h.last_status_code END,
       CASE WHEN h.last_outcome IS NULL THEN la.excerpt ELSE h.last_excerpt END,
       CASE WHEN h.last_outcome IS NULL THEN la.finished_at ELSE h.last_at END,
       h.dead_reason, h.ledger_len, h.created_at, coalesce(h.updated_at, h.completed_at),
       h.completed_at, h.run, h.a_scheduled
  FROM {schema}.history h
  JOIN {schema}.groups g ON g.id = h.group_id
  JOIN {schema}.messages m ON m.id = h.message_id
  LEFT JOIN LATERAL (
       SELECT a.outcome, a.status_code, a.excerpt, a.finished_at FROM {schema}.attempts a
        WHERE h.last_outcome IS NULL AND h.ledger_len > 0 AND a.delivery_id = h.id
        ORDER BY a.number DESC LIMIT 1) la ON true;
