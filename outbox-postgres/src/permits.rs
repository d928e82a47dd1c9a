//! `take_permits` on PostgreSQL: the `endpoint_permits` table of migration 10, rewritten by
//! the one statement of `sql/permits.sql` (core's [`PermitLog::take`] rule in SQL).

use outboxkit_core::permits::validate_rate;
use outboxkit_core::{
    EndpointId, Error, ErrorKind, PermitLog, Permits, Result, TenantId, Timestamp,
};
use sqlx::Row;

use crate::error::map_err;
use crate::sql::Params;
use crate::store::PostgresStore;

impl PostgresStore {
    pub(crate) async fn take_permits_now(
        &self,
        tenant: &TenantId,
        endpoint: EndpointId,
        rate: u32,
        want: u32,
        now: Timestamp,
    ) -> Result<Permits> {
        validate_rate(rate)?;
        let (rate, want) = (rate as i32, want.min(rate) as i32);
        let row = self
            .inner
            .sql
            .permits
            .bind(
                Params::new()
                    .set("tenant", tenant.as_str())
                    .set("endpoint", endpoint.as_uuid())
                    .set("rate", rate)
                    .set("want", want)
                    .set("now", now.as_unix_millis()),
            )?
            .fetch_one(&self.inner.pool)
            .await
            .map_err(map_err)?;
        let at: Vec<i64> = row.try_get("at_ms").map_err(map_err)?;
        let counts: Vec<i32> = row.try_get("counts").map_err(map_err)?;
        let granted: i32 = row.try_get("granted").map_err(map_err)?;
        let corrupt = || Error::new(ErrorKind::Unexpected, "a stored permit log is not valid");
        if at.len() != counts.len() || granted < 0 || granted > want {
            return Err(corrupt());
        }
        let runs = at
            .into_iter()
            .zip(counts)
            .map(|(t, c)| u32::try_from(c).map(|c| (t, c)).map_err(|_| corrupt()))
            .collect::<Result<Vec<_>>>()?;
        let log = PermitLog::from_runs(runs);
        let used: u64 = log.runs().iter().map(|r| u64::from(r.1)).sum();
        let next_at = if used < rate as u64 {
            now
        } else {
            log.oldest_expiry().unwrap_or(now).max(now)
        };
        Ok(Permits {
            granted: granted as u32,
            next_at,
        })
    }
}
