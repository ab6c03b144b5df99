//! Findings: every refusal one request earned, each named by the stage that judged it
//! (docs/rollout.md, docs/design.md "Decision log").
//!
//! In enforce mode the first refusal decides and the pipeline stops there, so a request has at
//! most one finding. In monitor mode (or for a stage group in monitor mode) the pipeline keeps
//! judging past a refusal, each later stage working on what is verified, so the decision log can
//! say everything enforcement would have refused: an unsigned call to a tool the policy denies
//! has two findings, `signature` then `policy`.
//!
//! [`Judge`] collects them while the pipeline runs. It is the only thing here that knows the
//! [`Modes`], and it only answers "stop now?" (a refusal from a group in enforce mode stops
//! judging, as enforce mode always did); `decision::apply_mode` decides the outcome.
//!
//! Which stage a refusal comes from is [`Stage::of`], one arm per [`Denial`] variant: a
//! stage added to the pipeline converts its errors into a `Denial` as every stage does, and its
//! findings are named by that mapping without any change to the stage.

use crate::config::{Group, Modes};
use crate::denial::Denial;
use crate::stage::Stage;
use crate::telemetry::FindingLine;

/// The stages a finding can name, in the order the report lists them: every [`Stage`] but
/// [`Stage::Upstream`] (a failed forward is `upstream_error`, not a finding).
pub const JUDGED: [Stage; 14] = [
    Stage::Body,
    Stage::Digest,
    Stage::Signature,
    Stage::Key,
    Stage::Replay,
    Stage::Token,
    Stage::Session,
    Stage::Mcp,
    Stage::Policy,
    Stage::Quota,
    Stage::Catalog,
    Stage::Approval,
    Stage::Idempotency,
    Stage::UpstreamAuth,
];

/// What findings need of a [`Stage`] (the stage names are in `stage`, below everything): its
/// name in a decision log, its `[mode]` group, and the stage each refusal comes from.
impl Stage {
    /// The stage a decision log names (`findings[].stage`), if it is one.
    pub fn from_name(name: &str) -> Option<Stage> {
        JUDGED.into_iter().find(|s| s.as_str() == name)
    }

    /// The `[mode]` group whose mode applies to this stage's refusals.
    pub fn group(self) -> Group {
        match self {
            Stage::Digest | Stage::Signature | Stage::Key | Stage::Replay => Group::Identity,
            Stage::Token => Group::Token,
            Stage::Policy | Stage::Quota | Stage::Catalog | Stage::Approval | Stage::Idempotency => Group::Policy,
            Stage::Body | Stage::Session | Stage::Mcp | Stage::UpstreamAuth | Stage::Upstream => Group::Default,
        }
    }

    /// The stage a refusal comes from. No `_` arm: a new variant must choose. The pipeline
    /// names the stage itself where one refusal can come from several stages (a state store
    /// that cannot be reached: replay, session, quota or journal); this mapping is used for
    /// refusals returned without that (`?`), and for those made before the pipeline.
    pub fn of(denial: &Denial) -> Stage {
        match denial {
            Denial::BodyTooLarge { .. }
            | Denial::BodyTimeout { .. }
            | Denial::BodyUnreadable(_)
            | Denial::Overloaded
            | Denial::Shed
            | Denial::HeadsOverloaded
            | Denial::RequestTimeout { .. }
            | Denial::NotFound
            | Denial::BadTarget(_) => Stage::Body,
            Denial::StreamsFull => Stage::Upstream,
            Denial::Digest(_) => Stage::Digest,
            Denial::Signature(_) => Stage::Signature,
            Denial::KeyResolution(_) => Stage::Key,
            Denial::ReplayedSignature => Stage::Replay,
            Denial::OAuthRequired | Denial::InvalidToken(_) | Denial::InvalidDpopProof(_) | Denial::InvalidRequest(_) | Denial::IssuerUnavailable(_) => {
                Stage::Token
            }
            Denial::Mcp(_) => Stage::Mcp,
            Denial::SessionNotFound(_) | Denial::ResumeWithoutSession | Denial::SessionConflict(_) => Stage::Session,
            Denial::Policy(_) | Denial::InsufficientScope { .. } | Denial::AccessDenied { .. } => Stage::Policy,
            Denial::RateLimited { .. } => Stage::Quota,
            Denial::Idempotency(_) => Stage::Idempotency,
            Denial::Catalog(_) => Stage::Catalog,
            Denial::ApprovalRequired(_)
            | Denial::HumanApprovalRequired(_)
            | Denial::ApprovalDenied
            | Denial::ApprovalUnavailable
            | Denial::CallTooLargeToShow(_) => Stage::Approval,
            // The stores behind the policy group (quotas, journal, approvals) are the ones a
            // stage would return with `?`; replay and sessions are judged by name.
            Denial::StateUnavailable { .. } | Denial::CallerLimitExceeded { .. } => Stage::Policy,
            Denial::DelegationRefused { .. } | Denial::UpstreamCredentialsUnavailable => Stage::UpstreamAuth,
        }
    }
}

/// One refusal a request earned: where, the `error` code and the `reason` (the same text the
/// client gets or would get; never a credential, body or argument).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finding {
    /// The stage that judged it.
    pub stage: Stage,
    /// `Denial::code()`.
    pub error: &'static str,
    /// `Denial::reason()`.
    pub reason: String,
    /// A resource bound (`Denial::is_resource_bound`): enforced whatever the mode.
    pub is_resource_bound: bool,
}

impl Finding {
    /// The finding `denial` is, judged at `stage`.
    pub fn new(stage: Stage, denial: &Denial) -> Finding {
        Finding { stage, error: denial.code(), reason: denial.reason(), is_resource_bound: denial.is_resource_bound() }
    }

    /// Whether this finding refuses the request under `modes`: its stage group enforces, or it
    /// is a resource bound, which holds in monitor mode too (decision 13).
    pub fn is_enforced(&self, modes: &Modes) -> bool {
        self.is_resource_bound || modes.is_enforcing(self.stage.group())
    }

    /// `denial` at the stage [`Stage::of`] names.
    pub fn of(denial: &Denial) -> Finding {
        Finding::new(Stage::of(denial), denial)
    }

    /// The decision-log form.
    pub fn line(&self) -> FindingLine {
        FindingLine { stage: self.stage.as_str(), error: self.error, reason: self.reason.clone() }
    }
}

/// Collects one request's findings while the pipeline runs (see the module docs).
#[derive(Debug)]
pub struct Judge {
    modes: Modes,
    findings: Vec<Finding>,
    /// The first refusal, kept whole: in monitor mode it is the one the log leads with.
    first: Option<Denial>,
    /// A refusal from an enforcing group stopped the pipeline.
    is_stopped: bool,
}

/// What the pipeline found, once it is done: `None` when nothing was refused.
#[derive(Debug)]
pub struct Judged {
    /// The refusal that decides: the first from an enforcing group, else the first of all.
    pub decisive: Denial,
    /// Every finding, in pipeline order.
    pub findings: Vec<Finding>,
}

impl Judge {
    /// A judge for one request under `modes`.
    pub fn new(modes: Modes) -> Judge {
        Judge { modes, findings: Vec::new(), first: None, is_stopped: false }
    }

    /// Notes a stage's result. `Ok(Some(v))`: the stage passed. `Ok(None)`: it refused, in a
    /// group in monitor mode: the finding is kept and judging goes on without the stage's
    /// result. `Err(denial)`: it refused in a group in enforce mode: the pipeline stops (`?`)
    /// and this refusal decides.
    pub fn judge<T, E: Into<Denial>>(&mut self, stage: Stage, result: Result<T, E>) -> Result<Option<T>, Denial> {
        match result {
            Ok(v) => Ok(Some(v)),
            Err(e) => {
                let denial = e.into();
                let finding = Finding::new(stage, &denial);
                let is_enforced = finding.is_enforced(&self.modes);
                self.findings.push(finding);
                if is_enforced {
                    self.is_stopped = true;
                    Err(denial)
                } else {
                    if self.first.is_none() {
                        self.first = Some(denial);
                    }
                    Ok(None)
                }
            }
        }
    }

    /// [`Judge::judge`] with the stage [`Stage::of`] the refusal names (for a step that
    /// can fail at more than one stage, e.g. signature then key).
    pub fn judge_any<T>(&mut self, result: Result<T, Denial>) -> Result<Option<T>, Denial> {
        let stage = result.as_ref().err().map_or(Stage::Body, Stage::of);
        self.judge(stage, result)
    }

    /// Whether a stage of `group` refused this request so far.
    pub fn has_found(&self, group: Group) -> bool {
        self.findings.iter().any(|f| f.stage.group() == group)
    }

    /// Ends judging. `outcome` is the pipeline's: `Err` is either the refusal that stopped it,
    /// or one a stage returned directly (`?`), which is judged here by [`Stage::of`].
    pub fn finish(mut self, outcome: Result<(), Denial>) -> Option<Judged> {
        let decisive = match outcome {
            Ok(()) => self.first?,
            Err(denial) if self.is_stopped => denial,
            Err(denial) => {
                let finding = Finding::of(&denial);
                let is_enforced = finding.is_enforced(&self.modes);
                self.findings.push(finding);
                match self.first {
                    Some(first) if !is_enforced => first,
                    _ => denial,
                }
            }
        };
        Some(Judged { decisive, findings: self.findings })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Mode;
    use crate::signature::SignatureError;

    fn denied() -> Denial {
        Denial::AccessDenied { reason: "tool_not_allowed".into() }
    }

    #[test]
    fn enforce_mode_stops_at_the_first_refusal() {
        let mut j = Judge::new(Modes::uniform(Mode::Enforce));
        assert_eq!(j.judge(Stage::Digest, Ok::<_, Denial>(1)).ok(), Some(Some(1)));
        let stop = j.judge::<(), _>(Stage::Signature, Err(SignatureError::Missing)).expect_err("stops");
        let judged = j.finish(Err(stop)).expect("refused");
        assert_eq!(judged.decisive.code(), "invalid_agent_credentials");
        assert_eq!(judged.findings.len(), 1);
        assert_eq!(judged.findings[0].stage, Stage::Signature);
    }

    #[test]
    fn monitor_mode_keeps_every_finding_and_leads_with_the_first() {
        let mut j = Judge::new(Modes::uniform(Mode::Monitor));
        assert!(j.judge::<(), _>(Stage::Signature, Err(SignatureError::Missing)).expect("goes on").is_none());
        assert!(j.has_found(Group::Identity) && !j.has_found(Group::Policy));
        assert!(j.judge::<(), _>(Stage::Policy, Err(denied())).expect("goes on").is_none());
        let judged = j.finish(Ok(())).expect("refused");
        assert_eq!(judged.decisive.code(), "invalid_agent_credentials");
        let stages: Vec<_> = judged.findings.iter().map(|f| (f.stage.as_str(), f.error)).collect();
        assert_eq!(stages, [("signature", "invalid_agent_credentials"), ("policy", "agent_access_denied")]);
        assert!(Judge::new(Modes::uniform(Mode::Monitor)).finish(Ok(())).is_none(), "nothing found");
    }

    #[test]
    fn an_enforcing_group_decides_and_earlier_monitored_findings_stay_listed() {
        let modes = Modes::uniform(Mode::Monitor).with(Group::Policy, Mode::Enforce);
        let mut j = Judge::new(modes);
        assert!(j.judge::<(), _>(Stage::Signature, Err(SignatureError::Missing)).expect("identity is monitored").is_none());
        let stop = j.judge::<(), _>(Stage::Policy, Err(denied())).expect_err("policy enforces");
        let judged = j.finish(Err(stop)).expect("refused");
        assert_eq!(judged.decisive.code(), "agent_access_denied");
        assert_eq!(judged.findings.len(), 2);
    }

    #[test]
    fn a_refusal_returned_directly_is_named_by_its_variant() {
        let mut j = Judge::new(Modes::uniform(Mode::Monitor));
        assert!(j.judge::<(), _>(Stage::Token, Err(Denial::OAuthRequired)).expect("goes on").is_none());
        let judged = j.finish(Err(Denial::RateLimited { retry_after: std::time::Duration::from_secs(3) })).expect("refused");
        assert_eq!(judged.decisive.code(), "oauth_required", "monitor mode leads with the first finding");
        assert_eq!(judged.findings[1].stage, Stage::Quota);
        let judged = Judge::new(Modes::uniform(Mode::Enforce)).finish(Err(Denial::ReplayedSignature)).expect("refused");
        assert_eq!((judged.decisive.code(), judged.findings[0].stage), ("replayed_signature", Stage::Replay));
    }
}
