-- outbox schema, version 13: the attempt in full (issue 38). What a webhook or HTTP mail
-- attempt sent and got back, as `AttemptDetail::to_json()` (the body as base64). NULL for
-- handler and broker attempts and for every attempt written before this version.
ALTER TABLE outbox_attempts ADD COLUMN detail TEXT;
