//! `EndpointUrl::parse` never panics, and what it accepts is what the reading side accepts:
//! at most `MAX_LEN` bytes as stored, and parsing the stored text gives the same URL.
#![no_main]

use libfuzzer_sys::fuzz_target;
use outboxkit_core::EndpointUrl;

fuzz_target!(|s: &str| {
    if let Ok(u) = EndpointUrl::parse(s) {
        assert!(u.as_str().len() <= EndpointUrl::MAX_LEN);
        assert_eq!(EndpointUrl::parse(u.as_str()).ok().as_ref(), Some(&u));
        assert!(matches!(u.scheme(), "http" | "https"));
        assert!(!u.host().is_empty());
        let _ = u.port();
    }
});
