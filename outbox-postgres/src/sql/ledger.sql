-- The ledger's reads (`Ledger`): a tenant's deliveries a page at a time, one delivery, one
-- message. `{all}` is the hot queue and the history together.

-- name: list_deliveries
-- One page, newest first; every filter is NULL when not asked for.
SELECT {delivery_cols} FROM {all} d
 WHERE d.tenant = :tenant::text
   AND (:status::text IS NULL OR d.status = :status::text)
   AND (:endpoint::text IS NULL OR (d.kind = 'webhook' AND d.target = :endpoint::text))
   AND (:consumer::text IS NULL OR (d.kind = 'handler' AND d.target = :consumer::text))
   AND (:kind::text IS NULL OR d.kind = :kind::text)
   AND (:topic::text IS NULL OR d.topic = :topic::text)
   AND (:since::int8 IS NULL OR d.created_at >= :since::int8)
   AND (:until::int8 IS NULL OR d.created_at < :until::int8)
   AND (:cursor_at::int8 IS NULL OR (d.created_at, d.id) < (:cursor_at::int8, :cursor_id::uuid))
   AND (:ordering_key::text IS NULL OR d.ordering_key = :ordering_key::text)
   AND (:text::text IS NULL
     OR strpos(lower(d.last_excerpt COLLATE "C"), :text::text COLLATE "C") > 0
     OR EXISTS (SELECT 1 FROM {attempts} x WHERE x.delivery_id = d.id
        AND strpos(lower(x.excerpt COLLATE "C"), :text::text COLLATE "C") > 0))
 ORDER BY d.created_at DESC, d.id DESC
 LIMIT :limit::int8

-- name: get_delivery
SELECT {delivery_cols} FROM {all} d WHERE d.id = :id::uuid AND d.tenant = :tenant::text

-- name: get_message
SELECT {message_cols} FROM {messages} WHERE id = :id::uuid AND tenant = :tenant::text
