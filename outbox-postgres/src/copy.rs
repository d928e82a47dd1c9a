//! Rows in PostgreSQL's binary `COPY` format, and sending them: what a large batch enqueue
//! writes instead of an `INSERT … SELECT unnest(…)` (`enqueue/copied.rs`).
//!
//! The format (PostgreSQL's `COPY` documentation, "Binary Format"): a signature and two
//! 32-bit words (flags, header extension length), then per row a 16-bit field count and per
//! field a 32-bit length (−1 for NULL) followed by the value in the type's binary send form
//! (big-endian integers, a uuid's 16 bytes, a text's UTF-8 bytes, a bytea's bytes), then a
//! 16-bit −1.

use outboxkit_core::{Error, ErrorKind, Result};
use sqlx::postgres::PgConnection;
use uuid::Uuid;

use crate::error::DbResult;

/// The binary `COPY` signature, then the flags and the header extension length (both 0).
const HEADER: &[u8] = b"PGCOPY\n\xff\r\n\0\0\0\0\0\0\0\0\0";

/// A `COPY … FROM STDIN (FORMAT binary)` body being written.
pub(crate) struct CopyRows {
    buf: Vec<u8>,
    rows: u64,
}

impl CopyRows {
    /// An empty body with room for about `bytes`.
    pub(crate) fn with_capacity(bytes: usize) -> Self {
        let mut buf = Vec::with_capacity(HEADER.len() + bytes + 2);
        buf.extend_from_slice(HEADER);
        CopyRows { buf, rows: 0 }
    }

    /// Start a row of `fields` values (then one call per value, in the statement's column
    /// order).
    pub(crate) fn row(&mut self, fields: i16) -> &mut Self {
        self.buf.extend_from_slice(&fields.to_be_bytes());
        self.rows += 1;
        self
    }

    fn field(&mut self, value: &[u8]) -> &mut Self {
        // A value longer than 2^31 − 1 bytes does not fit a PostgreSQL field at all; the
        // enqueue limits keep every value far below that.
        let len = i32::try_from(value.len()).unwrap_or(i32::MAX);
        self.buf.extend_from_slice(&len.to_be_bytes());
        self.buf.extend_from_slice(value);
        self
    }

    pub(crate) fn null(&mut self) -> &mut Self {
        self.buf.extend_from_slice(&(-1i32).to_be_bytes());
        self
    }

    pub(crate) fn uuid(&mut self, v: Uuid) -> &mut Self {
        self.field(v.as_bytes())
    }

    /// A `text` (or `bytea`) value.
    pub(crate) fn bytes(&mut self, v: &[u8]) -> &mut Self {
        self.field(v)
    }

    pub(crate) fn text(&mut self, v: &str) -> &mut Self {
        self.field(v.as_bytes())
    }

    pub(crate) fn opt_text(&mut self, v: Option<&str>) -> &mut Self {
        match v {
            Some(v) => self.text(v),
            None => self.null(),
        }
    }

    pub(crate) fn int8(&mut self, v: i64) -> &mut Self {
        self.field(&v.to_be_bytes())
    }

    pub(crate) fn opt_int8(&mut self, v: Option<i64>) -> &mut Self {
        match v {
            Some(v) => self.int8(v),
            None => self.null(),
        }
    }

    pub(crate) fn int4(&mut self, v: i32) -> &mut Self {
        self.field(&v.to_be_bytes())
    }

    pub(crate) fn int2(&mut self, v: i16) -> &mut Self {
        self.field(&v.to_be_bytes())
    }

    /// The rows written so far.
    pub(crate) fn rows(&self) -> u64 {
        self.rows
    }

    /// The finished body (the trailer appended).
    fn finish(mut self) -> Vec<u8> {
        self.buf.extend_from_slice(&(-1i16).to_be_bytes());
        self.buf
    }

    /// Run `statement` (a `COPY … FROM STDIN (FORMAT binary)`) on `conn` with these rows;
    /// the server must report every row copied.
    pub(crate) async fn send(self, conn: &mut PgConnection, statement: &str) -> Result<()> {
        let rows = self.rows;
        let body = self.finish();
        let mut copy = conn.copy_in_raw(statement).await.db()?;
        let sent = copy.send(body).await.map(|_| ());
        if let Err(e) = sent {
            // The connection may still be in the copy: end it before reporting.
            let _ = copy.abort("the copy's data could not be sent").await;
            return Err(e).db();
        }
        let copied = copy.finish().await.db()?;
        if copied != rows {
            return Err(Error::new(
                ErrorKind::Unexpected,
                format!("COPY wrote {copied} rows of {rows}"),
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_body_is_the_signature_rows_and_the_trailer() {
        let mut c = CopyRows::with_capacity(0);
        c.row(4)
            .int8(-2)
            .opt_text(None)
            .text("ab")
            .uuid(Uuid::from_u128(1));
        c.row(2).int4(7).int2(-1);
        assert_eq!(c.rows(), 2);
        let body = c.finish();
        let mut want: Vec<u8> = b"PGCOPY\n\xff\r\n\0".to_vec();
        want.extend([0u8; 8]);
        want.extend([0, 4]);
        want.extend([0, 0, 0, 8, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xfe]);
        want.extend([0xff, 0xff, 0xff, 0xff]);
        want.extend([0, 0, 0, 2, b'a', b'b']);
        want.extend([0, 0, 0, 16]);
        want.extend([0u8; 15]);
        want.push(1);
        want.extend([0, 2]);
        want.extend([0, 0, 0, 4, 0, 0, 0, 7]);
        want.extend([0, 0, 0, 2, 0xff, 0xff]);
        want.extend([0xff, 0xff]);
        assert_eq!(body, want);
    }
}
