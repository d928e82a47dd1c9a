//! [`EventTypeStore`] on PostgreSQL: the `event_types` and `catalogue` tables of migration
//! 10, and the check every enqueue path makes against the store's copy of them.

use async_trait::async_trait;
use outboxkit_core::catalogue::{parse_stored_schema, Catalogue};
use outboxkit_core::{
    CatalogueMode, Error, ErrorKind, EventType, EventTypeStore, NewEventType, Result, Timestamp,
    Topic, ValidMessage,
};
use sqlx::postgres::{PgConnection, PgRow};
use sqlx::Row;

use crate::error::map_err;
use crate::sql::{self, Params, Statement};
use crate::store::PostgresStore;

fn corrupt(column: &'static str) -> impl FnOnce(Error) -> Error {
    move |e| {
        Error::new(
            ErrorKind::Unexpected,
            format!("a stored value of column `{column}` is not valid"),
        )
        .with_source(e)
    }
}

fn type_of(row: &PgRow) -> Result<EventType> {
    let topic: String = row.try_get("topic").map_err(map_err)?;
    let schema: Option<String> = row.try_get("json_schema").map_err(map_err)?;
    let created: i64 = row.try_get("created_at").map_err(map_err)?;
    let updated: i64 = row.try_get("updated_at").map_err(map_err)?;
    Ok(EventType {
        topic: Topic::new(topic).map_err(corrupt("topic"))?,
        description: row.try_get("description").map_err(map_err)?,
        schema: schema.as_deref().map(parse_stored_schema).transpose()?,
        created_at: Timestamp::from_unix_millis(created).map_err(corrupt("created_at"))?,
        updated_at: Timestamp::from_unix_millis(updated).map_err(corrupt("updated_at"))?,
    })
}

impl PostgresStore {
    /// A statement of `sql/event_types.sql` on this store's schema.
    fn catalogue_statement(&self, name: &str) -> Result<Statement> {
        let s = &self.inner.config.schema;
        let types = format!("\"{s}\".event_types");
        let catalogue = format!("\"{s}\".catalogue");
        sql::load(
            sql::EVENT_TYPES,
            name,
            &[("event_types", &types), ("catalogue", &catalogue)],
        )
    }

    async fn read_mode(&self, conn: &mut PgConnection) -> Result<CatalogueMode> {
        let row = self
            .catalogue_statement("mode")?
            .bind(Params::new())?
            .fetch_optional(&mut *conn)
            .await
            .map_err(map_err)?;
        let Some(row) = row else {
            return Ok(CatalogueMode::Off);
        };
        let mode: String = row.try_get("mode").map_err(map_err)?;
        mode.parse().map_err(corrupt("mode"))
    }

    async fn read_types(&self, conn: &mut PgConnection) -> Result<Vec<EventType>> {
        let rows = self
            .catalogue_statement("list")?
            .bind(Params::new())?
            .fetch_all(&mut *conn)
            .await
            .map_err(map_err)?;
        rows.iter().map(type_of).collect()
    }

    /// The catalogue as `conn` sees it (the types are read only when the mode is not off).
    async fn read_catalogue(&self, conn: &mut PgConnection) -> Result<Catalogue> {
        let mode = self.read_mode(conn).await?;
        if mode == CatalogueMode::Off {
            return Ok(Catalogue::off());
        }
        Catalogue::new(mode, self.read_types(conn).await?)
    }

    /// Check messages against the catalogue before anything is written: against the
    /// store's copy while it is fresh and accepts them, otherwise against a read on `conn`
    /// (the caller's transaction for `enqueue_in`).
    pub(crate) async fn check_catalogue(
        &self,
        conn: &mut PgConnection,
        valid: &[&ValidMessage],
    ) -> Result<()> {
        let now = self.inner.clock.now();
        let cache = &self.inner.catalogue;
        if cache.accepts(now, valid.iter().copied()) {
            return Ok(());
        }
        let c = cache.keep(self.read_catalogue(conn).await?, now);
        c.check_all(valid.iter().copied())
    }
}

#[async_trait]
impl EventTypeStore for PostgresStore {
    async fn put_event_type(&self, event_type: &NewEventType) -> Result<EventType> {
        event_type.validate()?;
        let schema = event_type
            .schema
            .as_ref()
            .map(serde_json::to_string)
            .transpose()
            .map_err(|e| {
                Error::new(ErrorKind::Unexpected, "a schema did not serialize").with_source(e)
            })?;
        let params = Params::new()
            .set("topic", event_type.topic.as_str())
            .set("description", event_type.description.as_str())
            .set("json_schema", schema)
            .set("now", self.inner.clock.now().as_unix_millis());
        let row = self
            .catalogue_statement("put")?
            .bind(params)?
            .fetch_one(&self.inner.pool)
            .await
            .map_err(map_err)?;
        self.inner.catalogue.forget();
        type_of(&row)
    }

    async fn get_event_type(&self, topic: &Topic) -> Result<EventType> {
        let row = self
            .catalogue_statement("get")?
            .bind(Params::new().set("topic", topic.as_str()))?
            .fetch_optional(&self.inner.pool)
            .await
            .map_err(map_err)?;
        row.as_ref()
            .map(type_of)
            .transpose()?
            .ok_or_else(|| Error::not_found("event type"))
    }

    async fn list_event_types(&self) -> Result<Vec<EventType>> {
        let mut conn = self.inner.pool.acquire().await.map_err(map_err)?;
        self.read_types(&mut conn).await
    }

    async fn delete_event_type(&self, topic: &Topic) -> Result<()> {
        let done = self
            .catalogue_statement("delete")?
            .bind(Params::new().set("topic", topic.as_str()))?
            .execute(&self.inner.pool)
            .await
            .map_err(map_err)?;
        self.inner.catalogue.forget();
        if done.rows_affected() == 0 {
            return Err(Error::not_found("event type"));
        }
        Ok(())
    }

    async fn catalogue_mode(&self) -> Result<CatalogueMode> {
        let mut conn = self.inner.pool.acquire().await.map_err(map_err)?;
        self.read_mode(&mut conn).await
    }

    async fn set_catalogue_mode(&self, mode: CatalogueMode) -> Result<()> {
        self.catalogue_statement("set_mode")?
            .bind(Params::new().set("mode", mode.as_str()))?
            .execute(&self.inner.pool)
            .await
            .map_err(map_err)?;
        self.inner.catalogue.forget();
        Ok(())
    }
}
