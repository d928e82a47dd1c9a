-- The SQL enqueue function (issue 37): `enqueue_in` for any language's driver, inside the
-- caller's transaction. Installed (and replaced when it changed) by every `migrate()` and
-- appended to `migration_script`, from `enqueue_function.rs`. The statement that writes the
-- message and its fan-out is not written here: it is the store's own `one` statement of
-- `sql/enqueue.sql`, with each `:name` turned into the variable `in_name`, so the function
-- fans out exactly as `enqueue_in` does. What is here is the part `enqueue_in` does in Rust:
-- core's `NewMessage::validate` (same order, same fields, same messages), the ids
-- (`MessageId::generate`, `DeliveryId::generate`: UUIDv7 from the clock and random bytes),
-- the headers as JSON text (serde's form: compact, keys in byte order), and the look-up of a
-- duplicate that raced with the insert. The limits and the channel are the store's
-- (`PostgresConfig`) of the last `migrate()`. The wake-up is a NOTIFY inside the caller's
-- transaction: sent at its commit, never after a rollback.

-- What the function returns; created once, never changed (the function depends on it).
DO $outbox_type$
BEGIN
    IF to_regtype('{schema}.enqueue_result') IS NULL THEN
        CREATE TYPE {schema}.enqueue_result AS (message_id uuid, deliveries integer, duplicate boolean);
    END IF;
END
$outbox_type$;

-- A UUIDv7 for the millisecond `ms` (as core's `MessageId::generate`).
CREATE OR REPLACE FUNCTION {schema}.enqueue_uuid7(ms int8) RETURNS uuid
LANGUAGE plpgsql VOLATILE
AS $outbox_uuid7$
DECLARE
    b bytea := uuid_send(gen_random_uuid());
BEGIN
    b := overlay(b PLACING substring(int8send(ms) FROM 3 FOR 6) FROM 1 FOR 6);
    b := set_byte(b, 6, (get_byte(b, 6) & 15) | 112);
    b := set_byte(b, 8, (get_byte(b, 8) & 63) | 128);
    RETURN encode(b, 'hex')::uuid;
END
$outbox_uuid7$;

-- Core's check of an ordering or idempotency key (`check_key`); NULL is no key.
CREATE OR REPLACE FUNCTION {schema}.enqueue_check_key(field text, k text) RETURNS void
LANGUAGE plpgsql VOLATILE
AS $outbox_key$
BEGIN
    IF k IS NULL THEN
        RETURN;
    END IF;
    IF k = '' THEN
        RAISE EXCEPTION 'invalid input: %: must not be empty', field USING ERRCODE = '22023';
    END IF;
    IF octet_length(k) > 200 THEN
        RAISE EXCEPTION 'invalid input: %: must be at most 200 characters', field USING ERRCODE = '22023';
    END IF;
    IF k !~ '^[!-~]+$' THEN
        RAISE EXCEPTION 'invalid input: %: may hold only visible ASCII characters (no spaces)', field USING ERRCODE = '22023';
    END IF;
END
$outbox_key$;

-- The event-type catalogue's check (migration 10): in refuse-unknown and validate a topic
-- that is not registered is refused. A JSON Schema cannot be checked in PL/pgSQL without an
-- extension, so in validate a topic that has a schema is refused here too (enqueue it through
-- `enqueue_in`, `outbox enqueue` or the HTTP API, which check it); one without a schema is
-- accepted. SECURITY DEFINER (owned by the role that migrates), so a role granted only what
-- DEPLOYMENT.md lists needs no grant on the catalogue's tables; it reads them and nothing else.
CREATE OR REPLACE FUNCTION {schema}.enqueue_check_catalogue(in_topic text) RETURNS void
LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $outbox_catalogue$
DECLARE
    v_mode text;
    v_schema text;
BEGIN
    SELECT c.mode INTO v_mode FROM {schema}.catalogue c;
    IF v_mode IS NULL OR v_mode = 'off' THEN
        RETURN;
    END IF;
    SELECT t.json_schema INTO v_schema FROM {schema}.event_types t WHERE t.topic = in_topic;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'invalid input: topic: `%` is not in the event-type catalogue (mode %)', in_topic, v_mode
            USING ERRCODE = '22023';
    END IF;
    IF v_mode = 'validate' AND v_schema IS NOT NULL THEN
        RAISE EXCEPTION 'invalid input: payload: `%` has a JSON Schema, which the SQL enqueue function cannot check (mode validate): enqueue it through enqueue_in or the HTTP API', in_topic
            USING ERRCODE = '22023';
    END IF;
END
$outbox_catalogue$;

CREATE OR REPLACE FUNCTION {schema}.enqueue(
    tenant text,
    topic text,
    payload json,
    ordering_key text DEFAULT NULL,
    idempotency_key text DEFAULT NULL,
    available_at timestamptz DEFAULT NULL,
    headers jsonb DEFAULT NULL,
    recipients text[] DEFAULT NULL)
RETURNS {schema}.enqueue_result
LANGUAGE plpgsql VOLATILE
AS $outbox_enqueue$
#variable_conflict use_column
DECLARE
    in_now int8 := floor(extract(epoch FROM clock_timestamp()) * 1000)::int8;
    in_id uuid;
    in_tenant text := coalesce(enqueue.tenant, 'default');
    in_topic text := enqueue.topic;
    in_payload bytea;
    in_ordering_key text := enqueue.ordering_key;
    in_idempotency_key text := enqueue.idempotency_key;
    in_available_at int8;
    in_headers text;
    in_cause text := NULL;
    in_did_hi bytea;
    in_did_lo int8;
    in_recipients text[] := '{}';
    in_channel text := {channel};
    v_base bytea;
    v_part text;
    v_hk text;
    v_hv jsonb;
    v_r text;
    v_w record;
    v_existing uuid;
    v_out {schema}.enqueue_result;
BEGIN
    -- Core's messages, as "invalid input: <field>: <why>" with SQLSTATE 22023.
    IF in_topic IS NULL OR in_topic = '' THEN
        RAISE EXCEPTION 'invalid input: topic: must not be empty' USING ERRCODE = '22023';
    END IF;
    IF octet_length(in_topic) > 128 THEN
        RAISE EXCEPTION 'invalid input: topic: must be at most 128 characters' USING ERRCODE = '22023';
    END IF;
    FOREACH v_part IN ARRAY string_to_array(in_topic, '.') LOOP
        IF v_part = '' THEN
            RAISE EXCEPTION 'invalid input: topic: must be dot-separated names without empty parts' USING ERRCODE = '22023';
        END IF;
        IF v_part !~ '^[a-z0-9]' THEN
            RAISE EXCEPTION 'invalid input: topic: each part must start with a lowercase letter or digit' USING ERRCODE = '22023';
        END IF;
        IF v_part !~ '^[a-z0-9_-]*$' THEN
            RAISE EXCEPTION 'invalid input: topic: may hold only lowercase letters, digits, ''_'', ''-'' and ''.''' USING ERRCODE = '22023';
        END IF;
    END LOOP;
    IF enqueue.payload IS NULL THEN
        RAISE EXCEPTION 'invalid input: payload: must not be NULL' USING ERRCODE = '22023';
    END IF;
    in_payload := convert_to(enqueue.payload::text, 'UTF8');
    IF octet_length(in_payload) > {max_payload_bytes} THEN
        RAISE EXCEPTION 'invalid input: payload: is larger than the limit of {max_payload_bytes} bytes' USING ERRCODE = '22023';
    END IF;
    IF in_tenant = '' THEN
        RAISE EXCEPTION 'invalid input: tenant: must not be empty' USING ERRCODE = '22023';
    END IF;
    IF octet_length(in_tenant) > 64 THEN
        RAISE EXCEPTION 'invalid input: tenant: must be at most 64 characters' USING ERRCODE = '22023';
    END IF;
    IF in_tenant !~ '^[A-Za-z0-9_.:@-]+$' THEN
        RAISE EXCEPTION 'invalid input: tenant: may hold only ASCII letters, digits and ''_'', ''-'', ''.'', '':'', ''@''' USING ERRCODE = '22023';
    END IF;
    PERFORM {schema}.enqueue_check_key('ordering_key', in_ordering_key);
    PERFORM {schema}.enqueue_check_key('idempotency_key', in_idempotency_key);
    IF enqueue.available_at IS NULL THEN
        in_available_at := in_now;
    ELSE
        in_available_at := floor(extract(epoch FROM enqueue.available_at) * 1000)::int8;
        IF in_available_at > in_now + {max_delay_ms} THEN
            RAISE EXCEPTION 'invalid input: available_at: is further ahead than the maximum delay' USING ERRCODE = '22023';
        END IF;
        in_available_at := greatest(in_available_at, in_now);
    END IF;
    IF enqueue.headers IS NOT NULL AND jsonb_typeof(enqueue.headers) <> 'object' THEN
        RAISE EXCEPTION 'invalid input: headers: must be a JSON object of strings' USING ERRCODE = '22023';
    END IF;
    IF (SELECT count(*) FROM jsonb_object_keys(coalesce(enqueue.headers, '{}'))) > {max_headers} THEN
        RAISE EXCEPTION 'invalid input: headers: too many headers' USING ERRCODE = '22023';
    END IF;
    FOR v_hk, v_hv IN SELECT e.key, e.value FROM jsonb_each(coalesce(enqueue.headers, '{}')) e
                   ORDER BY e.key COLLATE "C" LOOP
        IF v_hk !~ '^[A-Za-z0-9_.-]{1,128}$' THEN
            RAISE EXCEPTION 'invalid input: headers: a header name must be 1-128 ASCII letters, digits, ''-'', ''_'' or ''.''' USING ERRCODE = '22023';
        END IF;
        IF jsonb_typeof(v_hv) <> 'string' THEN
            RAISE EXCEPTION 'invalid input: headers: a header value must be a string' USING ERRCODE = '22023';
        END IF;
        IF octet_length(v_hv #>> '{}') > 8192 OR (v_hv #>> '{}') ~ ('[' || chr(1) || '-' || chr(8) || chr(10) || '-' || chr(31) || chr(127) || '-' || chr(159) || ']') THEN
            RAISE EXCEPTION 'invalid input: headers: a header value is over 8 KiB or holds control characters' USING ERRCODE = '22023';
        END IF;
    END LOOP;
    SELECT '{' || string_agg(to_json(e.key)::text || ':' || to_json(e.value #>> '{}')::text, ','
                             ORDER BY e.key COLLATE "C") || '}'
      INTO in_headers FROM jsonb_each(coalesce(enqueue.headers, '{}')) e;
    IF coalesce(cardinality(enqueue.recipients), 0) > {max_recipients} THEN
        RAISE EXCEPTION 'invalid input: recipient: too many e-mail recipients' USING ERRCODE = '22023';
    END IF;
    FOREACH v_r IN ARRAY coalesce(enqueue.recipients, '{}') LOOP
        IF v_r IS NULL OR v_r ~ '^[[:space:]]*$' THEN
            RAISE EXCEPTION 'invalid input: recipient: must not be empty' USING ERRCODE = '22023';
        END IF;
        IF octet_length(v_r) > 320 THEN
            RAISE EXCEPTION 'invalid input: recipient: must be at most 320 characters' USING ERRCODE = '22023';
        END IF;
        IF v_r ~ ('[' || chr(1) || '-' || chr(31) || chr(127) || '-' || chr(159) || ']') THEN
            RAISE EXCEPTION 'invalid input: recipient: must not contain control characters' USING ERRCODE = '22023';
        END IF;
        IF NOT v_r = ANY(in_recipients) THEN
            in_recipients := in_recipients || v_r;
        END IF;
    END LOOP;

    -- The event-type catalogue (migration 10), as `enqueue_in` enforces it after core's
    -- validation (`enqueue_check_catalogue`).
    PERFORM {schema}.enqueue_check_catalogue(in_topic);

    -- UUIDv7: 48 bits of milliseconds, version 7, the variant, random bits.
    in_id := {schema}.enqueue_uuid7(in_now);
    v_base := uuid_send({schema}.enqueue_uuid7(in_now));
    in_did_hi := substring(v_base FROM 1 FOR 8);
    in_did_lo := ('x' || encode(substring(v_base FROM 9 FOR 8), 'hex'))::bit(64)::int8;

    {write} INTO v_w;

    IF v_w.inserted IS NOT NULL THEN
        v_out := (in_id, v_w.deliveries::integer, false);
        RETURN v_out;
    END IF;
    IF in_idempotency_key IS NULL THEN
        RAISE EXCEPTION 'unexpected: a new message id collided with a stored one';
    END IF;
    IF v_w.existing IS NULL THEN
        -- The row that made ON CONFLICT skip committed after the statement began: this
        -- statement's snapshot sees it (READ COMMITTED).
        SELECT x.id INTO v_existing FROM {schema}.messages x
         WHERE x.tenant = in_tenant AND x.topic = in_topic AND x.idempotency_key = in_idempotency_key;
        IF v_existing IS NULL THEN
            RAISE EXCEPTION 'conflict: the idempotency key is held by a message that was removed meanwhile; try again'
                USING ERRCODE = '40001';
        END IF;
    ELSE
        v_existing := v_w.existing;
    END IF;
    v_out := (v_existing, 0, true);
    RETURN v_out;
END
$outbox_enqueue$;

COMMENT ON FUNCTION {schema}.enqueue(text, text, json, text, text, timestamptz, jsonb, text[]) IS
'outbox: write a message and its deliveries in the caller''s transaction, as enqueue_in does; returns (message_id, deliveries, duplicate). Installed by outbox migrate.';
