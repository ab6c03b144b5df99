//! Log lines a test collects: give [`Lines`] to a `tracing_subscriber::fmt()` writer
//! (`.with_writer(move || lines.clone())`) and read what was written with [`Lines::text`].

use std::sync::{Arc, Mutex};

/// A shared, growable buffer of formatted log output; clones write to the same buffer.
#[derive(Clone, Default)]
pub struct Lines(Arc<Mutex<Vec<u8>>>);

impl Lines {
    /// Everything written so far, as text (lossy for non-UTF-8 bytes).
    pub fn text(&self) -> String {
        let bytes = self.0.lock().map(|b| b.clone()).unwrap_or_default();
        String::from_utf8_lossy(&bytes).into_owned()
    }
}

impl std::io::Write for Lines {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().map_err(|_| std::io::Error::other("poisoned"))?.extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}
