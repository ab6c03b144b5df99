//! The `portcullis` command line: run the gateway, check a config, evaluate and test
//! policies, make agent keys and signed requests. No logic lives here.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use mimalloc::MiMalloc;
use portcullis::config::Config;

#[derive(Parser)]
#[command(name = "portcullis", version, about = "MCP gateway: agent signatures, OAuth tokens and Rego policy in front of an MCP server")]
struct Cli {
    /// Config file (TOML) of the gateway that runs when no command is given. Without it, the
    /// embedded default config runs.
    #[arg(long)]
    config: Option<PathBuf>,
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Subcommand)]
enum Command {
    /// Run the gateway (the default when no command is given).
    Run {
        /// Config file (TOML). Without it, the embedded default config runs.
        #[arg(long)]
        config: Option<PathBuf>,
    },
    /// Validate the config and every stage built from it, then exit (non-zero on error).
    Check {
        /// Config file (TOML) to validate. Without it, the embedded default config is checked.
        #[arg(long)]
        config: Option<PathBuf>,
    },
    /// Print the embedded default config.
    DefaultConfig,
    /// Summarise a decision log: what enforcement would do (text; `--html` writes a page with charts).
    Report {
        /// The decision log (JSON lines); `-` reads standard input.
        log: PathBuf,
        /// Also write a self-contained HTML page here.
        #[arg(long)]
        html: Option<PathBuf>,
        /// Report only this server's records (the log's `server` field; `default` in the
        /// single-server form).
        #[arg(long, value_name = "NAME")]
        server: Option<String>,
    },
    /// Run the example MCP backend (tools weather.get, payments.send, files.read) for demos and tests.
    ExampleBackend {
        /// Where to listen.
        #[arg(long, default_value = "127.0.0.1:3001")]
        addr: std::net::SocketAddr,
        /// List the tools of this JSON file (an array of MCP Tool objects) instead of the
        /// built-in three, read again at every tools/list: edit a definition to try `tools diff`.
        #[arg(long)]
        tools: Option<std::path::PathBuf>,
    },
    /// Probe a health endpoint (for container HEALTHCHECKs without curl); exit 0 when it answers 200.
    Healthcheck {
        /// The URL to probe.
        #[arg(long, default_value = "http://127.0.0.1:9090/healthz")]
        url: String,
        /// Give up after this long.
        #[arg(long, default_value = "3s", value_parser = portcullis::config::parse_duration)]
        timeout: std::time::Duration,
    },
    /// Generate an agent's Ed25519 key pair: a private JWK and the key directory to publish.
    Keygen(portcullis_client::cli::KeygenArgs),
    /// Send a freshly signed request (curl-like): prints status, headers and body.
    Request(Box<portcullis_client::cli::RequestArgs>),
    /// Start a backend, key directory, token issuer and gateways on 127.0.0.1, run a scripted
    /// tour and print what happened; then serve until ctrl-c.
    Demo(portcullis::demo::cli::DemoArgs),
    /// Policy tooling: evaluate a decision, run Rego tests.
    #[command(subcommand)]
    Policy(PolicyCommand),
    /// Tool catalog tooling: pin the backend's tool definitions, show how they drifted.
    #[command(subcommand)]
    Tools(ToolsCommand),
}

#[derive(Subcommand)]
enum ToolsCommand {
    /// Fetch the backend's tools (as the gateway does) and write the digest of each definition
    /// to the pins file.
    Pin {
        /// Config file (TOML): the backend is its upstream.url, the pins file its tools.pins.
        #[arg(long)]
        config: Option<PathBuf>,
        /// The pins file to write (default: tools.pins).
        #[arg(long)]
        out: Option<PathBuf>,
        /// The server whose tools to read (`[[servers]]` name; needed when there are several).
        #[arg(long)]
        server: Option<String>,
    },
    /// Fetch the backend's tools and print which pinned definitions changed, and which fields;
    /// exit 1 on any drift.
    Diff {
        /// Config file (TOML): the backend is its upstream.url, the pins file its tools.pins.
        #[arg(long)]
        config: Option<PathBuf>,
        /// The pins file to compare with (default: tools.pins).
        #[arg(long)]
        pins: Option<PathBuf>,
        /// The server whose tools to read (`[[servers]]` name; needed when there are several).
        #[arg(long)]
        server: Option<String>,
    },
}

#[derive(Subcommand)]
enum PolicyCommand {
    /// Evaluate `policy.query` of the config's policy for an input document; print the
    /// decision and the rules that fired. Exit 1 when the decision is malformed (the gateway
    /// would refuse with policy_error), 2 when the policy or the input cannot be read.
    Eval {
        /// Config file (TOML) whose [policy] is evaluated. Without it, the bundled policy.
        #[arg(long)]
        config: Option<PathBuf>,
        /// The input document (JSON, docs/design.md "Policy contract").
        #[arg(long)]
        input: PathBuf,
    },
    /// Run every `test_*` rule under DIR (default: policies) like `opa test`; non-zero exit on
    /// failure.
    Test {
        /// Folder of `.rego` files (and `data.json`).
        #[arg(default_value = "policies")]
        dir: PathBuf,
    },
}

/// The config a command uses: its own `--config`, else the one given before the command
/// (`portcullis --config FILE check` reads as well as `portcullis check --config FILE`).
fn config_path(own: Option<PathBuf>, before: &Option<PathBuf>) -> Option<PathBuf> {
    own.or_else(|| before.clone())
}

fn load(path: Option<&PathBuf>) -> Result<Config, portcullis::config::ConfigError> {
    match path {
        Some(p) => Config::load(p),
        None => Config::embedded_default(),
    }
}

fn summarise_log(log: &std::path::Path, html: Option<&std::path::Path>, server: Option<&str>) -> Result<String, String> {
    use portcullis::report::{render_html, Report};
    let r = if log.as_os_str() == "-" {
        Report::from_reader_for(std::io::stdin().lock(), server)
    } else {
        let f = std::fs::File::open(log).map_err(|e| format!("cannot open {}: {e}", log.display()))?;
        Report::from_reader_for(std::io::BufReader::new(f), server)
    }
    .map_err(|e| format!("cannot read {}: {e}", log.display()))?;
    if let Some(out) = html {
        std::fs::write(out, render_html(&r)).map_err(|e| format!("cannot write {}: {e}", out.display()))?;
    }
    Ok(r.render_text())
}

/// The async runtime for a command; a runtime that cannot start is reported once, here.
fn runtime(multi_thread: bool) -> Result<tokio::runtime::Runtime, ExitCode> {
    let mut builder = if multi_thread { tokio::runtime::Builder::new_multi_thread() } else { tokio::runtime::Builder::new_current_thread() };
    builder.enable_all().build().map_err(|e| {
        eprintln!("error: cannot start the async runtime: {e}");
        ExitCode::FAILURE
    })
}

/// Prints a tooling result: text on stdout (exit 1 if it reports failure), errors on stderr (2).
fn report(result: Result<(String, bool), String>) -> ExitCode {
    match result {
        Ok((text, ok)) => {
            print!("{text}");
            if ok {
                ExitCode::SUCCESS
            } else {
                ExitCode::FAILURE
            }
        }
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(2)
        }
    }
}

/// Runs `portcullis request`: exit 0 for a 2xx answer, 1 for another status, 2 when no answer.
fn request(args: &portcullis_client::cli::RequestArgs) -> ExitCode {
    let rt = match runtime(false) {
        Ok(rt) => rt,
        Err(code) => return code,
    };
    match rt.block_on(portcullis_client::cli::request(args)) {
        Ok(out) => {
            eprint!("{}", out.trace);
            print!("{}", out.response);
            if (200..300).contains(&out.status) {
                ExitCode::SUCCESS
            } else {
                ExitCode::FAILURE
            }
        }
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(2)
        }
    }
}

/// Runs `portcullis demo`: exit 0 when every tour step got its expected status.
fn demo(args: &portcullis::demo::cli::DemoArgs) -> ExitCode {
    let rt = match runtime(true) {
        Ok(rt) => rt,
        Err(code) => return code,
    };
    match rt.block_on(portcullis::demo::cli::run(args)) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(2)
        }
    }
}

/// mimalloc rather than glibc malloc: see Cargo.toml (measured with the load benchmark).
#[global_allocator]
static ALLOCATOR: MiMalloc = MiMalloc;

fn main() -> ExitCode {
    let cli = Cli::parse();
    let command = cli.command.unwrap_or(Command::Run { config: None });
    let uses_config = matches!(command, Command::Run { .. } | Command::Check { .. } | Command::Tools(_) | Command::Policy(PolicyCommand::Eval { .. }));
    if cli.config.is_some() && !uses_config {
        eprintln!("error: this command reads no config file: leave out --config");
        return ExitCode::from(2);
    }
    match command {
        Command::DefaultConfig => {
            print!("{}", portcullis::config::EMBEDDED_DEFAULT);
            ExitCode::SUCCESS
        }
        Command::Report { log, html, server } => match summarise_log(&log, html.as_deref(), server.as_deref()) {
            Ok(text) => {
                print!("{text}");
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("error: {e}");
                ExitCode::from(2)
            }
        },
        Command::ExampleBackend { addr, tools } => {
            let rt = match runtime(true) {
                Ok(rt) => rt,
                Err(code) => return code,
            };
            rt.block_on(async move {
                let stop = portcullis::server::shutdown_signal();
                match portcullis_demo::backend::Backend::start_with_tools(addr, tools).await {
                    Ok(b) => {
                        eprintln!("example MCP backend listening on http://{}/mcp", b.addr);
                        tokio::select! {
                            () = b.wait() => {},
                            () = stop => {},
                        }
                        ExitCode::SUCCESS
                    }
                    Err(e) => {
                        eprintln!("error: {e}");
                        ExitCode::from(2)
                    }
                }
            })
        }
        Command::Keygen(args) => match portcullis_client::cli::keygen(&args) {
            Ok(text) => {
                print!("{text}");
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("error: {e}");
                ExitCode::from(2)
            }
        },
        Command::Request(args) => request(&args),
        Command::Demo(args) => demo(&args),
        Command::Healthcheck { url, timeout } => match portcullis::server::admin::probe(&url, timeout) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("unhealthy: {e}");
                ExitCode::FAILURE
            }
        },
        Command::Policy(PolicyCommand::Eval { config, input }) => match load(config_path(config, &cli.config).as_ref()) {
            // A decision the gateway would refuse as policy_error is a failed evaluation.
            Ok(c) => report(portcullis::policy::tooling::eval_file(&c, &input).map(|r| (r.render(), r.verdict.is_ok()))),
            Err(e) => report(Err(e.to_string())),
        },
        Command::Tools(command) => {
            let own = match &command {
                ToolsCommand::Pin { config, .. } | ToolsCommand::Diff { config, .. } => config.clone(),
            };
            let config = match load(config_path(own, &cli.config).as_ref()) {
                Ok(c) => c,
                Err(e) => return report(Err(e.to_string())),
            };
            let rt = match runtime(false) {
                Ok(rt) => rt,
                Err(code) => return code,
            };
            report(rt.block_on(async {
                match command {
                    ToolsCommand::Pin { out, server, .. } => {
                        portcullis::catalog::tooling::pin(&config, server.as_deref(), out.as_deref()).await.map(|text| (text, true))
                    }
                    ToolsCommand::Diff { pins, server, .. } => portcullis::catalog::tooling::diff(&config, server.as_deref(), pins.as_deref()).await,
                }
            }))
        }
        Command::Policy(PolicyCommand::Test { dir }) => {
            report(portcullis::policy::tooling::test(&dir).map(|r| portcullis::policy::tooling::render_tests(&r)).map_err(|e| e.to_string()))
        }
        Command::Check { config } => match load(config_path(config, &cli.config).as_ref())
            .map_err(portcullis::server::StartError::from)
            .and_then(|c| portcullis::server::check(&c).map(|()| c))
        {
            Ok(c) => {
                for w in c.warnings() {
                    eprintln!("warning: {w}");
                }
                println!("{}: configuration is valid (mode = {})", c.origin, c.mode.describe());
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("error: {e}");
                ExitCode::from(2)
            }
        },
        Command::Run { config } => {
            let config = match load(config_path(config, &cli.config).as_ref()) {
                Ok(c) => c,
                Err(e) => {
                    eprintln!("error: {e}");
                    return ExitCode::from(2);
                }
            };
            // Declared before the runtime so it is dropped (flushing spans) after it.
            let _otel = match portcullis::otel::init_tracing(&config.log.level, config.log.otlp_endpoint.as_deref()) {
                Ok(guard) => guard,
                Err(e) => {
                    eprintln!("error: {e}");
                    return ExitCode::from(2);
                }
            };
            let rt = match runtime(true) {
                Ok(rt) => rt,
                Err(code) => return code,
            };
            rt.block_on(async move {
                let stop = portcullis::server::shutdown_signal();
                match portcullis::server::start(config).await {
                    Ok(running) => {
                        running.run_until(stop).await;
                        ExitCode::SUCCESS
                    }
                    Err(e) => {
                        eprintln!("error: {e}");
                        ExitCode::from(2)
                    }
                }
            })
        }
    }
}
