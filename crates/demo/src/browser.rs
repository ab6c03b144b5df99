//! Just enough of a browser for the approval page, shared by the approval tests and the demo
//! tour: redirects followed (as a browser does, the next request a GET), the gateway's cookies
//! kept and sent back, and the gateway's public origin (the one its links name, e.g.
//! `https://mcp.example.com`) mapped onto the address it really listens on.

/// One answered page.
#[derive(Debug)]
pub struct Page {
    /// The final status, after redirects.
    pub status: u16,
    /// Its headers.
    pub headers: http::HeaderMap,
    /// Its body, as text.
    pub body: String,
}

impl Page {
    /// The value of the page's hidden `csrf` form field.
    pub fn csrf(&self) -> Option<&str> {
        let marker = "name=\"csrf\" value=\"";
        self.body.split_once(marker).and_then(|(_, rest)| rest.split('"').next())
    }
}

/// A cookie-keeping, redirect-following client for one gateway.
pub struct Browser {
    http: reqwest::Client,
    public: String,
    local: String,
    jar: Vec<(String, String)>,
    /// Every `Set-Cookie` line the gateway sent, in order.
    pub set_cookies: Vec<String>,
}

impl Browser {
    /// A browser over `http` (build it with redirects off and the test CA trusted) for the
    /// gateway whose public origin `public` is served at `local` (e.g. `http://127.0.0.1:4000`).
    pub fn new(http: reqwest::Client, public: &str, local: &str) -> Browser {
        Browser {
            http,
            public: public.trim_end_matches('/').to_owned(),
            local: local.trim_end_matches('/').to_owned(),
            jar: Vec::new(),
            set_cookies: Vec::new(),
        }
    }

    /// [`Browser::new`] over a client of its own that trusts `ca_pem` (the test CA the issuer's
    /// certificate chains to), with redirects left to the browser and no proxy.
    pub fn trusting(ca_pem: &[u8], public: &str, local: &str) -> Result<Browser, String> {
        let root = reqwest::Certificate::from_pem(ca_pem).map_err(|e| e.to_string())?;
        let http = reqwest::Client::builder()
            .add_root_certificate(root)
            .redirect(reqwest::redirect::Policy::none())
            .no_proxy()
            .timeout(std::time::Duration::from_secs(10))
            .build()
            .map_err(|e| e.to_string())?;
        Ok(Browser::new(http, public, local))
    }

    /// GET `url`, following redirects.
    pub async fn get(&mut self, url: &str) -> Result<Page, String> {
        self.open(reqwest::Method::GET, url, None).await
    }

    /// POST `form` (url-encoded) to `url`, following redirects.
    pub async fn post_form(&mut self, url: &str, form: &[(&str, &str)]) -> Result<Page, String> {
        let body = url::form_urlencoded::Serializer::new(String::new()).extend_pairs(form).finish();
        self.open(reqwest::Method::POST, url, Some(body)).await
    }

    async fn open(&mut self, method: reqwest::Method, url: &str, form: Option<String>) -> Result<Page, String> {
        let (mut method, mut url, mut form) = (method, url.to_owned(), form);
        for _ in 0..10 {
            if url.starts_with('/') {
                url = format!("{}{url}", self.public);
            }
            let (target, ours) = match url.strip_prefix(&self.public) {
                Some(path) => (format!("{}{path}", self.local), true),
                None => (url.clone(), false),
            };
            let mut req = self.http.request(method.clone(), &target);
            if ours && !self.jar.is_empty() {
                req = req.header("cookie", self.jar.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join("; "));
            }
            if let Some(f) = form.take() {
                req = req.header("content-type", "application/x-www-form-urlencoded").body(f);
            }
            let resp = req.send().await.map_err(|e| format!("{method} {target}: {e}"))?;
            if ours {
                for c in resp.headers().get_all("set-cookie") {
                    let line = c.to_str().map_err(|_| "a Set-Cookie header that is not text".to_owned())?.to_owned();
                    if let Some((name, value)) = line.split(';').next().and_then(|pair| pair.split_once('=')) {
                        self.jar.retain(|(n, _)| n != name);
                        if !value.is_empty() && !line.contains("Max-Age=0") {
                            self.jar.push((name.to_owned(), value.to_owned()));
                        }
                    }
                    self.set_cookies.push(line);
                }
            }
            let status = resp.status().as_u16();
            if (301..=303).contains(&status) {
                url = resp.headers().get("location").and_then(|v| v.to_str().ok()).ok_or_else(|| format!("a {status} without Location"))?.to_owned();
                method = reqwest::Method::GET;
                continue;
            }
            let headers = resp.headers().clone();
            let body = resp.text().await.map_err(|e| e.to_string())?;
            return Ok(Page { status, headers, body });
        }
        Err(format!("too many redirects, at {url}"))
    }
}

/// Headless Chromium, for what a person's browser really makes of a page: the approval tests
/// lay a page the gateway served out in it (loaded from a file, so no network) and read what a
/// probe script found.
pub struct Chromium {
    command: &'static str,
}

impl Chromium {
    /// The installed Chromium (`chromium` or `chromium-browser`), if any.
    pub fn find() -> Option<Chromium> {
        ["chromium", "chromium-browser"]
            .into_iter()
            .find(|c| std::process::Command::new(c).arg("--version").output().is_ok_and(|o| o.status.success()))
            .map(|command| Chromium { command })
    }

    /// Lays `html` out in a `width`×`height` window, runs `probe` (the body of a JavaScript
    /// function returning a string) once the page is laid out, and returns what it returned.
    pub fn probe(&self, html: &str, (width, height): (u32, u32), probe: &str) -> Result<String, String> {
        let script = format!(
            "<script>(function () {{ var out = document.createElement('pre'); out.id = 'portcullis-probe'; \
             out.textContent = (function () {{ {probe} }})(); document.body.appendChild(out); }})();</script>"
        );
        let page = match html.rfind("</body>") {
            Some(at) => format!("{}{script}{}", &html[..at], &html[at..]),
            None => format!("{html}{script}"),
        };
        let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
        let out = self.run(dir.path(), &page, (width, height), &["--dump-dom".to_owned()])?;
        let dom = String::from_utf8_lossy(&out);
        let text =
            dom.split("<pre id=\"portcullis-probe\">").nth(1).and_then(|s| s.split("</pre>").next()).ok_or_else(|| format!("the probe did not run: {dom}"))?;
        // --dump-dom serializes text with these three escaped.
        Ok(text.replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&"))
    }

    /// A PNG screenshot of `html` in a `width`×`height` window.
    pub fn screenshot(&self, html: &str, (width, height): (u32, u32)) -> Result<Vec<u8>, String> {
        let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
        let shot = dir.path().join("page.png");
        self.run(dir.path(), html, (width, height), &[format!("--screenshot={}", shot.display())])?;
        std::fs::read(&shot).map_err(|e| e.to_string())
    }

    fn run(&self, dir: &std::path::Path, html: &str, (width, height): (u32, u32), extra: &[String]) -> Result<Vec<u8>, String> {
        let file = dir.join("page.html");
        std::fs::write(&file, html).map_err(|e| e.to_string())?;
        let profile = dir.join("profile");
        let out = std::process::Command::new(self.command)
            .args([
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-background-networking",
                "--no-first-run",
                "--disable-dev-shm-usage",
                "--hide-scrollbars",
            ])
            .arg(format!("--window-size={width},{height}"))
            .arg(format!("--user-data-dir={}", profile.display()))
            .args(extra)
            .arg(format!("file://{}", file.display()))
            .output()
            .map_err(|e| format!("{}: {e}", self.command))?;
        if !out.status.success() {
            return Err(format!("{} failed: {}", self.command, String::from_utf8_lossy(&out.stderr)));
        }
        Ok(out.stdout)
    }
}
