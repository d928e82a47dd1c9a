//! In-process wake-ups shared by every handle on one database file.
//!
//! Two `SqliteStore`s opened on the same file in one process (say, the application's for
//! enqueueing and the dispatcher's) share one [`Wakeups`]: an enqueue through either wakes
//! the listeners of both. Other processes' writes are seen at the dispatcher's next poll.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock, PoisonError, Weak};

use outboxkit_core::Wakeups;

type Registry = Mutex<HashMap<PathBuf, Weak<Wakeups>>>;

/// The wake-ups of the database at `path` (canonical), shared with other live handles.
/// Blocking (it resolves the path): call it off the async executor.
pub(crate) fn shared(path: &Path) -> Arc<Wakeups> {
    static REGISTRY: OnceLock<Registry> = OnceLock::new();
    let key = std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf());
    let mut map = REGISTRY
        .get_or_init(Registry::default)
        .lock()
        .unwrap_or_else(PoisonError::into_inner);
    map.retain(|_, w| w.strong_count() > 0);
    if let Some(w) = map.get(&key).and_then(Weak::upgrade) {
        return w;
    }
    let w = Arc::new(Wakeups::new());
    map.insert(key, Arc::downgrade(&w));
    w
}
