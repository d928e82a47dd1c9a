//! [`EventTypeStore`] on SQLite: the `outbox_event_types` and `outbox_catalogue` tables of
//! schema 8, and the check every enqueue path makes against the store's copy of them.

use async_trait::async_trait;
use outboxkit_core::catalogue::{parse_stored_schema, Catalogue};
use outboxkit_core::{
    CatalogueMode, Error, EventType, EventTypeStore, NewEventType, Result, Timestamp, Topic,
    ValidMessage,
};
use rusqlite::{Connection, OptionalExtension, Row};

use crate::error::SqliteError;
use crate::store::SqliteStore;

const COLUMNS: &str = "topic, description, json_schema, created_at, updated_at";

type Raw = (String, String, Option<String>, i64, i64);

fn raw(row: &Row<'_>) -> rusqlite::Result<Raw> {
    Ok((
        row.get(0)?,
        row.get(1)?,
        row.get(2)?,
        row.get(3)?,
        row.get(4)?,
    ))
}

fn decode((topic, description, schema, created, updated): Raw) -> Result<EventType, SqliteError> {
    let bad = |c: &'static str| move |_| SqliteError::Corrupt(c);
    Ok(EventType {
        topic: Topic::new(topic).map_err(bad("event type topic"))?,
        description,
        schema: schema.as_deref().map(parse_stored_schema).transpose()?,
        created_at: Timestamp::from_unix_millis(created).map_err(bad("event type time"))?,
        updated_at: Timestamp::from_unix_millis(updated).map_err(bad("event type time"))?,
    })
}

fn read_mode(conn: &Connection) -> Result<CatalogueMode, SqliteError> {
    let mode: Option<String> = conn
        .prepare_cached("SELECT mode FROM outbox_catalogue")?
        .query_row([], |r| r.get(0))
        .optional()?;
    match mode {
        None => Ok(CatalogueMode::Off),
        Some(m) => m
            .parse()
            .map_err(|_| SqliteError::Corrupt("catalogue mode")),
    }
}

fn read_types(conn: &Connection) -> Result<Vec<EventType>, SqliteError> {
    let mut stmt = conn.prepare_cached(&format!(
        "SELECT {COLUMNS} FROM outbox_event_types ORDER BY topic"
    ))?;
    let rows = stmt
        .query_map([], raw)?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    rows.into_iter().map(decode).collect()
}

fn read_one(conn: &Connection, topic: &str) -> Result<Option<EventType>, SqliteError> {
    let row = conn
        .prepare_cached(&format!(
            "SELECT {COLUMNS} FROM outbox_event_types WHERE topic = ?1"
        ))?
        .query_row([topic], raw)
        .optional()?;
    row.map(decode).transpose()
}

/// The catalogue as `conn` sees it (the types are read only when the mode is not off).
pub(crate) fn read_catalogue(conn: &Connection) -> Result<Catalogue, SqliteError> {
    let mode = read_mode(conn)?;
    if mode == CatalogueMode::Off {
        return Ok(Catalogue::off());
    }
    Ok(Catalogue::new(mode, read_types(conn)?)?)
}

impl SqliteStore {
    /// Check messages against the catalogue inside the caller's transaction (`enqueue_in`):
    /// the store's copy while it is fresh and accepts them, otherwise a read on `conn`.
    pub(crate) fn check_catalogue_on(
        &self,
        conn: &Connection,
        valid: &[ValidMessage],
    ) -> Result<()> {
        let now = self.clock_and_limits().0.now();
        let cache = self.catalogue();
        if cache.accepts(now, valid) {
            return Ok(());
        }
        let c = cache.keep(read_catalogue(conn).map_err(Error::from)?, now);
        c.check_all(valid)
    }

    /// Check messages against the catalogue before the store's own write: the copy while it
    /// is fresh and accepts them, otherwise a read on a reader connection.
    pub(crate) async fn check_catalogue(&self, valid: &[ValidMessage]) -> Result<()> {
        let now = self.clock_and_limits().0.now();
        if self.catalogue().accepts(now, valid) {
            return Ok(());
        }
        let read = self.read(|tx, _| read_catalogue(tx)).await?;
        self.catalogue().keep(read, now).check_all(valid)
    }
}

#[async_trait]
impl EventTypeStore for SqliteStore {
    async fn put_event_type(&self, event_type: &NewEventType) -> Result<EventType> {
        event_type.validate()?;
        let t = event_type.clone();
        let stored = self
            .write(move |tx, now, _| {
                let existing = read_one(tx, t.topic.as_str())?;
                let stored = t.clone().into_event_type(existing.as_ref(), now);
                let schema = stored.schema.as_ref().map(|s| s.to_string());
                tx.execute(
                    &format!(
                        "INSERT INTO outbox_event_types ({COLUMNS}) VALUES (?1, ?2, ?3, ?4, ?5) \
                         ON CONFLICT (topic) DO UPDATE SET description = excluded.description, \
                         json_schema = excluded.json_schema, updated_at = excluded.updated_at"
                    ),
                    rusqlite::params![
                        stored.topic.as_str(),
                        stored.description,
                        schema,
                        stored.created_at.as_unix_millis(),
                        stored.updated_at.as_unix_millis(),
                    ],
                )?;
                Ok(stored)
            })
            .await?;
        self.catalogue().forget();
        Ok(stored)
    }

    async fn get_event_type(&self, topic: &Topic) -> Result<EventType> {
        let topic = topic.as_str().to_owned();
        self.read(move |tx, _| read_one(tx, &topic))
            .await?
            .ok_or_else(|| Error::not_found("event type"))
    }

    async fn list_event_types(&self) -> Result<Vec<EventType>> {
        self.read(|tx, _| read_types(tx)).await
    }

    async fn delete_event_type(&self, topic: &Topic) -> Result<()> {
        let topic = topic.as_str().to_owned();
        let n = self
            .write(move |tx, _, _| {
                Ok(tx.execute("DELETE FROM outbox_event_types WHERE topic = ?1", [&topic])?)
            })
            .await?;
        self.catalogue().forget();
        if n == 0 {
            return Err(Error::not_found("event type"));
        }
        Ok(())
    }

    async fn catalogue_mode(&self) -> Result<CatalogueMode> {
        self.read(|tx, _| read_mode(tx)).await
    }

    async fn set_catalogue_mode(&self, mode: CatalogueMode) -> Result<()> {
        self.write(move |tx, _, _| {
            tx.execute("UPDATE outbox_catalogue SET mode = ?1", [mode.as_str()])?;
            Ok(())
        })
        .await?;
        self.catalogue().forget();
        Ok(())
    }
}
