-- outbox schema, version 2: paused endpoints hold their queue (issue 14, item 1).
-- Version 1 parked a paused endpoint's deliveries as `pending`, re-claiming them every 60 s.
-- From version 2 they wait `held` for the endpoint, due never (Timestamp::MAX), until it is
-- resumed. No column changes: the wait is the due time. Deliveries of disabled endpoints
-- are left as they are; their next claim meets the disabled endpoint and they wait for
-- DISABLED_HOLD from then on (a migration has no injected clock to start the hold from).
UPDATE {schema}.deliveries d
   SET status = 'held', next_attempt_at = 253402300799999
  FROM {schema}.endpoints e
 WHERE d.kind = 'webhook' AND d.status IN ('pending', 'held')
   AND e.id::text = d.target AND e.tenant = d.tenant AND e.status = 'paused';
