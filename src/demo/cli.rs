//! `portcullis demo`: starts the stack, runs the tour, prints the table and the commands to
//! try, then serves until ctrl-c (or exits at once with `--tour-only`).

use std::path::PathBuf;

use super::{render_table, tour, Demo, DemoError};
use tour::render_rollout;

/// `portcullis demo`.
#[derive(Debug, clap::Args)]
pub struct DemoArgs {
    /// Folder for the demo's key, token, CA, configs and decision logs (default: a new
    /// `portcullis-demo-…` folder in the system temp dir for each run). A folder a running
    /// demo uses is refused.
    #[arg(long)]
    pub dir: Option<PathBuf>,
    /// Run the tour, print the table and stop (exit 1 if a status differs from the expected).
    #[arg(long)]
    pub tour_only: bool,
}

/// Runs the demo; `Ok(true)` when every tour step got its expected status.
pub async fn run(args: &DemoArgs) -> Result<bool, DemoError> {
    let folder = match &args.dir {
        Some(dir) => DemoFolder::claim(dir)?,
        None => DemoFolder::fresh()?,
    };
    let demo = Demo::start(&folder.dir).await?;
    println!("Portcullis demo: everything on 127.0.0.1");
    println!("  MCP backend       http://{}/mcp (weather.get, payments.send, files.read)", demo.backend.addr);
    println!("  agent key dir     {}/.well-known/http-message-signatures-directory", demo.agent_url());
    println!("  token issuer      {}", demo.issuer.url());
    println!("  gateway (enforce) {}", demo.enforce.url);
    println!("  gateway (monitor) {}", demo.monitor.url);
    println!("  rollout steps 2-3 {} (identity enforced), {} (identity and token)", demo.steps[0].url, demo.steps[1].url);
    println!("  gateway, 2 servers {0}/weather/mcp, {0}/files/mcp", demo.platform.url);
    println!("  files             {}\n", demo.dir.display());
    let tours = async { Ok::<_, DemoError>((tour::run(&demo).await?, tour::rollout(&demo).await?, tour::servers(&demo).await?)) };
    let (rows, rollout, servers) = match tours.await {
        Ok(r) => r,
        Err(e) => {
            demo.shutdown().await;
            return Err(e);
        }
    };
    print!("{}", render_table(&rows));
    println!("\nRolling out stage group by stage group (docs/rollout.md): the same requests at each step");
    print!("{}", render_rollout(&rollout));
    println!("\nOne gateway in front of two MCP servers (docs/many-servers.md): each server is its own resource");
    print!("{}", render_table(&servers));
    match tour::backend_token(&demo).await {
        Ok(claims) => println!("\nWhat the backend got instead of the user's token (token exchange, docs/upstream-credentials.md):\n  {claims}"),
        Err(e) => println!("\nThe backend's exchanged token could not be shown: {e}"),
    }
    let ok = rows.iter().chain(&servers).all(|r| r.status == r.expected) && rollout.iter().flat_map(|r| &r.steps).all(|s| s.status == s.expected);
    if !ok {
        println!("\nSome steps did not get the expected status (marked (!)).");
    }
    if args.tour_only {
        demo.shutdown().await;
        return Ok(ok);
    }
    // Before the commands are printed: a ctrl-c right after them stops the demo cleanly.
    let stop = crate::server::shutdown_signal();
    let bin = std::env::current_exe().map(|p| p.display().to_string()).unwrap_or_else(|_| "portcullis".to_owned());
    println!("\n{}", demo.try_it(&bin));
    stop.await;
    println!("stopping");
    demo.shutdown().await;
    Ok(ok)
}

/// The demo's folder, held for the run: a second demo in the same folder would overwrite the
/// configs, key and token the first one's printed commands use. The claim is a `demo.pid` file
/// naming this process, removed when the run ends; a file left by a process that is gone (a
/// demo that was killed) does not count.
struct DemoFolder {
    dir: PathBuf,
    pid_file: PathBuf,
}

/// The claim file in a demo folder.
const PID_FILE: &str = "demo.pid";

impl DemoFolder {
    /// A new folder in the system temp dir, never used before.
    fn fresh() -> Result<Self, DemoError> {
        let dir = std::env::temp_dir().join(format!("portcullis-demo-{}", &uuid::Uuid::new_v4().simple().to_string()[..12]));
        std::fs::create_dir(&dir).map_err(|source| DemoError::Write { path: dir.clone(), source })?;
        Self::claim(&dir)
    }

    /// Claims `dir` (made when missing), unless a running demo holds it.
    fn claim(dir: &std::path::Path) -> Result<Self, DemoError> {
        std::fs::create_dir_all(dir).map_err(|source| DemoError::Write { path: dir.to_owned(), source })?;
        let pid_file = dir.join(PID_FILE);
        if let Some(pid) = std::fs::read_to_string(&pid_file).ok().and_then(|t| t.trim().parse::<u32>().ok()) {
            if pid != std::process::id() && is_running(pid) {
                return Err(DemoError::InUse { path: dir.to_owned(), pid });
            }
        }
        std::fs::write(&pid_file, format!("{}\n", std::process::id())).map_err(|source| DemoError::Write { path: pid_file.clone(), source })?;
        Ok(Self { dir: dir.to_owned(), pid_file })
    }
}

impl Drop for DemoFolder {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.pid_file);
    }
}

/// Whether process `pid` exists. Where that cannot be told (no `/proc`), it is taken to run:
/// the error names the file to remove.
fn is_running(pid: u32) -> bool {
    let proc = std::path::Path::new("/proc");
    !proc.is_dir() || proc.join(pid.to_string()).exists()
}
