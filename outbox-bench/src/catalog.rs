//! The catalogue: every scenario key in run order, and the rows of the scenarios that need a
//! backend (reported as skipped when it is unreachable).

use crate::report::Target;

/// The scenario keys, in run order, with the targets their rows carry.
pub const SCENARIOS: &[(&str, &str)] = &[
    (
        "pg-enqueue",
        "postgres enqueue, 1 message per transaction, 1 and 8 writers",
    ),
    ("pg-bulk", "postgres bulk enqueue in batches of 1,000"),
    ("pg-dispatch", "postgres dispatch burn-down, no-op handler"),
    (
        "pg-retries",
        "postgres dispatch burn-down, 30 % of deliveries fail twice",
    ),
    (
        "pg-purge",
        "postgres burn-down while 1M finished deliveries are purged",
    ),
    (
        "pg-latency",
        "postgres enqueue → handler start with NOTIFY, p50 and p99",
    ),
    (
        "pg-rss",
        "postgres dispatcher peak RSS, small vs large backlog (child process)",
    ),
    (
        "pgmq-drain",
        "postgres drain vs pgmq read + archive / delete, and the physical cost per delivery",
    ),
    (
        "pgmq-enqueue",
        "postgres enqueue vs pgmq.send, 8 writers, own and caller's transaction",
    ),
    (
        "pgmq-bulk",
        "postgres enqueue_batch vs pgmq.send_batch, 1,000 per call",
    ),
    (
        "sqlite-enqueue",
        "sqlite enqueue, 1 message per transaction",
    ),
    (
        "sqlite-dispatch",
        "sqlite dispatch burn-down, no-op handler",
    ),
    (
        "sqlite-counts",
        "sqlite WAL frames per enqueue and delivery, writer instructions per delivery, vs raw",
    ),
    ("redis-enqueue", "redis enqueue, 8 writers"),
    ("redis-dispatch", "redis dispatch burn-down, no-op handler"),
    (
        "redis-cluster",
        "redis dispatch burn-down: 3-node cluster, 3 shards vs one server",
    ),
    (
        "redis-counts",
        "redis server usec per enqueue and per delivery vs raw (private redis-server)",
    ),
    (
        "memory-dispatch",
        "in-memory dispatch burn-down (library overhead)",
    ),
    (
        "webhook",
        "webhook delivery to a local keep-alive receiver, c = 1, 16, 64",
    ),
    (
        "relay-defaults",
        "webhook backlog to one endpoint with the relay's defaults: claims per delivery",
    ),
    (
        "instructions",
        "instructions per webhook delivery and per no-op delivery vs raw reqwest (callgrind)",
    ),
    (
        "mail-http",
        "e-mail through HttpMailer to a local mail-API stand-in, c = 16",
    ),
    (
        "broker-nats",
        "outbox → NATS JetStream vs raw async-nats publishes with acks, c = 64",
    ),
    (
        "isolation-hang",
        "two endpoints, one hanging: the healthy one's drain time vs both healthy",
    ),
    (
        "isolation-tenants",
        "tenant B's start latency with tenant A's 100k backlog vs none",
    ),
];

/// The rows of the scenarios that need a backend: (scenario key, row key, what, target),
/// reported as skipped when the backend is unreachable.
pub const BACKEND_ROWS: &[(&str, &str, &str, Target)] = &[
    (
        "pg-enqueue",
        "pg-enqueue-1",
        "postgres enqueue, 1 writer",
        Target::None,
    ),
    (
        "pg-enqueue",
        "pg-enqueue-8",
        "postgres enqueue_in, 8 writers",
        Target::MinRatio(0.75),
    ),
    (
        "pg-enqueue",
        "pg-enqueue-8-notify-after",
        "postgres enqueue_in, 8 writers, notify after commit",
        Target::MinRatio(0.85),
    ),
    (
        "pg-enqueue",
        "pg-enqueue-8-own",
        "postgres store.enqueue, 8 writers",
        Target::MinRatio(0.85),
    ),
    (
        "pg-bulk",
        "pg-bulk",
        "postgres bulk enqueue",
        Target::MinRatio(0.8),
    ),
    (
        "pg-dispatch",
        "pg-dispatch",
        "postgres dispatch burn-down",
        Target::MinRatio(0.8),
    ),
    (
        "pg-retries",
        "pg-retries",
        "postgres dispatch with retries",
        Target::MinRatio(0.8),
    ),
    (
        "pg-purge",
        "pg-purge",
        "postgres burn-down during a purge",
        Target::None,
    ),
    (
        "pg-latency",
        "pg-latency-p50",
        "postgres enqueue → handler, p50",
        Target::MaxMillis(2.0),
    ),
    (
        "pg-latency",
        "pg-latency-p99",
        "postgres enqueue → handler, p99",
        Target::MaxMillis(10.0),
    ),
    (
        "pg-rss",
        "pg-rss",
        "postgres dispatcher peak RSS",
        Target::Flat(0.1),
    ),
    (
        "pgmq-drain",
        "pgmq-drain",
        "postgres drain vs pgmq read + archive",
        Target::MinRatio(1.0),
    ),
    (
        "pgmq-drain",
        "pgmq-drain-delete",
        "postgres drain vs pgmq read + delete",
        Target::MinRatio(0.9),
    ),
    (
        "pgmq-drain",
        "pg-wal-per-delivery",
        "postgres WAL bytes per delivery vs pgmq",
        Target::MinRatio(1.0),
    ),
    (
        "pgmq-drain",
        "pg-index-writes-per-delivery",
        "postgres index tuples written per delivery vs pgmq",
        Target::MinRatio(1.0),
    ),
    (
        "pgmq-drain",
        "pg-hot-ratio",
        "postgres HOT share of the hot table's updates",
        Target::MinRatio(0.9),
    ),
    (
        "pgmq-enqueue",
        "pgmq-enqueue",
        "postgres store.enqueue vs pgmq.send",
        Target::MinRatio(1.0),
    ),
    (
        "pgmq-enqueue",
        "pgmq-enqueue-in",
        "postgres enqueue_in vs pgmq.send in a transaction",
        Target::MinRatio(0.9),
    ),
    (
        "pgmq-bulk",
        "pgmq-bulk",
        "postgres enqueue_batch vs pgmq.send_batch",
        Target::MinRatio(1.0),
    ),
    (
        "redis-enqueue",
        "redis-enqueue",
        "redis enqueue",
        Target::None,
    ),
    (
        "redis-dispatch",
        "redis-dispatch",
        "redis dispatch burn-down",
        Target::MinRatio(0.5),
    ),
    (
        "redis-cluster",
        "redis-cluster",
        "redis dispatch burn-down: 3-node cluster, 3 shards vs one server",
        Target::None,
    ),
    (
        "redis-counts",
        "redis-usec-per-enqueue",
        "redis server usec per enqueue vs raw",
        Target::None,
    ),
    (
        "redis-counts",
        "redis-usec-per-delivery",
        "redis server usec per delivered message vs raw",
        Target::MinRatio(1.0 / 1.5),
    ),
    (
        "broker-nats",
        "broker-nats-c64",
        "outbox → NATS JetStream, concurrency 64",
        Target::MinRatio(0.7),
    ),
];
