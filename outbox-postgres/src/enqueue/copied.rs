//! A large keyless batch written with binary `COPY` (`PostgresConfig::copy_batches_from`):
//! the `routes` statement reads the batch's destinations, the store numbers each message's
//! fan-out in the order the batch statement (`many`) numbers it, and the messages and their
//! deliveries are copied in (ARCHITECTURE.md, "A large keyless batch is copied").

use std::collections::{BTreeSet, HashMap};

use outboxkit_core::claim_rules::{barrier_key, FIFO_BARRIER};
use outboxkit_core::{Error, ErrorKind, Result};
use sqlx::postgres::PgConnection;

use super::{route_arrays, Sent, Written};
use crate::copy::CopyRows;
use crate::error::DbResult;
use crate::rows::{self, get, ms};
use crate::sql::Params;
use crate::store::PostgresStore;

impl PostgresStore {
    /// [`PostgresStore::write_batch`] with binary `COPY`, for a batch without idempotency
    /// keys (so nothing can conflict but a colliding new id, which fails the copy): the
    /// `routes` statement finds each (tenant, topic)'s consumers and endpoints and each
    /// recipient's group (making missing groups) and hashes the ordering keys; the messages
    /// and their deliveries are then copied in, each delivery numbered and given what `many`
    /// gives it (the same ids, groups, states, due times, barrier hashes and `seq` order);
    /// then the `NOTIFY` on `channel`, when given and a delivery was written.
    pub(super) async fn write_copied(
        &self,
        conn: &mut PgConnection,
        batch: &Sent<'_>,
    ) -> Result<Vec<Written>> {
        let (now, sent) = (batch.now, batch.indexes);
        let valid = || batch.messages().map(|p| &p.valid);
        let (route_tenants, route_topics) = route_arrays(valid());
        let emails: BTreeSet<(&str, &str)> = valid()
            .flat_map(|v| {
                v.emails
                    .iter()
                    .map(move |r| (v.tenant.as_str(), r.as_str()))
            })
            .collect();
        let mut keys: BTreeSet<&str> = valid()
            .filter_map(|v| v.ordering_key.as_ref().map(|k| k.as_str()))
            .collect();
        keys.insert(FIFO_BARRIER);
        let params = Params::new()
            .set("route_tenants", route_tenants)
            .set("route_topics", route_topics)
            .set(
                "email_tenants",
                emails.iter().map(|r| r.0).collect::<Vec<_>>(),
            )
            .set(
                "email_targets",
                emails.iter().map(|r| r.1).collect::<Vec<_>>(),
            )
            .set("keys", keys.into_iter().collect::<Vec<_>>())
            .set("now", now);
        let rows = (self.inner.sql.enqueue.routes.bind(params)?)
            .fetch_all(&mut *conn)
            .await
            .db()?;
        let found = Found::read(&rows)?;

        let mut messages =
            CopyRows::with_capacity(valid().map(|v| v.payload.len() + 160).sum::<usize>());
        let mut queue = CopyRows::with_capacity(sent.len() * 96);
        let mut written = Vec::with_capacity(sent.len());
        for p in batch.messages() {
            let v = &p.valid;
            let key = v.ordering_key.as_ref().map(|k| k.as_str());
            let available = ms(v.available_at);
            messages
                .row(10)
                .uuid(p.id.as_uuid())
                .text(v.tenant.as_str())
                .text(v.topic.as_str())
                .bytes(&v.payload)
                .opt_text(key)
                .null()
                .int8(available)
                .opt_text(rows::headers_to(&v.headers).as_deref())
                .opt_text(rows::cause_to(v.cause.as_ref()).as_deref())
                .int8(now);
            // Each destination in fan-out order: its group, its hold, its barrier's hash.
            let key_hash = found.hash(key)?;
            let fifo_hash = found.hash(barrier_key(key, true))?;
            let dests = found.routes.get(&(v.tenant.as_str(), v.topic.as_str()));
            let routed = dests
                .into_iter()
                .flatten()
                .map(|d| Ok((d.gid, d.hold, if d.fifo { fifo_hash } else { key_hash })));
            let mailed = v.emails.iter().map(|r| {
                found
                    .email_group(v.tenant.as_str(), r.as_str())
                    .map(|gid| (gid, None, key_hash))
            });
            let mut n = 0u64;
            for dest in routed.chain(mailed) {
                let (gid, hold, hash) = dest?;
                n += 1;
                queue
                    .row(7)
                    .uuid(rows::derived_id(p.base, n))
                    .uuid(p.id.as_uuid())
                    .int4(gid)
                    .int2(if hold.is_some() { 1 } else { 0 })
                    .int8(hold.unwrap_or(available))
                    .opt_int8(hash)
                    .int8(now);
            }
            written.push(Written {
                inserted: true,
                deliveries: i64::try_from(n).unwrap_or(i64::MAX),
                existing: None,
            });
        }
        messages
            .send(conn, self.inner.sql.enqueue.copy_messages.text())
            .await?;
        if queue.rows() > 0 {
            queue
                .send(conn, self.inner.sql.enqueue.copy_queue.text())
                .await?;
            if let Some(channel) = batch.channel {
                (self.inner.sql.enqueue.notify)
                    .bind(Params::new().set("channel", channel))?
                    .execute(&mut *conn)
                    .await
                    .db()?;
            }
        }
        Ok(written)
    }
}

/// One destination of a (tenant, topic) pair, as the `routes` statement found it.
struct Dest<'r> {
    /// The fan-out order: (grp, k1, target byte-wise), as `many` numbers deliveries.
    grp: i32,
    k1: i64,
    target: &'r str,
    /// Held until then (a paused or disabled destination).
    hold: Option<i64>,
    /// A strict-FIFO endpoint.
    fifo: bool,
    gid: i32,
}

/// What the `routes` statement returned, by what the copy looks up.
struct Found<'r> {
    /// Per (tenant, topic): its consumers and endpoints, in fan-out order.
    routes: HashMap<(&'r str, &'r str), Vec<Dest<'r>>>,
    /// Per (tenant, recipient): its e-mail group.
    emails: HashMap<(&'r str, &'r str), i32>,
    /// Per barrier key: `hashtextextended(key, 0)`.
    hashes: HashMap<&'r str, i64>,
}

impl<'r> Found<'r> {
    fn read(rows: &'r [sqlx::postgres::PgRow]) -> Result<Self> {
        let mut found = Found {
            routes: HashMap::new(),
            emails: HashMap::new(),
            hashes: HashMap::new(),
        };
        for row in rows {
            let grp: i32 = get(row, "grp")?;
            let target: &str = get(row, "target")?;
            match grp {
                3 => {
                    found.hashes.insert(target, get(row, "k1")?);
                }
                2 => {
                    found
                        .emails
                        .insert((get(row, "tenant")?, target), get(row, "gid")?);
                }
                _ => {
                    let d = Dest {
                        grp,
                        k1: get(row, "k1")?,
                        target,
                        hold: get(row, "hold")?,
                        fifo: get(row, "fifo")?,
                        gid: get(row, "gid")?,
                    };
                    let route = (get(row, "tenant")?, get(row, "topic")?);
                    found.routes.entry(route).or_default().push(d);
                }
            }
        }
        for dests in found.routes.values_mut() {
            dests.sort_by(|a, b| {
                (a.grp, a.k1, a.target.as_bytes()).cmp(&(b.grp, b.k1, b.target.as_bytes()))
            });
        }
        Ok(found)
    }

    /// The hash of barrier key `key` (`None` when the delivery has none).
    fn hash(&self, key: Option<&str>) -> Result<Option<i64>> {
        key.map(|k| {
            self.hashes.get(k).copied().ok_or_else(|| {
                Error::new(
                    ErrorKind::Unexpected,
                    "an ordering key came back without its hash",
                )
            })
        })
        .transpose()
    }

    fn email_group(&self, tenant: &str, recipient: &str) -> Result<i32> {
        self.emails
            .get(&(tenant, recipient))
            .copied()
            .ok_or_else(|| {
                Error::new(
                    ErrorKind::Unexpected,
                    "an e-mail recipient came back without its group",
                )
            })
    }
}
