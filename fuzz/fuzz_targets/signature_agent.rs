//! `Signature-Agent` parsing (untrusted header bytes). Invariants: the legacy form is chosen
//! exactly when the first non-SP character is `"`; every usable agent is https with a host and
//! no fragment, and a `directory` agent is an origin.
#![no_main]

use libfuzzer_sys::fuzz_target;
use portcullis_wire::signature::parse::parse_signature_agent;
use portcullis_wire::signature::{AgentForm, AgentKind};

fuzz_target!(|data: &[u8]| {
    let Ok(field) = std::str::from_utf8(data) else { return };
    let Ok(members) = parse_signature_agent(field) else { return };
    let is_legacy = field.trim_start_matches(' ').starts_with('"');
    if is_legacy {
        assert_eq!(members.len(), 1);
        assert!(members[0].key.is_none());
    }
    for m in &members {
        assert_eq!(m.key.is_none(), is_legacy);
        let Ok(agent) = &m.agent else { continue };
        assert_eq!(agent.form() == &AgentForm::Legacy, is_legacy);
        let url = agent.url();
        assert_eq!(url.scheme(), "https");
        assert!(url.host_str().is_some() && url.fragment().is_none() && url.username().is_empty());
        if agent.kind() == AgentKind::Directory {
            assert_eq!(url.path(), "/");
            assert!(url.query().is_none());
            assert!(agent.origin().starts_with("https://"));
        }
    }
});
