//! Replay store: each signature fingerprint or nonce is accepted once until it expires (stage 6).
