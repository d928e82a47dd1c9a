//! A delivery's ledger entries (one list item per attempt, `<prefix>:a:<id>`): how the Rust
//! side packs an attempt and how an entry is read back.
//!
//! An entry is `probe|record json` as packed here; the complete script stores it as
//! `probe|run|due|record json` (entries written before the run was kept have the short
//! form). An attempt in full follows its record after [`DETAIL_SEP`]:
//! `…|record json<0x1e>detail json`. JSON text never holds a raw control character, so the
//! first `0x1e` of an entry ends its record: the scripts copy the record alone (the
//! endpoint's last status, the text filter) and never read the detail. Entries without the
//! separator (every entry written before details were kept) read no detail.

use outboxkit_core::{
    Attempt, AttemptDetail, AttemptOutcome, AttemptRecord, DeliveryId, PayloadFingerprint, Result,
    Timestamp,
};
use redis::Value;
use serde::Serialize;

use crate::error::corrupt;
use crate::rows::{opt_ms, split, str_of};

/// Between an entry's record and its detail: the ASCII record separator.
pub(crate) const DETAIL_SEP: char = '\u{1e}';

/// An [`AttemptRecord`]'s fields but the detail, serialized as the record itself is (the
/// same names and forms), without copying the detail to leave it out.
#[derive(Serialize)]
struct Fields<'a> {
    started_at: Timestamp,
    finished_at: Timestamp,
    outcome: AttemptOutcome,
    status_code: Option<u16>,
    excerpt: &'a Option<String>,
}

impl<'a> From<&'a AttemptRecord> for Fields<'a> {
    fn from(r: &'a AttemptRecord) -> Self {
        Fields {
            started_at: r.started_at,
            finished_at: r.finished_at,
            outcome: r.outcome,
            status_code: r.status_code,
            excerpt: &r.excerpt,
        }
    }
}

/// The record of an attempt without its detail: what an endpoint's last status keeps.
pub(crate) fn pack_record(record: &AttemptRecord) -> Result<Vec<u8>> {
    serde_json::to_vec(&Fields::from(record)).map_err(|_| corrupt("attempt"))
}

/// One ledger entry as the Rust side packs it: `probe|record json`, then the detail after
/// [`DETAIL_SEP`] when the attempt has one.
pub(crate) fn pack_attempt(record: &AttemptRecord, probe: bool) -> Result<Vec<u8>> {
    let mut out = if probe {
        b"1|".to_vec()
    } else {
        b"0|".to_vec()
    };
    serde_json::to_writer(&mut out, &Fields::from(record)).map_err(|_| corrupt("attempt"))?;
    if let Some(d) = &record.detail {
        let mut sep = [0; 4];
        out.extend_from_slice(DETAIL_SEP.encode_utf8(&mut sep).as_bytes());
        out.extend_from_slice(d.to_json().as_bytes());
    }
    Ok(out)
}

/// The ledger entry at 1-based `number`, carrying the payload's fingerprint.
pub(crate) fn attempt(
    delivery: DeliveryId,
    number: u32,
    v: &Value,
    payload: &PayloadFingerprint,
) -> Result<Attempt> {
    let bad = || corrupt("attempt");
    let s = str_of(v).ok_or_else(bad)?;
    let (probe, rest) = s.split_once('|').ok_or_else(bad)?;
    let (run, scheduled_at, json) = if rest.starts_with('{') {
        (1, None, rest)
    } else {
        let [run, due, json] = split::<3>(rest, '|').map_err(|()| bad())?;
        let due = opt_ms(due).map_err(|()| bad())?;
        (run.parse().map_err(|_| bad())?, due, json)
    };
    let (json, detail) = match json.split_once(DETAIL_SEP) {
        Some((json, detail)) => (json, Some(detail)),
        None => (json, None),
    };
    let mut record: AttemptRecord = serde_json::from_str(json).map_err(|_| bad())?;
    if let Some(d) = detail {
        record.detail = Some(Box::new(AttemptDetail::from_json(d).map_err(|_| bad())?));
    }
    Ok(Attempt {
        delivery_id: delivery,
        number,
        probe: probe == "1",
        run,
        scheduled_at,
        payload: payload.clone(),
        record,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bulk(s: &str) -> Value {
        Value::BulkString(s.as_bytes().to_vec())
    }

    const RECORD: &str = r#"{"started_at":1700000000000,"finished_at":1700000001000,"outcome":"succeeded","status_code":204,"excerpt":"a|b"}"#;

    #[test]
    fn ledger_entries_of_both_forms_are_read() {
        let id = DeliveryId::parse("0190a000-0000-7000-8000-000000000002").unwrap();
        let fp = PayloadFingerprint::of(b"{}");
        // Written before runs were kept: `probe|record`.
        let old = attempt(id, 1, &bulk(&format!("0|{RECORD}")), &fp).unwrap();
        assert_eq!((old.run, old.scheduled_at, old.probe), (1, None, false));
        assert_eq!(old.record.excerpt.as_deref(), Some("a|b"));
        assert_eq!(old.record.detail, None);
        // `probe|run|due|record`, with and without a due time.
        let new = attempt(id, 2, &bulk(&format!("1|3|1699999999000|{RECORD}")), &fp).unwrap();
        assert_eq!(
            (new.run, new.scheduled_at, new.probe),
            (
                3,
                Some(Timestamp::from_unix_millis(1_699_999_999_000).unwrap()),
                true
            )
        );
        assert_eq!(new.record.detail, None, "an entry from before details");
        let no_due = attempt(id, 3, &bulk(&format!("0|2||{RECORD}")), &fp).unwrap();
        assert_eq!((no_due.run, no_due.scheduled_at), (2, None));
        assert_eq!(no_due.payload, fp);
    }

    fn record(detail: Option<AttemptDetail>) -> AttemptRecord {
        let mut r: AttemptRecord = serde_json::from_str(RECORD).unwrap();
        r.detail = detail.map(Box::new);
        r
    }

    #[test]
    fn the_record_is_packed_as_the_record_itself_serializes() {
        let r = record(None);
        assert_eq!(pack_record(&r).unwrap(), serde_json::to_vec(&r).unwrap());
        assert_eq!(
            pack_attempt(&r, false).unwrap(),
            format!("0|{RECORD}").as_bytes()
        );
    }

    #[test]
    fn a_detail_follows_its_record_and_reads_back() {
        let id = DeliveryId::parse("0190a000-0000-7000-8000-000000000002").unwrap();
        let fp = PayloadFingerprint::of(b"{}");
        let mut d = AttemptDetail {
            request_headers: vec![("x-sep".into(), "a\u{1e}b|{c}".into())],
            ..AttemptDetail::default()
        };
        d.set_response_body(b"\x1e\xff|", 16);
        let r = record(Some(d.clone()));
        let packed = String::from_utf8(pack_attempt(&r, true).unwrap()).unwrap();
        let (head, tail) = packed.split_once(DETAIL_SEP).unwrap();
        assert_eq!(head, format!("1|{RECORD}"), "the record comes first, alone");
        assert_eq!(tail, d.to_json());
        assert!(
            !d.to_json().contains(DETAIL_SEP),
            "json escapes the separator"
        );
        assert_eq!(pack_record(&r).unwrap(), RECORD.as_bytes());
        // As the complete script stores it: `probe|run|due|` before the record.
        let stored = format!("1|2|1699999999000|{}", &packed[2..]);
        let got = attempt(id, 1, &bulk(&stored), &fp).unwrap();
        assert_eq!(got.record, r);
        assert!(attempt(id, 1, &bulk(&format!("0|{RECORD}\u{1e}{{")), &fp).is_err());
    }
}
