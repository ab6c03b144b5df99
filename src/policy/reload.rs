//! Hot reload: recompiles the policy set when a file under `policy.paths` changes, or on
//! SIGHUP. The swap is atomic (`ArcSwap`); a failed reload keeps the old set.

use std::path::PathBuf;
use std::time::Duration;

use notify::{EventKind, RecursiveMode, Watcher};
use tokio::sync::mpsc;
use tracing::{error, info, warn};

use super::{Slot, Source};

/// Editors save in several steps (truncate, write, rename): wait this long after the first
/// change event and take the burst as one change.
const SETTLE: Duration = Duration::from_millis(100);

/// The running reload task; dropping it stops watching.
#[derive(Debug)]
pub(crate) struct ReloadTask {
    tasks: Vec<tokio::task::JoinHandle<()>>,
    trigger: ReloadTrigger,
}

impl ReloadTask {
    /// A handle that asks this task for a reload, as SIGHUP does.
    pub(crate) fn trigger(&self) -> ReloadTrigger {
        self.trigger.clone()
    }
}

/// Asks one reload task for a reload (the same path as a file change or SIGHUP: settle,
/// recompile off the request threads, keep the old set on error).
#[derive(Debug, Clone)]
pub(crate) struct ReloadTrigger(mpsc::UnboundedSender<()>);

impl ReloadTrigger {
    /// Requests a reload; `false` once the reload task has stopped.
    pub(crate) fn reload(&self) -> bool {
        self.0.send(()).is_ok()
    }
}

impl Drop for ReloadTask {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

pub(super) fn spawn(slot: Slot, watch: bool) -> ReloadTask {
    let (tx, rx) = mpsc::unbounded_channel::<()>();
    let watcher = match (&slot.source, watch) {
        (Source::Paths(paths), true) => start_watcher(paths, tx.clone()),
        _ => None,
    };
    let task = tokio::spawn(async move {
        // Moved in so the watcher lives as long as the task.
        let _watcher = watcher;
        run(slot, rx).await;
    });
    let mut tasks = vec![task];
    tasks.extend(spawn_sighup(tx.clone()));
    ReloadTask { tasks, trigger: ReloadTrigger(tx) }
}

fn start_watcher(paths: &[PathBuf], tx: mpsc::UnboundedSender<()>) -> Option<notify::RecommendedWatcher> {
    let handler = move |res: notify::Result<notify::Event>| match res {
        Ok(ev) if matches!(ev.kind, EventKind::Access(_)) => {}
        Ok(ev) if ev.paths.iter().any(|p| p.is_dir() || super::load::is_policy_file(p, false)) || ev.paths.is_empty() => {
            let _ = tx.send(());
        }
        Ok(_) => {}
        Err(e) => warn!(error = %e, "Policy file watch error"),
    };
    let mut watcher = match notify::recommended_watcher(handler) {
        Ok(w) => w,
        Err(e) => {
            warn!(error = %e, "Cannot watch policy files; reload with SIGHUP");
            return None;
        }
    };
    for p in paths {
        if let Err(e) = watcher.watch(p, RecursiveMode::Recursive) {
            warn!(path = %p.display(), error = %e, "Cannot watch policy path; reload with SIGHUP");
        }
    }
    Some(watcher)
}

#[cfg(unix)]
fn spawn_sighup(tx: mpsc::UnboundedSender<()>) -> Option<tokio::task::JoinHandle<()>> {
    use tokio::signal::unix::{signal, SignalKind};
    let Ok(mut hup) = signal(SignalKind::hangup()) else {
        warn!("Cannot listen for SIGHUP; policy reloads only on file change");
        return None;
    };
    Some(tokio::spawn(async move {
        while hup.recv().await.is_some() {
            if tx.send(()).is_err() {
                return;
            }
        }
    }))
}

#[cfg(not(unix))]
fn spawn_sighup(_tx: mpsc::UnboundedSender<()>) -> Option<tokio::task::JoinHandle<()>> {
    None
}

async fn run(slot: Slot, mut rx: mpsc::UnboundedReceiver<()>) {
    while rx.recv().await.is_some() {
        tokio::time::sleep(SETTLE).await;
        while rx.try_recv().is_ok() {}
        let s = slot.clone();
        // Compiling is CPU work; keep it off the request threads' async loop.
        match tokio::task::spawn_blocking(move || s.reload()).await {
            Ok(Ok(version)) => info!(policy.version = %version, "Policy reloaded"),
            Ok(Err(e)) => error!(error = %e, "Policy reload failed; keeping the previous policy"),
            Err(e) => error!(error = %e, "Policy reload task failed; keeping the previous policy"),
        }
    }
}
