//! The deployment artifacts under deploy/ refer only to files that exist, and their paths,
//! ports and config keys match the code: every config they carry passes `portcullis check`.
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is a failed test

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use portcullis::config::Config;
use serde_json::Value;

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn read(rel: &str) -> String {
    std::fs::read_to_string(repo().join(rel)).unwrap_or_else(|e| panic!("{rel}: {e}"))
}

fn yaml_docs(rel: &str) -> Vec<Value> {
    let text = read(rel);
    serde_yaml_ng::Deserializer::from_str(&text).map(|d| serde::Deserialize::deserialize(d).unwrap_or_else(|e| panic!("{rel}: {e}"))).collect()
}

/// Dockerfile `COPY src dst` lines (build-context copies only), as dst -> src.
fn docker_copies() -> BTreeMap<String, String> {
    read("deploy/Dockerfile")
        .lines()
        .filter(|l| l.starts_with("COPY ") && !l.contains("--from="))
        .filter_map(|l| {
            let parts: Vec<&str> = l.split_whitespace().collect();
            (parts.len() == 3).then(|| (parts[2].to_owned(), parts[1].to_owned()))
        })
        .collect()
}

/// Parses `text` with container paths mapped back to the repository files the image copies.
fn check_config(text: &str, origin: &str, mounts: &BTreeMap<String, PathBuf>) -> Config {
    let mut text = text.to_owned();
    for (container, local) in mounts {
        text = text.replace(container.as_str(), local.to_str().unwrap());
    }
    let cfg = Config::parse(&text, origin, Path::new("/")).unwrap_or_else(|e| panic!("{origin}: {e}"));
    portcullis::server::check(&cfg).unwrap_or_else(|e| panic!("{origin} fails portcullis check: {e}"));
    cfg
}

fn image_mounts() -> BTreeMap<String, PathBuf> {
    docker_copies().into_iter().filter(|(dst, _)| dst.starts_with("/etc/portcullis/")).map(|(dst, src)| (dst, repo().join(src))).collect()
}

#[test]
fn dockerfile_copies_existing_files_and_exposes_the_configured_ports() {
    let copies = docker_copies();
    for src in copies.values() {
        assert!(src == "." || repo().join(src).exists(), "Dockerfile copies missing {src}");
    }
    assert_eq!(copies.get("/etc/portcullis/portcullis.toml").map(String::as_str), Some("deploy/portcullis.toml"));
    let cfg = check_config(&read("deploy/portcullis.toml"), "deploy/portcullis.toml", &image_mounts());
    let docker = read("deploy/Dockerfile");
    let expose = docker.lines().find(|l| l.starts_with("EXPOSE ")).expect("EXPOSE");
    let admin = cfg.admin.expect("admin listener in the image config");
    assert_eq!(expose, format!("EXPOSE {} {}", cfg.listen.addr.port(), admin.port()));
    assert!(docker.contains(&format!("http://127.0.0.1:{}/healthz", admin.port())), "HEALTHCHECK probes the admin port");
    assert!(docker.contains(r#"CMD ["run", "--config", "/etc/portcullis/portcullis.toml"]"#));
    assert!(docker.contains("USER 10001"), "runs as non-root");
    assert!(repo().join(".dockerignore").exists());
}

#[test]
fn compose_wires_gateway_backend_and_redis_as_the_config_says() {
    let compose = &yaml_docs("deploy/compose.yaml")[0];
    let cfg = check_config(&read("deploy/portcullis.toml"), "deploy/portcullis.toml", &image_mounts());
    let services = compose["services"].as_object().unwrap();
    let gw = &services["gateway"];
    assert_eq!(gw["build"]["dockerfile"], "deploy/Dockerfile");
    assert!(repo().join("deploy").join(gw["build"]["context"].as_str().unwrap()).join("deploy/Dockerfile").exists());
    let ports: Vec<&str> = gw["ports"].as_array().unwrap().iter().map(|p| p.as_str().unwrap()).collect();
    assert!(ports.contains(&format!("{0}:{0}", cfg.listen.addr.port()).as_str()), "{ports:?}");
    let upstream = &cfg.upstream.url;
    let backend = &services[upstream.host_str().unwrap()];
    let cmd: Vec<&str> = backend["command"].as_array().unwrap().iter().map(|c| c.as_str().unwrap()).collect();
    assert_eq!(cmd, ["example-backend", "--addr", &format!("0.0.0.0:{}", upstream.port().unwrap())]);
    let redis_host = url::Url::parse(cfg.state.store.redis_url().expect("a Redis store")).unwrap().host_str().unwrap().to_owned();
    assert!(services.contains_key(&redis_host), "state.store names the compose redis service");
}

#[test]
fn kubernetes_manifests_agree_with_each_other_and_the_config() {
    let kustomize = &yaml_docs("deploy/k8s/kustomization.yaml")[0];
    let mut docs = Vec::new();
    for r in kustomize["resources"].as_array().unwrap() {
        docs.extend(yaml_docs(&format!("deploy/k8s/{}", r.as_str().unwrap())));
    }
    let find =
        |kind: &str, name: &str| docs.iter().find(|d| d["kind"] == kind && d["metadata"]["name"] == name).unwrap_or_else(|| panic!("{kind}/{name}")).clone();

    let deploy = find("Deployment", "portcullis");
    assert_eq!(deploy["spec"]["replicas"], 2);
    let pod = &deploy["spec"]["template"]["spec"];
    let c = &pod["containers"][0];
    let args: Vec<&str> = c["args"].as_array().unwrap().iter().map(|a| a.as_str().unwrap()).collect();
    let config_path = args[args.iter().position(|a| *a == "--config").unwrap() + 1];

    // Mount the ConfigMaps where the Deployment mounts them, and check the config passes.
    let dir = tempfile::tempdir().unwrap();
    let mut mounts = BTreeMap::new();
    for m in c["volumeMounts"].as_array().unwrap() {
        let vol = pod["volumes"].as_array().unwrap().iter().find(|v| v["name"] == m["name"]).unwrap();
        let cm = find("ConfigMap", vol["configMap"]["name"].as_str().unwrap());
        let local = dir.path().join(m["name"].as_str().unwrap());
        std::fs::create_dir_all(&local).unwrap();
        for (file, content) in cm["data"].as_object().unwrap() {
            std::fs::write(local.join(file), content.as_str().unwrap()).unwrap();
        }
        mounts.insert(m["mountPath"].as_str().unwrap().to_owned(), local);
    }
    let config_file = mounts
        .iter()
        .find_map(|(mp, local)| config_path.strip_prefix(mp.as_str()).map(|rest| local.join(rest.trim_start_matches('/'))))
        .expect("config file is mounted");
    let cfg = check_config(&std::fs::read_to_string(&config_file).unwrap(), "deploy/k8s/configmap.yaml", &mounts);

    let port = |name: &str| c["ports"].as_array().unwrap().iter().find(|p| p["name"] == name).unwrap()["containerPort"].as_u64().unwrap();
    assert_eq!(port("http"), u64::from(cfg.listen.addr.port()));
    assert_eq!(port("admin"), u64::from(cfg.admin.unwrap().port()));
    assert_eq!(c["readinessProbe"]["httpGet"]["path"], "/readyz");
    assert_eq!(c["livenessProbe"]["httpGet"]["path"], "/healthz");
    assert_eq!(c["readinessProbe"]["httpGet"]["port"], "admin");
    assert!(c["resources"]["limits"]["memory"].is_string() && c["resources"]["limits"]["cpu"].is_string());
    assert_eq!(pod["securityContext"]["runAsNonRoot"], true);

    let labels = &deploy["spec"]["template"]["metadata"]["labels"];
    assert_eq!(find("PodDisruptionBudget", "portcullis")["spec"]["selector"]["matchLabels"], *labels);
    assert_eq!(find("Service", "portcullis")["spec"]["selector"], *labels);
    let redis_host = url::Url::parse(cfg.state.store.redis_url().expect("a Redis store")).unwrap().host_str().unwrap().to_owned();
    let redis_svc = find("Service", &redis_host);
    assert_eq!(redis_svc["spec"]["ports"][0]["port"], url::Url::parse(cfg.state.store.redis_url().expect("a Redis store")).unwrap().port().unwrap());
}

#[test]
fn systemd_unit_runs_the_checked_config_and_reloads_with_sighup() {
    let unit = read("deploy/systemd/portcullis.service");
    assert!(unit.contains("ExecStart=/usr/local/bin/portcullis run --config /etc/portcullis/portcullis.toml"));
    assert!(unit.contains("ExecStartPre=/usr/local/bin/portcullis check --config /etc/portcullis/portcullis.toml"));
    assert!(unit.contains("ExecReload=/bin/kill -HUP $MAINPID"));
    assert!(unit.contains("User=portcullis"));
    // The same config file the image ships, with the same policy folder.
    let toml = read("deploy/portcullis.toml");
    assert!(toml.contains(r#"paths = ["/etc/portcullis/policies"]"#));
}

/// What deploy/compose.yaml's comment tells a user to do, with the compose services as real
/// processes on 127.0.0.1: a key pasted into deploy/portcullis.toml with `keygen --static-key`,
/// the image's config, the example backend, Redis; then a request signed for
/// `http://localhost:8080/mcp`, as `portcullis request` signs it, is verified and forwarded.
#[tokio::test(flavor = "multi_thread")]
async fn compose_stack_verifies_an_agent_whose_key_the_comment_says_to_add() {
    use crate::common::{self, backend::Backend, redis::RedisServer};
    let dir = tempfile::tempdir().unwrap();
    let keygen = std::process::Command::new(env!("CARGO_BIN_EXE_portcullis"))
        .args(["keygen", "--out"])
        .arg(dir.path().join("agent"))
        .args(["--static-key", "https://my-agent.example"])
        .output()
        .unwrap();
    assert!(keygen.status.success(), "{}", String::from_utf8_lossy(&keygen.stderr));
    let compose = read("deploy/compose.yaml");
    assert!(compose.contains("portcullis keygen --out agent --static-key https://my-agent.example >> deploy/portcullis.toml"), "{compose}");
    assert!(compose.contains("./portcullis.toml:/etc/portcullis/portcullis.toml"), "the config is mounted, so the pasted key needs no rebuild");

    let backend = Backend::start("127.0.0.1:0".parse().unwrap()).await.unwrap();
    let redis = RedisServer::start();
    let log = dir.path().join("decisions.jsonl");
    let text = read("deploy/portcullis.toml") + &String::from_utf8(keygen.stdout).unwrap();
    let text = common::TomlEdit::of(&text)
        .set("upstream.url", format!("http://{}", backend.addr))
        .set("state.store", redis.url())
        .set("admin.addr", "127.0.0.1:0")
        .set("log.decisions", log.display().to_string())
        .text();
    let mut mounted = text;
    for (container, local) in image_mounts() {
        mounted = mounted.replace(container.as_str(), local.to_str().unwrap());
    }
    // Exactly the config's authorities: none is added for the test's own port.
    let gw = common::Gateway::start_exact(Config::parse(&mounted, "deploy/portcullis.toml", Path::new("/")).unwrap()).await;

    let key = portcullis_client::load_private_jwk(&dir.path().join("agent/agent.jwk")).unwrap();
    let signer = portcullis::signature::Signer::new(key, "https://my-agent.example").unwrap();
    let body =
        serde_json::json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "weather.get", "arguments": {"city": "Paris"}}}).to_string();
    let mut req = http::Request::builder()
        .method("POST")
        .uri("http://localhost:8080/mcp")
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .body(body.into_bytes())
        .unwrap();
    signer.sign_request(&mut req, portcullis_wire::UnixTime::now()).unwrap();
    let (parts, body) = req.into_parts();
    // Sent to where the gateway listens here, named as a user reaches it through compose.
    let resp = common::client().post(gw.url("/mcp")).headers(parts.headers).header("host", "localhost:8080").body(body).send().await.unwrap();
    assert_eq!(resp.status(), 200);
    assert!(resp.text().await.unwrap().contains("Sunny in Paris"));
    let lines = common::wait_for_decision_lines(&log, 1).await;
    assert_eq!(lines[0]["agent"], "https://my-agent.example", "the agent is verified, not just forwarded: {}", lines[0]);
    let identity_findings: Vec<&serde_json::Value> = lines[0]["findings"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| ["digest", "signature", "key", "replay"].contains(&f["stage"].as_str().unwrap_or_default()))
        .collect();
    assert!(identity_findings.is_empty(), "no identity stage found anything: {}", lines[0]);
    gw.shutdown().await;
    backend.stop();
}
