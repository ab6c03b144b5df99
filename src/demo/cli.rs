//! `portcullis demo`: starts the stack, runs the tour, prints the table and the commands to
//! try, then serves until ctrl-c (or exits at once with `--tour-only`).

use std::path::PathBuf;

use super::{render_table, tour, Demo, DemoError};
use tour::render_rollout;

/// `portcullis demo`.
#[derive(Debug, clap::Args)]
pub struct DemoArgs {
    /// Folder for the demo's key, token, CA, configs and decision logs (default: a
    /// `portcullis-demo` folder in the system temp dir).
    #[arg(long)]
    pub dir: Option<PathBuf>,
    /// Run the tour, print the table and stop (exit 1 if a status differs from the expected).
    #[arg(long)]
    pub tour_only: bool,
}

/// Runs the demo; `Ok(true)` when every tour step got its expected status.
pub async fn run(args: &DemoArgs) -> Result<bool, DemoError> {
    let dir = args.dir.clone().unwrap_or_else(|| std::env::temp_dir().join("portcullis-demo"));
    let demo = Demo::start(&dir).await?;
    println!("Portcullis demo: everything on 127.0.0.1");
    println!("  MCP backend       http://{}/mcp (weather.get, payments.send, files.read)", demo.backend.addr);
    println!("  agent key dir     {}/.well-known/http-message-signatures-directory", demo.agent_url());
    println!("  token issuer      {}", demo.issuer.url());
    println!("  gateway (enforce) {}", demo.enforce.url);
    println!("  gateway (monitor) {}", demo.monitor.url);
    println!("  rollout steps 2-3 {} (identity enforced), {} (identity and token)", demo.steps[0].url, demo.steps[1].url);
    println!("  files             {}\n", demo.dir.display());
    let tours = async { Ok::<_, DemoError>((tour::run(&demo).await?, tour::rollout(&demo).await?)) };
    let (rows, rollout) = match tours.await {
        Ok(r) => r,
        Err(e) => {
            demo.shutdown().await;
            return Err(e);
        }
    };
    print!("{}", render_table(&rows));
    println!("\nRolling out stage group by stage group (docs/rollout.md): the same requests at each step");
    print!("{}", render_rollout(&rollout));
    let ok = rows.iter().all(|r| r.status == r.expected) && rollout.iter().flat_map(|r| &r.steps).all(|s| s.status == s.expected);
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
