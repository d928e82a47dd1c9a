-- outbox schema, version 16 (issue 34): a delivery's only attempt lives in its row.
--
-- A delivery that finishes (succeeded or dead) at its first attempt keeps that attempt in
-- its own row instead of a row of `outbox_attempts`: the completion then writes one b-tree
-- row fewer (measured: 7.4k of the writer's 81.5k instructions per delivered message). The
-- attempt's outcome, status code, excerpt and finish time are the row's `last_*` columns
-- (core's `LastOutcome` is the attempt's record), its number `attempt_count` (1), its run
-- `run` and its scheduled time `due_at`; the three values the row lacked are added here.
-- `folded_started_at` is set exactly when the row holds its attempt.
--
-- A finished row changes again only by a replay (a dead row), which first writes the folded
-- attempt to `outbox_attempts` (`deliveries::replay`), or by the purge, which deletes it
-- with its row. In place: `ADD COLUMN` rewrites no row; every existing attempt stays where
-- it is.

ALTER TABLE outbox_deliveries ADD COLUMN folded_started_at INTEGER;
ALTER TABLE outbox_deliveries ADD COLUMN folded_probe INTEGER;
ALTER TABLE outbox_deliveries ADD COLUMN folded_detail TEXT;
